//! One engine's run: the variants of the command (engine x threads, and the log-only ceiling),
//! and for each a fresh file system, the worker in its memory cgroup, its time series, and the
//! record of its totals.

use std::time::Instant;

use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::{BenchError, Result};
use crate::mobility::engines::{self, EngineConfig, EngineKind};
use crate::mobility::report::write_amplification;
use crate::mobility::runner::{self, RunningWorker};
use crate::mobility::worker::{Tick, WorkerResult, WorkerSpec};
use crate::mobility::workload::WorkloadConfig;

use super::args::SteadyArgs;
use super::diagnose::diagnose;
use super::results::{Diagnosis, LOG_ONLY_LABEL, Point, SteadyRun};
use super::series::{CgroupReader, Series, used_bytes};
use super::verdict::summarize_points;

/// One engine at one thread count (and departure probability) of the run.
pub(super) struct Variant {
    pub(super) kind: EngineKind,
    pub(super) threads: usize,
    pub(super) depart_probability: f64,
    /// How reports name it: the engine, with its thread count when threads are swept.
    pub(super) label: String,
}

/// Every (engine, threads) of the run, engines outermost, plus roamkv's log-only ceiling.
pub(super) fn variants(args: &SteadyArgs, engines: &[EngineKind]) -> Vec<Variant> {
    let sweep = args.threads.len() > 1;
    let label = |name: &str, threads: usize| {
        if sweep {
            format!("{name} {threads}t")
        } else {
            name.to_string()
        }
    };
    let mut variants = Vec::new();
    for kind in engines {
        for &threads in &args.threads {
            variants.push(Variant {
                kind: *kind,
                threads,
                depart_probability: args.depart_probability,
                label: label(kind.name(), threads),
            });
        }
    }
    if args.with_log_only {
        for &threads in &args.threads {
            variants.push(Variant {
                kind: EngineKind::Roamkv,
                threads,
                depart_probability: 1.0,
                label: label(LOG_ONLY_LABEL, threads),
            });
        }
    }
    variants
}

/// Runs one engine on a fresh file system; returns its record and its time series.
pub(super) fn run_engine(
    args: &SteadyArgs,
    fs: FsSpec,
    variant: &Variant,
) -> Result<(SteadyRun, Vec<Point>)> {
    let kind = variant.kind;
    let memory_bytes = args.memory_mib << 20;
    // As in `bench mobility`: the engine's own caches get a quarter of the budget.
    let config = engines::EngineConfig {
        lazy_move_rule: args.move_rule == "lazy",
        index_after_ack: args.index_apply == "after-ack",
        ..runner::engine_config(
            kind,
            args.durability,
            memory_bytes / 4,
            args.management_time_ms,
        )
    };
    let fixture = Fixture::create(fs, args.disk_gib << 30)?;
    let spec = worker_spec(args, variant, config.clone(), &fixture);
    fixture.quiesce()?;
    let base_used = used_bytes(fixture.mount_dir());
    let before = DevStat::read(fixture.device_name())?;
    let total_s = args.warmup_seconds + args.seconds;
    let bar = progress_bar(&variant.label, total_s)?;

    let worker = RunningWorker::start(&spec, memory_bytes)?;
    let memory_capped = worker.memory_capped;
    let mut series = Series {
        kind,
        label: &variant.label,
        fixture: &fixture,
        base_used,
        before,
        cgroup: CgroupReader::new(&worker),
        bar,
        points: Vec::new(),
        previous: None,
        first_measured: None,
        next_line_s: 0,
    };
    let (result, cgroup) = worker.finish(|line| series.tick(line));
    series.bar.finish_and_clear();
    let Series {
        points,
        previous,
        first_measured,
        ..
    } = series;
    fixture.quiesce()?;
    let after = DevStat::read(fixture.device_name())?;
    let mut run = SteadyRun {
        engine: variant.label.clone(),
        engine_kind: kind.name().into(),
        depart_probability: variant.depart_probability,
        memory_capped,
        durability: args.durability.name().into(),
        threads: variant.threads,
        memory_bytes_max: cgroup.as_ref().map_or(0, |c| c.max_usage_bytes()),
        memory_limit_bytes: memory_bytes,
        space_bytes_end: used_bytes(fixture.mount_dir()).saturating_sub(base_used),
        config: engines::describe(&config),
        ..SteadyRun::default()
    };
    drop(cgroup);
    summarize_points(&mut run, &points);
    match result {
        Ok(w) => record_outcome(&mut run, &w, (before, after), first_measured, previous),
        Err(e) => {
            let at = points.last().map_or(0.0, |p| p.t_s);
            run.failure = Some(format!("after {at:.0} s: {e}"));
        }
    }
    Ok((run, points))
}

/// The worker's instructions: the mobility workload with TPCx-IoT's query pair at its own sizes
/// (the last 30 s, and a 30 s window in the 1800 s before), a tick every second.
fn worker_spec(
    args: &SteadyArgs,
    variant: &Variant,
    engine: EngineConfig,
    fixture: &Fixture,
) -> WorkerSpec {
    WorkerSpec {
        engine,
        workload: WorkloadConfig {
            value_bytes: args.value_bytes,
            depart_probability: variant.depart_probability,
            management_time_ms: args.management_time_ms,
            seed: args.seed,
            query_window_ms: 30_000,
            query_history_ms: 1_800_000,
            ..WorkloadConfig::default()
        },
        threads: variant.threads,
        warmup_ms: args.warmup_seconds * 1000,
        duration_ms: args.seconds * 1000,
        dir: fixture.mount_dir().join("db"),
        device_name: Some(fixture.device_name().to_string()),
        tick_ms: Some(1000),
    }
}

/// A completed run's figures: throughput and latencies from the worker, write amplification from
/// the device's counters between the start of the measured phase and the end.
/// A finished run's totals and its diagnosis (from the first measured tick to the last).
fn record_outcome(
    run: &mut SteadyRun,
    w: &WorkerResult,
    (before, after): (DevStat, DevStat),
    first_measured: Option<Tick>,
    previous: Option<(Tick, DevStat, Instant)>,
) {
    record_result(run, w, before, after);
    if let (Some(first), Some((last, _, _))) = (&first_measured, &previous) {
        let device = std::mem::take(&mut run.diagnosis);
        run.diagnosis = Diagnosis {
            device_bytes_read: device.device_bytes_read,
            read_write_ratio: device.read_write_ratio,
            put_p50_us: w.put_p50_us,
            put_p999_us: w.put_p999_us,
            ..diagnose(first, last, w.user_bytes)
        };
    }
}

fn record_result(run: &mut SteadyRun, w: &WorkerResult, before: DevStat, after: DevStat) {
    let start = w
        .device_at_measure_start
        .map_or(before, |(writes, sectors, flushes)| DevStat {
            writes,
            sectors_written: sectors,
            flushes,
            ..before
        });
    let device_bytes = after.delta(&start).bytes_written();
    let read_start = w
        .device_sectors_read_at_measure_start
        .unwrap_or(before.sectors_read);
    let device_bytes_read = after.sectors_read.saturating_sub(read_start) * 512;
    run.diagnosis.device_bytes_read = device_bytes_read;
    run.diagnosis.read_write_ratio = device_bytes_read as f64 / device_bytes.max(1) as f64;
    run.completed = true;
    run.ops_per_sec = (w.puts + w.queries) as f64 / w.elapsed_s.max(1e-9);
    run.write_amplification = write_amplification(device_bytes, w.user_bytes);
    run.put_p99_us = w.put_p99_us;
    let cpu_us = w.cpu_seconds * 1e6;
    run.cpu_us_per_op = cpu_us / (w.puts + w.queries).max(1) as f64;
    run.cpu_cores = cpu_us / (w.elapsed_s.max(1e-9) * 1e6);
    run.query_p50_us = w.query_p50_us;
    run.query_p99_us = w.query_p99_us;
    run.queries = w.queries;
    run.user_bytes = w.user_bytes;
    run.device_bytes_written = device_bytes;
    run.read_checks = w.read_checks;
    run.read_check_failures = w.read_check_failures;
}

fn progress_bar(engine: &str, total_s: u64) -> Result<indicatif::ProgressBar> {
    let bar = indicatif::ProgressBar::new(total_s);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{engine:>14} {{bar:30}} {{pos}}/{{len}} s  {{msg}}"
        ))
        .map_err(|e| BenchError::Run(e.to_string()))?,
    );
    Ok(bar)
}
