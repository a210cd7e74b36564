//! `roamkv bench steady`: the long run. Each engine ingests the mobility workload for a warm-up
//! and a measured phase far longer than its memory lasts, on its own loop file system sized so
//! that a correct engine fits and a leaking one runs out of disk; every second the run records
//! throughput, device writes, bytes on disk against the bytes still live, the engine's own view
//! of itself, and memory. What counts is the curve, not the average: space must go flat.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};
use roamkv_testbed::report::{Html, MachineHeader, line_chart_svg};

use crate::mobility::engines::{self, Durability, EngineConfig, EngineKind};
use crate::mobility::report::write_amplification;
use crate::mobility::runner::{self, RunningWorker};
use crate::mobility::worker::{Tick, WorkerResult, WorkerSpec};
use crate::mobility::workload::WorkloadConfig;

#[derive(Args, Debug)]
pub struct SteadyArgs {
    /// Output directory for results.json, timeseries.csv and report.html.
    #[arg(long, default_value = "out/steady")]
    pub out: PathBuf,
    /// Engines, comma-separated (default: roamkv, rocksdb, leveldb).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Option<Vec<EngineKind>>,
    /// Measured seconds per engine (TPCx-IoT asks for at least 1800).
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Unmeasured warm-up per engine, in seconds (same workload, continued).
    #[arg(long, default_value_t = 120)]
    pub warmup_seconds: u64,
    /// Writer threads; a list (`1,2,4,8`) runs every engine at each: the sweep of paper 002's
    /// Fig. 7 and 8, at steady state.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub threads: Vec<usize>,
    /// Probability that a device leaves before its management time ends (the workload's 0.9).
    #[arg(long, default_value_t = 0.9)]
    pub depart_probability: f64,
    /// Also run roamkv with every device leaving before its management time
    /// (`roamkv-log-only`): nothing ever leaves the log, so its rate is the ceiling roamkv's own
    /// run is measured against, in the same harness.
    #[arg(long)]
    pub with_log_only: bool,
    /// After the RocksDB engine's run, run RocksDB's own db_bench fillrandom with the same
    /// volume, threads, buffers, file system and memory cgroup (a cross-check of the adapter).
    #[arg(long)]
    pub db_bench: bool,
    #[arg(long, value_enum, default_value = "none")]
    pub durability: Durability,
    /// File system made for each engine on a loop device.
    #[arg(long, default_value = "ext4")]
    pub fs: String,
    /// Size of that file system, in GiB: data far beyond memory, but a leak fills it.
    #[arg(long, default_value_t = 16)]
    pub disk_gib: u64,
    /// Memory budget per engine, page cache included (a memory cgroup), in MiB.
    #[arg(long, default_value_t = 512)]
    pub memory_mib: u64,
    #[arg(long, default_value_t = 1000)]
    pub value_bytes: usize,
    /// Management time of the two-level engines, and the time scale of device lifetimes, in ms.
    #[arg(long, default_value_t = 4000)]
    pub management_time_ms: u64,
    /// roamkv's move rule (docs/ENGINE.md): `management-time` (a reading leaves the log about
    /// one management time after it was written) or `lazy` (only under log or memory pressure).
    #[arg(long, default_value = "management-time", value_parser = ["management-time", "lazy"])]
    pub move_rule: String,
    #[arg(long, default_value_t = 2022)]
    pub seed: u64,
}

/// One second of one engine's run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Point {
    /// The run's label (SteadyRun::engine).
    pub engine: String,
    /// Cumulative puts since the worker started.
    pub puts: u64,
    pub t_s: f64,
    pub phase: String,
    pub ops_per_sec: f64,
    pub device_write_bytes_per_sec: f64,
    /// Bytes the file system has allocated beyond what it held right after mkfs.
    pub space_bytes: u64,
    pub live_user_bytes: u64,
    /// roamkv: bytes of upper-tier records, the lower tier's size, the log's files and budget,
    /// the maintenance debt (overdue log bytes). RocksDB: live SST bytes as `lower_bytes`, pending compaction
    /// bytes as the backlog.
    pub upper_bytes: u64,
    pub lower_bytes: u64,
    pub log_bytes: u64,
    pub log_bytes_max: u64,
    pub backlog_bytes: u64,
    /// roamkv: the lower tier's live bytes (window files' live bytes + the settled space's live
    /// estimate) and the rest of its files (dead: not reclaimed yet), and the rates at which it
    /// reclaims (window files dropped whole) and rewrites (consolidation) per second.
    pub lower_live_bytes: u64,
    pub lower_dead_bytes: u64,
    pub lower_reclaim_bytes_per_sec: f64,
    pub consolidation_write_bytes_per_sec: f64,
    pub rss_bytes: u64,
    pub cgroup_bytes: u64,
    /// What the device read, and of it what maintenance read from the log (roamkv).
    pub device_read_bytes_per_sec: f64,
    pub maintenance_read_bytes_per_sec: f64,
    /// The lower tier's own writes (RocksDB statistics; roamkv's lower tier and the baseline).
    pub flush_write_bytes_per_sec: f64,
    pub compaction_write_bytes_per_sec: f64,
    /// roamkv: the state lock's longest hold in this second (a histogram bucket's bound) and
    /// its 99th percentile.
    pub lock_hold_p99_us: f64,
    pub lock_hold_max_us: f64,
}

/// One engine's long run, as results.json lists it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SteadyRun {
    /// The engine, with its thread count when threads are swept (`roamkv 4t`).
    pub engine: String,
    pub engine_kind: String,
    pub depart_probability: f64,
    /// Whether the worker ran inside its memory cgroup (if not, the page cache was unbounded).
    pub memory_capped: bool,
    pub durability: String,
    pub threads: usize,
    pub completed: bool,
    pub failure: Option<String>,
    /// Readings + queries per second over the measured phase.
    pub ops_per_sec: f64,
    pub write_amplification: f64,
    pub space_bytes_end: u64,
    pub space_bytes_max: u64,
    pub live_user_bytes_end: u64,
    pub log_budget_bytes: Option<u64>,
    /// roamkv: seconds in which bytes on disk exceeded 1.3 x live user bytes + the log budget.
    pub space_bound_violations: Option<u64>,
    /// Least-squares slope of bytes on disk over the second half of the measured phase: ~0 when
    /// space is flat. Also as a share of the mean bytes on disk in that half.
    pub space_trend_bytes_per_min: f64,
    pub space_trend_percent_per_min: f64,
    /// roamkv: seconds in which the lower tier's files exceeded their bound (1.5 x their live
    /// bytes, past 64 MiB dead: limits.rs), and the most dead bytes it held in any second.
    pub lower_bound_violations: Option<u64>,
    pub lower_dead_bytes_max: Option<u64>,
    /// Why the run's space failed, if it did: a trend over `SPACE_TREND_PERCENT_PER_MIN_MAX`,
    /// or seconds over a bound.
    pub space_failure: Option<String>,
    pub memory_bytes_max: u64,
    pub memory_limit_bytes: u64,
    pub put_p99_us: u64,
    pub query_p50_us: u64,
    pub query_p99_us: u64,
    pub queries: u64,
    pub user_bytes: u64,
    pub device_bytes_written: u64,
    pub read_checks: u64,
    pub read_check_failures: u64,
    pub config: String,
    pub diagnosis: Diagnosis,
}

/// Where the measured phase's work went: what the device read beside what it wrote, the lower
/// tier's own writes, where ingested runs landed, the state lock, the maintenance passes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Diagnosis {
    pub device_bytes_read: u64,
    /// Device bytes read / device bytes written.
    pub read_write_ratio: f64,
    /// roamkv: bytes maintenance read from the log, and per user byte.
    pub maintenance_read_bytes: u64,
    pub maintenance_read_per_user_byte: f64,
    pub flush_write_bytes: u64,
    pub compaction_read_bytes: u64,
    pub compaction_write_bytes: u64,
    pub lower_write_stall_us: u64,
    /// roamkv: files ingested per level over the whole run (index = level).
    pub ingested_files_by_level: Vec<u64>,
    pub lock_holds: u64,
    pub lock_hold_p50_us: f64,
    pub lock_hold_p99_us: f64,
    pub lock_hold_p999_us: f64,
    /// Bound of the longest hold in the measured phase (its histogram bucket's upper bound).
    pub lock_hold_max_us: f64,
    /// Share of wall time the lock was held.
    pub lock_held_share: f64,
    /// Call sites that held the lock over 1 ms (whole run): "file:line holds max_us".
    pub lock_long_holds: Vec<String>,
    pub passes: u64,
    pub pass_ms_mean: f64,
    pub pass_ms_max: f64,
    /// Share of pass time per step: snapshot, read, write, catalog, commit, retire.
    pub pass_step_shares: Vec<(String, f64)>,
    pub put_p50_us: u64,
    pub put_p999_us: u64,
}

pub fn run(args: &SteadyArgs) -> Result<ExitCode, String> {
    roamkv_testbed::prerequisite::require_root().map_err(|e| e.to_string())?;
    let fs: FsSpec = args
        .fs
        .parse()
        .map_err(|e: roamkv_testbed::Error| e.to_string())?;
    if args.threads.contains(&0) || args.seconds == 0 {
        return Err("--threads and --seconds must be at least 1".into());
    }
    if !(0.0..=1.0).contains(&args.depart_probability) {
        return Err("--depart-probability must be within 0..=1".into());
    }
    let engines_list = args
        .engines
        .clone()
        .unwrap_or_else(|| vec![EngineKind::Roamkv, EngineKind::Rocksdb, EngineKind::Leveldb]);
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let header = MachineHeader::collect();
    println!("roamkv bench steady: {}", describe_config(args, fs));
    let mut runs = Vec::new();
    let mut points = Vec::new();
    let mut db_bench = Vec::new();
    for variant in variants(args, &engines_list) {
        let (run, series) = run_engine(args, fs, &variant)?;
        println!("{}", describe_run(&run));
        if args.db_bench && variant.kind == EngineKind::Rocksdb {
            let (puts, seconds) = series.last().map_or((0, 0.0), |p| (p.puts, p.t_s));
            db_bench.push(db_bench_beside(args, fs, &run, puts, seconds));
        }
        runs.push(run);
        points.extend(series);
    }
    println!("{}", terminal_table(&runs));
    for line in &db_bench {
        println!("{line}");
    }
    println!("{}", diagnosis_table(&runs));
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "config": config_json(args, fs),
        "runs": runs,
        "db_bench": db_bench,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json).map_err(|e| e.to_string())?;
    write_timeseries(&args.out.join("timeseries.csv"), &points)?;
    write_report(&args.out.join("report.html"), &header, args, &runs, &points)?;
    println!(
        "wrote {0}/results.json, {0}/timeseries.csv, {0}/report.html",
        args.out.display()
    );
    // Another engine's failure is a result; roamkv's own is a failure of this command.
    let roamkv_failed = runs.iter().any(|r| {
        r.engine.starts_with("roamkv")
            && (!r.completed || r.read_check_failures > 0 || r.space_failure.is_some())
    });
    Ok(if roamkv_failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The run's settings, in a line.
fn describe_config(args: &SteadyArgs, fs: FsSpec) -> String {
    format!(
        "{} s warm-up + {} s measured per engine, {:?} threads, departure probability {}, durability {}, {} GiB {} file system, memory budget {} MiB (cgroup), values {} B, management time {} ms, move rule {}, seed {}",
        args.warmup_seconds,
        args.seconds,
        args.threads,
        args.depart_probability,
        args.durability.name(),
        args.disk_gib,
        fs.name(),
        args.memory_mib,
        args.value_bytes,
        args.management_time_ms,
        args.move_rule,
        args.seed
    )
}

/// The run's settings, for results.json.
fn config_json(args: &SteadyArgs, fs: FsSpec) -> serde_json::Value {
    serde_json::json!({
        "fs": fs.name(), "disk_bytes": args.disk_gib << 30, "seconds": args.seconds,
        "warmup_seconds": args.warmup_seconds, "threads": args.threads,
        "depart_probability": args.depart_probability,
        "durability": args.durability.name(), "memory_budget_bytes": args.memory_mib << 20,
        "value_bytes": args.value_bytes, "management_time_ms": args.management_time_ms,
        "move_rule": args.move_rule, "seed": args.seed,
    })
}

/// RocksDB's db_bench fillrandom with the volume (keys) and threads of the RocksDB adapter's
/// run just made, in a memory cgroup of the same size, on the same kind of file system: a line
/// for the report with both rates.
fn db_bench_beside(
    args: &SteadyArgs,
    fs: FsSpec,
    adapter: &SteadyRun,
    puts: u64,
    seconds: f64,
) -> String {
    let spec = runner::DbBenchSpec {
        fs,
        image_bytes: args.disk_gib << 30,
        num_per_thread: puts / adapter.threads.max(1) as u64,
        threads: adapter.threads,
        value_bytes: args.value_bytes,
        memory_bytes: (args.memory_mib << 20) / 4,
        cgroup_limit_bytes: Some(args.memory_mib << 20),
        sync: args.durability == Durability::Sync,
    };
    match runner::db_bench_crosscheck(spec) {
        Ok((command, ops)) => {
            let adapter_rate = puts as f64 / seconds.max(1e-9);
            format!(
                "db_bench beside {}: {ops:.0} ops/s vs the adapter's {adapter_rate:.0} readings/s, both over {puts} keys from an empty store ({:.2}x); the adapter's measured phase: {:.0} ops/s; {command}",
                adapter.engine,
                ops / adapter_rate.max(1e-9),
                adapter.ops_per_sec
            )
        }
        Err(e) => format!("db_bench beside {}: did not run: {e}", adapter.engine),
    }
}

/// One engine at one thread count (and departure probability) of the run.
struct Variant {
    kind: EngineKind,
    threads: usize,
    depart_probability: f64,
    /// How reports name it: the engine, with its thread count when threads are swept.
    label: String,
}

/// Every (engine, threads) of the run, engines outermost, plus roamkv's log-only ceiling.
fn variants(args: &SteadyArgs, engines: &[EngineKind]) -> Vec<Variant> {
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

/// The label of roamkv's run with no device staying (`--with-log-only`).
const LOG_ONLY_LABEL: &str = "roamkv-log-only";

/// Runs one engine on a fresh file system; returns its record and its time series.
fn run_engine(
    args: &SteadyArgs,
    fs: FsSpec,
    variant: &Variant,
) -> Result<(SteadyRun, Vec<Point>), String> {
    let kind = variant.kind;
    let memory_bytes = args.memory_mib << 20;
    // As in `bench mobility`: the engine's own caches get a quarter of the budget.
    let config = engines::EngineConfig {
        lazy_move_rule: args.move_rule == "lazy",
        ..runner::engine_config(
            kind,
            args.durability,
            memory_bytes / 4,
            args.management_time_ms,
        )
    };
    let fixture = Fixture::create(fs, args.disk_gib << 30).map_err(|e| e.to_string())?;
    let spec = worker_spec(args, variant, config.clone(), &fixture);
    fixture.quiesce().map_err(|e| e.to_string())?;
    let base_used = used_bytes(fixture.mount_dir());
    let before = DevStat::read(fixture.device_name()).map_err(|e| e.to_string())?;
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
    };
    let (result, cgroup) = worker.finish(|line| series.tick(line));
    series.bar.finish_and_clear();
    let Series {
        points,
        previous,
        first_measured,
        ..
    } = series;
    fixture.quiesce().map_err(|e| e.to_string())?;
    let after = DevStat::read(fixture.device_name()).map_err(|e| e.to_string())?;
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

/// One engine's time series, a point per tick of its worker.
struct Series<'a> {
    kind: EngineKind,
    label: &'a str,
    fixture: &'a Fixture,
    base_used: u64,
    before: DevStat,
    cgroup: CgroupReader,
    bar: indicatif::ProgressBar,
    points: Vec<Point>,
    previous: Option<(Tick, DevStat, Instant)>,
    /// The tick just before the measured phase began (the nearest to its start).
    first_measured: Option<Tick>,
}

impl Series<'_> {
    /// A line the worker printed: a tick becomes a point, and the progress bar moves.
    fn tick(&mut self, line: &str) {
        let Ok(tick) = serde_json::from_str::<Tick>(line) else {
            return;
        };
        let now = Instant::now();
        let device = DevStat::read(self.fixture.device_name()).unwrap_or(self.before);
        let point = to_point(
            self.kind,
            self.label,
            &tick,
            self.previous.as_ref(),
            &device,
            used_bytes(self.fixture.mount_dir()).saturating_sub(self.base_used),
            self.cgroup.usage_bytes(),
        );
        self.bar.set_position(tick.t_s as u64);
        self.bar.set_message(format!(
            "{}: {:.0} ops/s, disk {:.2} GB (live {:.2} GB), mem {:.0} MiB",
            tick.phase,
            point.ops_per_sec,
            point.space_bytes as f64 / 1e9,
            point.live_user_bytes as f64 / 1e9,
            point.cgroup_bytes as f64 / 1048576.0
        ));
        self.points.push(point);
        if tick.phase == "measure" && self.first_measured.is_none() {
            self.first_measured = self.previous.as_ref().map(|(t, _, _)| t.clone());
        }
        self.previous = Some((tick, device, now));
    }
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
    run.query_p50_us = w.query_p50_us;
    run.query_p99_us = w.query_p99_us;
    run.queries = w.queries;
    run.user_bytes = w.user_bytes;
    run.device_bytes_written = device_bytes;
    run.read_checks = w.read_checks;
    run.read_check_failures = w.read_check_failures;
}

/// Reads the worker's cgroup usage while `finish` owns the worker.
struct CgroupReader {
    usage_file: Option<PathBuf>,
}

impl CgroupReader {
    fn new(worker: &RunningWorker) -> CgroupReader {
        CgroupReader {
            usage_file: worker.cgroup_usage_path(),
        }
    }

    fn usage_bytes(&self) -> u64 {
        self.usage_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }
}

fn progress_bar(engine: &str, total_s: u64) -> Result<indicatif::ProgressBar, String> {
    let bar = indicatif::ProgressBar::new(total_s);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{engine:>14} {{bar:30}} {{pos}}/{{len}} s  {{msg}}"
        ))
        .map_err(|e| e.to_string())?,
    );
    Ok(bar)
}

fn to_point(
    kind: EngineKind,
    label: &str,
    tick: &Tick,
    previous: Option<&(Tick, DevStat, Instant)>,
    device: &DevStat,
    space_bytes: u64,
    cgroup_bytes: u64,
) -> Point {
    let field = |name: &str| tick.engine.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    let mut point = Point::default();
    if let Some((p, d, _)) = previous {
        let dt = (tick.t_s - p.t_s).max(1e-3);
        let rate = |name: &str| engine_delta(tick, p, name) as f64 / dt;
        let delta = device.delta(d);
        point.ops_per_sec =
            (tick.puts + tick.queries).saturating_sub(p.puts + p.queries) as f64 / dt;
        point.device_write_bytes_per_sec = delta.bytes_written() as f64 / dt;
        point.device_read_bytes_per_sec = delta.bytes_read() as f64 / dt;
        point.maintenance_read_bytes_per_sec = rate("maintenance_read_bytes");
        point.flush_write_bytes_per_sec = rate("lower_flush_write_bytes");
        point.compaction_write_bytes_per_sec = rate("lower_compaction_write_bytes");
        point.lower_reclaim_bytes_per_sec = rate("windows_dropped_bytes");
        point.consolidation_write_bytes_per_sec = rate("consolidated_bytes");
        let holds = lock_hold_times(&tick.engine).since(&lock_hold_times(&p.engine));
        point.lock_hold_p99_us = holds.percentile_ns(0.99) as f64 / 1e3;
        point.lock_hold_max_us = holds.max_bucket_ns() as f64 / 1e3;
    }
    let (lower_bytes, backlog_bytes) = match kind {
        EngineKind::Rocksdb => (field("live_sst_bytes"), field("pending_compaction_bytes")),
        _ => (field("lower_bytes"), field("overdue_bytes")),
    };
    Point {
        engine: label.into(),
        puts: tick.puts,
        t_s: tick.t_s,
        phase: tick.phase.clone(),
        space_bytes,
        live_user_bytes: tick.live_user_bytes,
        upper_bytes: field("upper_bytes"),
        lower_bytes,
        log_bytes: field("log_bytes"),
        log_bytes_max: field("log_bytes_max"),
        backlog_bytes,
        lower_live_bytes: field("lower_live_bytes"),
        lower_dead_bytes: field("lower_dead_bytes"),
        rss_bytes: tick.rss_bytes,
        cgroup_bytes,
        ..point
    }
}

/// A cumulative counter of the engine's sample, from `earlier` to `later`.
fn engine_delta(later: &Tick, earlier: &Tick, name: &str) -> u64 {
    let field = |t: &Tick| t.engine.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    field(later).saturating_sub(field(earlier))
}

/// The state lock's hold times as the roamkv sample carries them (empty for other engines).
fn lock_hold_times(sample: &serde_json::Value) -> roamkv_engine::HoldTimes {
    let field = |name: &str| sample.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    roamkv_engine::HoldTimes {
        holds: field("lock_holds"),
        total_ns: field("lock_hold_ns_total"),
        max_ns: field("lock_hold_ns_max"),
        buckets: sample
            .get("lock_buckets")
            .and_then(|b| serde_json::from_value(b.clone()).ok())
            .unwrap_or_default(),
        long_holds: sample
            .get("lock_long_holds")
            .and_then(|b| serde_json::from_value(b.clone()).ok())
            .unwrap_or_default(),
    }
}

/// The measured phase's diagnosis, from its first and last ticks.
fn diagnose(first: &Tick, last: &Tick, user_bytes: u64) -> Diagnosis {
    let delta = |name: &str| engine_delta(last, first, name);
    let holds = lock_hold_times(&last.engine).since(&lock_hold_times(&first.engine));
    let passes = delta("passes");
    let pass_us = delta("pass_us_total");
    let steps = ["snapshot", "read", "write", "catalog", "commit", "retire"];
    let wall_ns = ((last.t_s - first.t_s) * 1e9).max(1.0);
    Diagnosis {
        maintenance_read_bytes: delta("maintenance_read_bytes"),
        maintenance_read_per_user_byte: delta("maintenance_read_bytes") as f64
            / user_bytes.max(1) as f64,
        flush_write_bytes: delta("lower_flush_write_bytes"),
        compaction_read_bytes: delta("lower_compaction_read_bytes"),
        compaction_write_bytes: delta("lower_compaction_write_bytes"),
        lower_write_stall_us: delta("lower_write_stall_us"),
        ingested_files_by_level: last
            .engine
            .get("ingested_files_by_level")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
        lock_holds: holds.holds,
        lock_hold_p50_us: holds.percentile_ns(0.5) as f64 / 1e3,
        lock_hold_p99_us: holds.percentile_ns(0.99) as f64 / 1e3,
        lock_hold_p999_us: holds.percentile_ns(0.999) as f64 / 1e3,
        lock_hold_max_us: holds.max_bucket_ns() as f64 / 1e3,
        lock_held_share: holds.total_ns as f64 / wall_ns,
        lock_long_holds: holds
            .long_holds
            .iter()
            .map(|(site, n, max)| format!("{site} {n} holds, max {} us", max / 1000))
            .collect(),
        passes,
        pass_ms_mean: pass_us as f64 / passes.max(1) as f64 / 1e3,
        pass_ms_max: last
            .engine
            .get("pass_us_max")
            .and_then(|v| v.as_u64())
            .unwrap_or(0) as f64
            / 1e3,
        pass_step_shares: steps
            .iter()
            .map(|s| {
                let us = delta(&format!("pass_{s}_us"));
                (s.to_string(), us as f64 / pass_us.max(1) as f64)
            })
            .collect(),
        ..Diagnosis::default()
    }
}

/// A run whose bytes on disk grow faster than this share of their mean per minute, over the
/// second half of the measured phase, fails: its space is not flat. The noise of a flat run is
/// well below it (a 300 s roamkv run: 0.2-0.8 %/min, from windows dropping in bursts); the
/// leak issue 29 found grew 8 %/min.
pub const SPACE_TREND_PERCENT_PER_MIN_MAX: f64 = 1.0;

/// Whether the lower tier was over the engine's bound on window files in this second: more
/// than `WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX` of its live bytes, with more than
/// `WINDOW_DEAD_BYTES_MIN` dead (limits.rs; the bench counts the settled space in too).
fn lower_over_bound(p: &Point) -> bool {
    use roamkv_engine::limits::{WINDOW_DEAD_BYTES_MIN, WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX};
    let files = p.lower_live_bytes + p.lower_dead_bytes;
    files as u128 * 100
        > p.lower_live_bytes as u128 * WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX as u128
        && p.lower_dead_bytes > WINDOW_DEAD_BYTES_MIN
}

/// Space figures from the time series: maximum, the roamkv bounds, the trend, the verdict.
fn summarize_points(run: &mut SteadyRun, points: &[Point]) {
    run.space_bytes_max = points.iter().map(|p| p.space_bytes).max().unwrap_or(0);
    run.live_user_bytes_end = points.last().map_or(0, |p| p.live_user_bytes);
    if let Some(budget) = points
        .iter()
        .map(|p| p.log_bytes_max)
        .max()
        .filter(|b| *b > 0)
    {
        run.log_budget_bytes = Some(budget);
        run.space_bound_violations = Some(
            points
                .iter()
                .filter(|p| p.space_bytes as f64 > 1.3 * p.live_user_bytes as f64 + budget as f64)
                .count() as u64,
        );
        run.lower_bound_violations =
            Some(points.iter().filter(|p| lower_over_bound(p)).count() as u64);
        run.lower_dead_bytes_max = points.iter().map(|p| p.lower_dead_bytes).max();
    }
    let measured: Vec<&Point> = points.iter().filter(|p| p.phase == "measure").collect();
    let half = &measured[measured.len() / 2..];
    run.space_trend_bytes_per_min =
        slope(half.iter().map(|p| (p.t_s, p.space_bytes as f64))) * 60.0;
    let mean = half.iter().map(|p| p.space_bytes as f64).sum::<f64>() / half.len().max(1) as f64;
    run.space_trend_percent_per_min = 100.0 * run.space_trend_bytes_per_min / mean.max(1.0);
    run.space_failure = space_failure(run);
}

/// The run's space verdict: None when flat and within its bounds.
fn space_failure(run: &SteadyRun) -> Option<String> {
    let mut why = Vec::new();
    if run.space_trend_percent_per_min > SPACE_TREND_PERCENT_PER_MIN_MAX {
        why.push(format!(
            "space keeps growing: {:+.1} MB/min ({:+.2} %/min of its mean over the second half of the measured phase; the limit is {SPACE_TREND_PERCENT_PER_MIN_MAX} %/min)",
            run.space_trend_bytes_per_min / 1e6,
            run.space_trend_percent_per_min
        ));
    }
    if let Some(n) = run.space_bound_violations.filter(|n| *n > 0) {
        why.push(format!(
            "{n} s over the space bound (1.3 x live + log budget)"
        ));
    }
    if let Some(n) = run.lower_bound_violations.filter(|n| *n > 0) {
        why.push(format!(
            "{n} s with the lower tier over its bound (1.5 x its live bytes past 64 MiB dead)"
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Least-squares slope of y over x.
fn slope(points: impl Iterator<Item = (f64, f64)>) -> f64 {
    let points: Vec<(f64, f64)> = points.collect();
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// Bytes used on the file system holding `dir` (statvfs: blocks - free blocks).
fn used_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs is a plain C struct of integers: all-zero bytes are a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs(3) with a valid C string and a struct we own.
    if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } != 0 {
        return 0;
    }
    (vfs.f_blocks - vfs.f_bfree) as u64 * vfs.f_frsize as u64
}

fn describe_run(run: &SteadyRun) -> String {
    let gb = |b: u64| b as f64 / 1e9;
    match &run.failure {
        None => format!(
            "{}: completed, {:.0} ops/s, WA {:.2}, disk end {:.2} GB / max {:.2} GB (live {:.2} GB, trend {:+.1} MB/min){}, memory max {:.0} of {:.0} MiB, query p50/p99 {}/{} µs; space: {}",
            run.engine,
            run.ops_per_sec,
            run.write_amplification,
            gb(run.space_bytes_end),
            gb(run.space_bytes_max),
            gb(run.live_user_bytes_end),
            run.space_trend_bytes_per_min / 1e6,
            run.lower_dead_bytes_max.map_or(String::new(), |d| format!(
                ", lower tier dead max {:.3} GB",
                gb(d)
            )),
            run.memory_bytes_max as f64 / 1048576.0,
            run.memory_limit_bytes as f64 / 1048576.0,
            run.query_p50_us,
            run.query_p99_us,
            run.space_failure
                .as_deref()
                .unwrap_or("flat, within its bounds")
        ),
        Some(why) => format!(
            "{}: DID NOT COMPLETE ({why}); disk max {:.2} GB, memory max {:.0} MiB",
            run.engine,
            gb(run.space_bytes_max),
            run.memory_bytes_max as f64 / 1048576.0
        ),
    }
}

fn terminal_table(runs: &[SteadyRun]) -> String {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "engine",
        "completed",
        "ops/s",
        "WA",
        "disk end GB",
        "disk max GB",
        "live end GB",
        "trend MB/min",
        "space",
        "log budget GB",
        "mem max MiB",
        "query p50/p99 µs",
    ]);
    for r in runs {
        table.add_row(vec![
            r.engine.clone(),
            if r.completed {
                "yes".into()
            } else {
                "NO".into()
            },
            format!("{:.0}", r.ops_per_sec),
            format!("{:.2}", r.write_amplification),
            format!("{:.2}", r.space_bytes_end as f64 / 1e9),
            format!("{:.2}", r.space_bytes_max as f64 / 1e9),
            format!("{:.2}", r.live_user_bytes_end as f64 / 1e9),
            format!("{:+.1}", r.space_trend_bytes_per_min / 1e6),
            if r.space_failure.is_some() {
                "FAILED".into()
            } else {
                "flat".into()
            },
            r.log_budget_bytes
                .map_or("-".into(), |b| format!("{:.2}", b as f64 / 1e9)),
            format!("{:.0}", r.memory_bytes_max as f64 / 1048576.0),
            format!("{}/{}", r.query_p50_us, r.query_p99_us),
        ]);
    }
    let mut text = table.to_string();
    text.push_str(&ratio_lines(runs));
    text
}

/// roamkv against each baseline at the same thread count, against its own log-only rate, and
/// against its space bound; and any run that went without a memory cap.
fn ratio_lines(runs: &[SteadyRun]) -> String {
    let mut text = String::new();
    let best_baseline = runs
        .iter()
        .filter(|r| !r.engine.starts_with("roamkv") && r.completed)
        .map(|r| r.ops_per_sec)
        .fold(0.0, f64::max);
    let completed = |r: &&SteadyRun| r.completed;
    for r in runs
        .iter()
        .filter(completed)
        .filter(|r| r.engine_kind == "roamkv")
    {
        let log_only = r.depart_probability >= 1.0;
        for other in runs
            .iter()
            .filter(completed)
            .filter(|o| o.threads == r.threads && o.engine_kind != "roamkv" && !log_only)
        {
            text.push_str(&format!(
                "\n{} / {}: {:.2}x ops/s",
                r.engine,
                other.engine,
                r.ops_per_sec / other.ops_per_sec.max(1e-9)
            ));
        }
        if let Some(ceiling) = runs.iter().filter(completed).find(|o| {
            o.engine_kind == "roamkv" && o.depart_probability >= 1.0 && o.threads == r.threads
        }) && !log_only
        {
            text.push_str(&format!(
                "\n{} / {}: {:.2} of the log-only rate",
                r.engine,
                ceiling.engine,
                r.ops_per_sec / ceiling.ops_per_sec.max(1e-9)
            ));
        }
        if best_baseline > 0.0 || log_only {
            text.push_str(&format!(
                "\n{}: space bound (1.3 x live + log budget) exceeded in {} second(s)",
                r.engine,
                r.space_bound_violations.unwrap_or(0)
            ));
        }
    }
    for r in runs.iter().filter(|r| !r.memory_capped) {
        text.push_str(&format!(
            "\n*** {}: NO MEMORY CAP (no usable memory cgroup): its figures include an unbounded page cache ***",
            r.engine
        ));
    }
    text
}

/// The measured phase's diagnosis of each engine, as a table.
fn diagnosis_table(runs: &[SteadyRun]) -> String {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "engine",
        "device read/written",
        "maintenance read / user",
        "flush + compaction MB",
        "ingested per level",
        "lock p50/p99/max µs",
        "lock held",
        "passes (mean/max ms)",
        "put p50/p99/p99.9 µs",
    ]);
    for r in runs.iter().filter(|r| r.completed) {
        let d = &r.diagnosis;
        table.add_row(vec![
            r.engine.clone(),
            format!(
                "{:.2} ({:.0} MB)",
                d.read_write_ratio,
                d.device_bytes_read as f64 / 1e6
            ),
            format!("{:.2}", d.maintenance_read_per_user_byte),
            format!(
                "{:.0} + {:.0}",
                d.flush_write_bytes as f64 / 1e6,
                d.compaction_write_bytes as f64 / 1e6
            ),
            format!("{:?}", d.ingested_files_by_level),
            format!(
                "{:.0}/{:.0}/{:.0}",
                d.lock_hold_p50_us, d.lock_hold_p99_us, d.lock_hold_max_us
            ),
            format!("{:.1} %", d.lock_held_share * 100.0),
            format!("{} ({:.1}/{:.1})", d.passes, d.pass_ms_mean, d.pass_ms_max),
            format!("{}/{}/{}", d.put_p50_us, r.put_p99_us, d.put_p999_us),
        ]);
    }
    let mut text = table.to_string();
    for r in runs
        .iter()
        .filter(|r| !r.diagnosis.lock_long_holds.is_empty())
    {
        text.push_str(&format!(
            "\n{}: state-lock holds over 1 ms by site: {}",
            r.engine,
            r.diagnosis.lock_long_holds.join("; ")
        ));
    }
    for r in runs.iter().filter(|r| r.diagnosis.passes > 0) {
        let steps: Vec<String> = r
            .diagnosis
            .pass_step_shares
            .iter()
            .map(|(s, share)| format!("{s} {:.0} %", share * 100.0))
            .collect();
        text.push_str(&format!(
            "\n{}: pass time by step: {}",
            r.engine,
            steps.join(", ")
        ));
    }
    text
}

fn write_timeseries(path: &Path, points: &[Point]) -> Result<(), String> {
    let mut writer = csv::Writer::from_path(path).map_err(|e| e.to_string())?;
    for p in points {
        writer.serialize(p).map_err(|e| e.to_string())?;
    }
    writer.flush().map_err(|e| e.to_string())
}

fn write_report(
    path: &Path,
    header: &MachineHeader,
    args: &SteadyArgs,
    runs: &[SteadyRun],
    points: &[Point],
) -> Result<(), String> {
    let mut html = Html::new("roamkv bench steady: the long run", header);
    html.heading("Runs");
    for run in runs {
        html.paragraph(&describe_run(run));
    }
    html.heading("Where the work went (measured phase)");
    html.preformatted(&diagnosis_table(runs));
    if args.threads.len() > 1 {
        html.heading("Writer threads at steady state (cf. paper 002, Fig. 7 and 8)");
        sweep_charts(&mut html, runs, args.seconds);
    }
    html.heading("Over time");
    over_time_charts(&mut html, runs, points);
    for run in runs.iter().filter(|r| r.engine.starts_with("roamkv")) {
        html.svg(&space_bound_chart(&run.engine, points));
        html.svg(&lower_tier_chart(&run.engine, points));
    }
    html.heading("Configuration and method");
    html.paragraph(&method(args));
    for run in runs {
        html.paragraph(&format!("{}: {}", run.engine, run.config));
    }
    html.write(path).map_err(|e| e.to_string())
}

/// Throughput and device writes against writer threads, one line per engine.
fn sweep_charts(html: &mut Html, runs: &[SteadyRun], seconds: u64) {
    let mut names: Vec<String> = Vec::new();
    let series_name = |r: &SteadyRun| {
        if r.depart_probability >= 1.0 && r.engine_kind == "roamkv" {
            LOG_ONLY_LABEL.to_string()
        } else {
            r.engine_kind.clone()
        }
    };
    for r in runs.iter().filter(|r| r.completed) {
        if !names.contains(&series_name(r)) {
            names.push(series_name(r));
        }
    }
    let series = |y: &dyn Fn(&SteadyRun) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        names
            .iter()
            .map(|name| {
                let line = runs
                    .iter()
                    .filter(|r| r.completed && series_name(r) == *name)
                    .map(|r| (r.threads as f64, y(r)))
                    .collect();
                (name.clone(), line)
            })
            .collect()
    };
    html.svg(&line_chart_svg(
        "Throughput at steady state",
        "writer threads",
        "operations/s",
        &series(&|r| r.ops_per_sec),
    ));
    html.svg(&line_chart_svg(
        "Device writes at steady state",
        "writer threads",
        "MB/s",
        &series(&|r| r.device_bytes_written as f64 / seconds.max(1) as f64 / 1e6),
    ));
    html.svg(&line_chart_svg(
        "Write amplification at steady state",
        "writer threads",
        "device bytes / user bytes",
        &series(&|r| r.write_amplification),
    ));
}

/// A chart over the run's seconds.
fn time_chart(title: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    line_chart_svg(
        title,
        "seconds since start (warm-up first)",
        y_label,
        series,
    )
}

/// One series per engine of `y` over time.
fn per_engine(
    runs: &[SteadyRun],
    points: &[Point],
    y: &dyn Fn(&Point) -> f64,
) -> Vec<(String, Vec<(f64, f64)>)> {
    runs.iter()
        .map(|r| {
            let series = points
                .iter()
                .filter(|p| p.engine == r.engine)
                .map(|p| (p.t_s, y(p)))
                .collect();
            (r.engine.clone(), series)
        })
        .collect()
}

/// Throughput, space, device writes, memory and maintenance debt of every engine over time.
fn over_time_charts(html: &mut Html, runs: &[SteadyRun], points: &[Point]) {
    let per_engine = |y: &dyn Fn(&Point) -> f64| per_engine(runs, points, y);
    html.svg(&time_chart(
        "Throughput",
        "operations/s",
        &per_engine(&|p| p.ops_per_sec),
    ));
    html.svg(&time_chart(
        "Bytes on disk",
        "GB",
        &per_engine(&|p| p.space_bytes as f64 / 1e9),
    ));
    html.svg(&time_chart(
        "Device writes",
        "MB/s",
        &per_engine(&|p| p.device_write_bytes_per_sec / 1e6),
    ));
    html.svg(&time_chart(
        "Device reads",
        "MB/s",
        &per_engine(&|p| p.device_read_bytes_per_sec / 1e6),
    ));
    html.svg(&time_chart(
        "Lower tier's own writes: flushes + compactions",
        "MB/s",
        &per_engine(&|p| (p.flush_write_bytes_per_sec + p.compaction_write_bytes_per_sec) / 1e6),
    ));
    html.svg(&time_chart(
        "roamkv: longest state-lock hold in each second (histogram bucket bound)",
        "ms",
        &per_engine(&|p| p.lock_hold_max_us / 1e3),
    ));
    html.svg(&time_chart(
        "Memory (cgroup: heap + page cache)",
        "MiB",
        &per_engine(&|p| p.cgroup_bytes as f64 / 1048576.0),
    ));
    html.svg(&time_chart(
        "Maintenance debt (roamkv: overdue log bytes; RocksDB: pending compaction)",
        "MB",
        &per_engine(&|p| p.backlog_bytes as f64 / 1e6),
    ));
}

/// A roamkv run's bytes on disk against what it must keep and against its bound.
fn space_bound_chart(engine: &str, points: &[Point]) -> String {
    let mine: Vec<&Point> = points.iter().filter(|p| p.engine == engine).collect();
    let line = |name: &str, y: &dyn Fn(&Point) -> f64| {
        (
            name.to_string(),
            mine.iter().map(|p| (p.t_s, y(p))).collect::<Vec<_>>(),
        )
    };
    time_chart(
        &format!("{engine}: bytes on disk against what must be kept"),
        "GB",
        &[
            line("on disk", &|p| p.space_bytes as f64 / 1e9),
            line("live user bytes", &|p| p.live_user_bytes as f64 / 1e9),
            line("bound: 1.3 x live + log budget", &|p| {
                (1.3 * p.live_user_bytes as f64 + p.log_bytes_max as f64) / 1e9
            }),
            line("log files", &|p| p.log_bytes as f64 / 1e9),
            line("lower tier", &|p| p.lower_bytes as f64 / 1e9),
        ],
    )
}

/// The lower tier of one roamkv run: its live and dead bytes, and how fast it reclaims (window
/// files dropped whole) and rewrites (consolidation).
fn lower_tier_chart(engine: &str, points: &[Point]) -> String {
    let mine: Vec<&Point> = points.iter().filter(|p| p.engine == engine).collect();
    let line = |name: &str, y: &dyn Fn(&Point) -> f64| {
        (
            name.to_string(),
            mine.iter().map(|p| (p.t_s, y(p))).collect::<Vec<_>>(),
        )
    };
    time_chart(
        &format!("{engine}: the lower tier (MB), and MB/s reclaimed and rewritten"),
        "MB or MB/s",
        &[
            line("live", &|p| p.lower_live_bytes as f64 / 1e6),
            line("dead", &|p| p.lower_dead_bytes as f64 / 1e6),
            line("reclaimed (files dropped) /s", &|p| {
                p.lower_reclaim_bytes_per_sec / 1e6
            }),
            line("rewritten (consolidation) /s", &|p| {
                p.consolidation_write_bytes_per_sec / 1e6
            }),
        ],
    )
}

/// The report's paragraph on how the run was made.
fn method(args: &SteadyArgs) -> String {
    format!(
        "Each engine: a fresh {} GiB {} file system on a direct-I/O loop device, the engine in a child process inside a {} MiB memory cgroup (heap and page cache), {:?} writer threads, {} s warm-up then {} s measured, durability {}. Every second: ops/s and device write bandwidth (the loop device's counters), bytes on disk (statvfs, minus what the empty file system used), live user bytes (key + value bytes of readings of devices that have not departed), the engine's own figures, the cgroup's usage. Throughput and write amplification cover the measured phase (device bytes after a syncfs at its start, through the final sync). Queries: TPCx-IoT's pair at 0.005 % of operations: the last 30 s of one sensor, and a random 30 s window in the 1800 s before.",
        args.disk_gib,
        args.fs,
        args.memory_mib,
        args.threads,
        args.warmup_seconds,
        args.seconds,
        args.durability.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_flat_series_is_zero_and_of_a_ramp_its_rate() {
        assert_eq!(slope([(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)].into_iter()), 0.0);
        let ramp = (0..10).map(|t| (t as f64, 3.0 * t as f64 + 1.0));
        assert!((slope(ramp) - 3.0).abs() < 1e-9);
        assert_eq!(slope(std::iter::once((1.0, 1.0))), 0.0);
    }

    #[test]
    fn the_space_bound_counts_seconds_over_it() {
        let point = |space, live| Point {
            engine: "roamkv".into(),
            phase: "measure".into(),
            space_bytes: space,
            live_user_bytes: live,
            log_bytes_max: 100,
            ..Point::default()
        };
        let mut run = SteadyRun::default();
        summarize_points(&mut run, &[point(100, 10), point(200, 10), point(113, 10)]);
        assert_eq!(run.log_budget_bytes, Some(100));
        assert_eq!(run.space_bound_violations, Some(1));
        assert_eq!(run.space_bytes_max, 200);
        assert!(run.space_failure.is_some());
    }

    #[test]
    fn a_run_whose_space_keeps_growing_fails_and_a_flat_one_does_not() {
        let point = |t: u64, space: u64, lower_dead: u64| Point {
            engine: "roamkv".into(),
            phase: "measure".into(),
            t_s: t as f64,
            space_bytes: space,
            live_user_bytes: 1 << 30,
            log_bytes_max: 1 << 30,
            lower_live_bytes: 100 << 20,
            lower_dead_bytes: lower_dead,
            ..Point::default()
        };
        let flat: Vec<Point> = (0..300)
            .map(|t| point(t, (2 << 30) + (t % 7) * (10 << 20), 0))
            .collect();
        let mut run = SteadyRun::default();
        summarize_points(&mut run, &flat);
        assert_eq!(run.space_failure, None, "{run:?}");
        // 0.5 GB a minute on 2 GB: the leak of issue 29.
        let growing: Vec<Point> = (0..300)
            .map(|t| point(t, (2 << 30) + t * (8 << 20), 0))
            .collect();
        summarize_points(&mut run, &growing);
        assert!(run.space_trend_percent_per_min > SPACE_TREND_PERCENT_PER_MIN_MAX);
        assert!(
            run.space_failure
                .as_deref()
                .is_some_and(|w| w.contains("keeps growing"))
        );
        // Flat, but the lower tier 2x its live bytes with 100 MiB dead for 5 s.
        let lower: Vec<Point> = (0..300)
            .map(|t| point(t, 2 << 30, if t < 5 { 100 << 20 } else { 0 }))
            .collect();
        summarize_points(&mut run, &lower);
        assert_eq!(run.lower_bound_violations, Some(5));
        assert!(
            run.space_failure
                .as_deref()
                .is_some_and(|w| w.contains("lower tier"))
        );
    }
}
