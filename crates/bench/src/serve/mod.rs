//! `roamkv bench serve`: HTTP ingest of `roamkv serve` against its peers (InfluxDB 1.6 and
//! QuestDB 9.2, peers.rs) at matched durability and against the in-process engine (the
//! ceiling), with EdgeX events of 1..100 readings.
//!
//! For each readings-per-event size and repeat, every system (`targets`) is started
//! fresh and driven by the same clients (`load`): first closed loop (the peak rate and
//! its latency), then open loop at half the median peak (the latency a server has when it is
//! not saturated). After every run the readings the system stored are counted and must equal
//! the readings it acked. Medians over the repeats; a table, results.json and report.html.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roamkv_testbed::command::process_cpu_seconds;
use roamkv_testbed::report::{MachineHeader, say};
use roamkv_testbed::stats::median;

use crate::error::{BenchError, Result};

mod bus;
pub mod load;
pub mod peers;
mod plan;
mod report;
mod results;
pub mod systems;
pub mod targets;

use load::{EventSpec, Pace, drive, edgex_json};
use plan::Plan;
pub use plan::{AckDurability, ServeBenchArgs};
use report::{terminal_table, write_outputs};
use results::{DecodeCost, DeviceProbe, ServeRun, ServeSummary};
use targets::{Target, start, stored_values};

pub fn run(args: &ServeBenchArgs) -> ExitCode {
    match bench(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("roamkv bench serve: some runs failed their checks (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("roamkv bench serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &ServeBenchArgs) -> Result<bool> {
    let plan = Plan::from_args(args)?;
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    std::fs::create_dir_all(&args.work_dir)
        .map_err(|e| BenchError::io("creating", &args.work_dir, e))?;
    let header = MachineHeader::collect();
    for (target, why) in &plan.skipped {
        println!("roamkv bench serve: SKIPPED {}: {why}", target.name());
    }
    println!(
        "roamkv bench serve: {} clients, {} s measured + {} s warm-up per run, {} repeat(s), readings/event {:?}, systems {}, {}, data under {}",
        plan.clients,
        plan.measured.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        plan.repeats,
        plan.sizes,
        plan.targets
            .iter()
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(","),
        plan.durability_line(),
        args.work_dir.display()
    );
    let device = probe_device(&args.work_dir, args.quick)?;
    println!("{}", describe_device(&device, &args.work_dir));
    let bar = indicatif::ProgressBar::new(plan.runs(!args.skip_half_peak) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .map_err(|e| BenchError::Run(e.to_string()))?,
    );
    let mut runs = peak_runs(&plan, args, &bar)?;
    if !args.skip_half_peak {
        let half = half_peak_runs(&plan, args, &bar, &runs)?;
        runs.extend(half);
    }
    bar.finish_and_clear();
    let costs: Vec<DecodeCost> = plan
        .sizes
        .iter()
        .map(|n| decode_cost(*n))
        .collect::<Result<_, _>>()?;
    let summaries = summarize(&plan, &runs);
    println!("{}", terminal_table(&summaries));
    let mut lines = verdict(&summaries, &costs);
    lines.push(describe_device(&device, &args.work_dir));
    lines.extend(
        plan.skipped
            .iter()
            .map(|(target, why)| format!("{} was left out: {why}", target.name())),
    );
    for line in &lines {
        println!("{line}");
    }
    write_outputs(
        args,
        &plan,
        &header,
        (&runs, &summaries, &costs, &device),
        &lines,
    )?;
    Ok(runs.iter().all(|r| r.check == "ok" && r.errors == 0))
}

/// Probes for at most `DEVICE_PROBE_SECONDS` (a quick run: 1 s).
const DEVICE_PROBE_SECONDS: u64 = 10;
/// Probes at most.
const DEVICE_PROBES: u64 = 20_000;

/// The fdatasync latency of the device under `work_dir` (crate::steady::ceilings' probe).
fn probe_device(work_dir: &std::path::Path, quick: bool) -> Result<DeviceProbe> {
    let seconds = if quick { 1 } else { DEVICE_PROBE_SECONDS };
    let latency = crate::steady::ceilings::fdatasync_latency_in(
        work_dir,
        DEVICE_PROBES,
        Some(Duration::from_secs(seconds)),
    )?;
    Ok(DeviceProbe {
        probes: latency.len(),
        fdatasync_p50_us: latency.value_at_quantile(0.5),
        fdatasync_p99_us: latency.value_at_quantile(0.99),
        fdatasync_p999_us: latency.value_at_quantile(0.999),
        fdatasync_max_us: latency.max(),
        stalls_over_50ms: latency.count_between(50_001, latency.max().max(50_001)),
    })
}

fn describe_device(d: &DeviceProbe, work_dir: &std::path::Path) -> String {
    format!(
        "the device under {}: fdatasync of a 4 KiB write p50/p99/p99.9/max {}/{}/{}/{} µs, {} of {} over 50 ms (every system's p99 is bounded below by this tail)",
        work_dir.display(),
        d.fdatasync_p50_us,
        d.fdatasync_p99_us,
        d.fdatasync_p999_us,
        d.fdatasync_max_us,
        d.stalls_over_50ms,
        d.probes
    )
}

fn peak_runs(
    plan: &Plan,
    args: &ServeBenchArgs,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<ServeRun>> {
    let mut runs = Vec::new();
    for &size in &plan.sizes {
        for repeat in 0..plan.repeats {
            // Systems interleaved within a repeat: drift of the machine hits each alike.
            for &target in &plan.targets {
                bar.set_message(format!(
                    "{} {size}/event peak #{}",
                    target.name(),
                    repeat + 1
                ));
                let run = if target.is_bus() {
                    let bus_plan = bus::BusPlan {
                        clients: plan.clients,
                        warmup: plan.warmup,
                        measured: plan.measured,
                        durability: plan.durability.engine(),
                        backlog_events: plan.bus_backlog_events(size),
                    };
                    bus::run(&bus_plan, &args.work_dir, target, size, repeat, now_ms())?
                } else {
                    run_one(plan, args, target, size, Pace::ClosedLoop, repeat)?
                };
                say(bar, describe(&run));
                runs.push(run);
                bar.inc(1);
            }
        }
    }
    Ok(runs)
}

fn half_peak_runs(
    plan: &Plan,
    args: &ServeBenchArgs,
    bar: &indicatif::ProgressBar,
    peaks: &[ServeRun],
) -> Result<Vec<ServeRun>> {
    let mut runs = Vec::new();
    for &size in &plan.sizes {
        for repeat in 0..plan.repeats {
            for &target in plan.targets.iter().filter(|t| t.is_http()) {
                let mut rates: Vec<f64> = peaks
                    .iter()
                    .filter(|r| r.target == target.name() && r.readings_per_event == size)
                    .map(|r| r.readings_per_sec)
                    .collect();
                // NaN (no peak run) or no rate: nothing to pace at half of.
                let half = args.open_loop_rate.unwrap_or(median(&mut rates) / 2.0);
                if half.is_nan() || half <= 0.0 {
                    continue;
                }
                bar.set_message(format!(
                    "{} {size}/event at {half:.0} readings/s #{}",
                    target.name(),
                    repeat + 1
                ));
                let pace = Pace::OpenLoop {
                    readings_per_sec: half,
                };
                let run = run_one(plan, args, target, size, pace, repeat)?;
                say(bar, describe(&run));
                runs.push(run);
                bar.inc(1);
            }
        }
    }
    Ok(runs)
}

fn describe(r: &ServeRun) -> String {
    format!(
        "{} {}/event {}{}: {:.0} readings/s, p50 {:.2} ms, p99 {:.2} ms, server CPU {:.1} µs/reading, check {} ({} stored / {} acked){}",
        r.target,
        r.readings_per_event,
        r.phase,
        r.offered_readings_per_sec
            .map_or(String::new(), |o| format!(" (offered {o:.0}/s)")),
        r.readings_per_sec,
        r.p50_ms,
        r.p99_ms,
        r.server_cpu_us_per_reading,
        r.check,
        r.stored_readings,
        r.acked_readings,
        r.first_error.as_ref().map_or(String::new(), |e| format!(
            ", {} errors, first: {e}",
            r.errors
        )),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Starts the system fresh, drives it, stops it and counts what it stored.
fn run_one(
    plan: &Plan,
    args: &ServeBenchArgs,
    target: Target,
    size: usize,
    pace: Pace,
    repeat: usize,
) -> Result<ServeRun> {
    let up = start(
        target,
        &args.work_dir,
        plan.clients,
        plan.durability.engine(),
    )?;
    let senders = up.senders(plan.clients, size)?;
    let (server_cpu_0, client_cpu_0) = (up.cpu_seconds(), process_cpu_seconds("/proc/self/stat"));
    let commits_0 = up.group_commits()?;
    let outcome = drive(senders, size, pace, plan.warmup, plan.measured, now_ms());
    let (server_cpu_1, client_cpu_1) = (up.cpu_seconds(), process_cpu_seconds("/proc/self/stat"));
    let commits_1 = up.group_commits()?;
    let stored = up.finish(plan.clients)?;
    let server_cpu_s = server_cpu_1 - server_cpu_0;
    let check = if stored == outcome.acked_readings {
        "ok".to_string()
    } else {
        format!(
            "MISMATCH: {stored} stored, {} acked",
            outcome.acked_readings
        )
    };
    Ok(ServeRun {
        target: target.name().into(),
        readings_per_event: size,
        phase: match pace {
            Pace::ClosedLoop => "peak",
            Pace::OpenLoop { .. } => "half-peak",
        },
        repeat,
        clients: plan.clients,
        offered_readings_per_sec: match pace {
            Pace::ClosedLoop => None,
            Pace::OpenLoop { readings_per_sec } => Some(readings_per_sec),
        },
        readings_per_sec: outcome.readings_per_sec(),
        events: outcome.measured_events,
        p50_ms: outcome.percentile_ms(0.5),
        p99_ms: outcome.percentile_ms(0.99),
        p999_ms: outcome.percentile_ms(0.999),
        max_ms: outcome.latency_us.max() as f64 / 1000.0,
        errors: outcome.errors,
        first_error: outcome.first_error.clone(),
        server_cpu_s,
        client_cpu_s: if target.is_http() {
            client_cpu_1 - client_cpu_0
        } else {
            0.0
        },
        server_cpu_us_per_reading: server_cpu_s * 1e6 / outcome.acked_readings.max(1) as f64,
        acked_readings: outcome.acked_readings,
        stored_readings: stored,
        check,
        measured_s: outcome.measured_s,
        broker_cpu_s: None,
        drain_s: None,
        readings_per_commit: commits_0
            .zip(commits_1)
            .map(|(c0, c1)| outcome.acked_readings as f64 / c1.saturating_sub(c0).max(1) as f64),
    })
}

fn summarize(plan: &Plan, runs: &[ServeRun]) -> Vec<ServeSummary> {
    let mut out = Vec::new();
    for &size in &plan.sizes {
        for &target in &plan.targets {
            let of = |phase: &str| -> Vec<&ServeRun> {
                runs.iter()
                    .filter(|r| {
                        r.target == target.name()
                            && r.readings_per_event == size
                            && r.phase == phase
                    })
                    .collect()
            };
            let (peak, half) = (of("peak"), of("half-peak"));
            if peak.is_empty() {
                continue;
            }
            let med = |runs: &[&ServeRun], f: fn(&ServeRun) -> f64| -> f64 {
                median(&mut runs.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let half_med = |f: fn(&ServeRun) -> f64| (!half.is_empty()).then(|| med(&half, f));
            // Per phase, the median of the runs that counted their commits (roamkv's).
            let per_commit = |runs: &[&ServeRun]| {
                let mut v: Vec<f64> = runs.iter().filter_map(|r| r.readings_per_commit).collect();
                (!v.is_empty()).then(|| median(&mut v))
            };
            let mut repeats: Vec<f64> = peak.iter().map(|r| r.readings_per_sec).collect();
            repeats.sort_by(|a, b| a.total_cmp(b));
            out.push(ServeSummary {
                target: target.name().into(),
                readings_per_event: size,
                readings_per_sec: med(&peak, |r| r.readings_per_sec),
                readings_per_sec_repeats: repeats,
                p50_ms: med(&peak, |r| r.p50_ms),
                p99_ms: med(&peak, |r| r.p99_ms),
                server_cpu_us_per_reading: med(&peak, |r| r.server_cpu_us_per_reading),
                half_peak_offered: half_med(|r| r.offered_readings_per_sec.unwrap_or(0.0)),
                half_peak_achieved: half_med(|r| r.readings_per_sec),
                half_peak_p50_ms: half_med(|r| r.p50_ms),
                half_peak_p99_ms: half_med(|r| r.p99_ms),
                readings_per_commit: per_commit(&peak),
                half_peak_readings_per_commit: per_commit(&half),
                checks_ok: peak
                    .iter()
                    .chain(&half)
                    .all(|r| r.check == "ok" && r.errors == 0),
                broker_cpu_us_per_reading: target.is_bus().then(|| {
                    med(&peak, |r| {
                        r.broker_cpu_s.unwrap_or(f64::NAN) * 1e6 / r.acked_readings.max(1) as f64
                    })
                }),
                drain_s: target
                    .is_bus()
                    .then(|| med(&peak, |r| r.drain_s.unwrap_or(f64::NAN))),
            });
        }
    }
    out
}

/// The server's decode steps for one event of `size` readings, timed in this process (one
/// thread, ~0.4 s per step): JSON parsing, the checks and CBOR encoding of each reading, and
/// (for comparison) decoding the same readings as a binary batch.
fn decode_cost(size: usize) -> Result<DecodeCost> {
    use roamkv_wire::edgex::{event_to_readings, parse_add_event_json};
    let json = edgex_json(&EventSpec {
        client: 0,
        seq: 0,
        readings: size,
        origin_ms: 1_700_000_000_000,
    });
    // The best of three 100 ms rounds after a warm-up round: the cost, not the noise.
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let mut best = f64::MAX;
        for round in 0..4 {
            let started = Instant::now();
            let mut n = 0u64;
            while started.elapsed() < Duration::from_millis(100) {
                f()?;
                n += 1;
            }
            let per_reading = started.elapsed().as_secs_f64() * 1e6 / (n as f64 * size as f64);
            if round > 0 {
                best = best.min(per_reading);
            }
        }
        Ok(best)
    };
    let parse = time(&mut || {
        parse_add_event_json(json.as_bytes())
            .map(drop)
            .map_err(BenchError::from)
    })?;
    let parse_and_convert = time(&mut || {
        let request = parse_add_event_json(json.as_bytes())?;
        event_to_readings(request, None, usize::MAX)
            .map(drop)
            .map_err(BenchError::from)
    })?;
    let values = stored_values(size)?;
    let mut batch = Vec::new();
    roamkv_wire::batch::encode_header(&mut batch, size as u32);
    for (i, value) in values.iter().enumerate() {
        roamkv_wire::batch::encode_record(&mut batch, "dev-0", &load::resource_name(i), 1, value);
    }
    let binary = time(&mut || {
        roamkv_wire::batch::decode(&batch, usize::MAX)
            .map(drop)
            .map_err(BenchError::from)
    })?;
    Ok(DecodeCost {
        readings_per_event: size,
        json_parse_us_per_reading: parse,
        checks_and_cbor_us_per_reading: (parse_and_convert - parse).max(0.0),
        binary_decode_us_per_reading: binary,
    })
}

fn find<'a>(summaries: &'a [ServeSummary], target: &str, size: usize) -> Option<&'a ServeSummary> {
    summaries
        .iter()
        .find(|s| s.target == target && s.readings_per_event == size)
}

/// The server's three targets (HTTP at 100 readings/event reaches at least half of the
/// in-process engine; p99 at half the peak; ahead of InfluxDB 1.6), computed from the medians
/// (never asserted), and where the server's CPU goes.
fn verdict(summaries: &[ServeSummary], costs: &[DecodeCost]) -> Vec<String> {
    let mut lines = Vec::new();
    let sizes: Vec<usize> = costs.iter().map(|c| c.readings_per_event).collect();
    for &size in &sizes {
        lines.extend(bus::verdict(summaries, size));
        let (roam, engine, influx) = (
            find(summaries, "roamkv", size),
            find(summaries, "engine", size),
            find(summaries, "influxdb", size),
        );
        if let (Some(r), Some(e)) = (roam, engine) {
            lines.push(format!(
                "{size}/event: roamkv over HTTP {:.0} readings/s = {:.0} % of the in-process engine's {:.0} (target at 100/event: >= 50 %)",
                r.readings_per_sec,
                100.0 * r.readings_per_sec / e.readings_per_sec,
                e.readings_per_sec
            ));
        }
        if let (Some(r), Some(i)) = (roam, influx) {
            lines.push(format!(
                "{size}/event: roamkv / InfluxDB 1.6 = {:.2}x ({:.0} vs {:.0} readings/s; target >= 3x)",
                r.readings_per_sec / i.readings_per_sec,
                r.readings_per_sec,
                i.readings_per_sec
            ));
        }
        if let Some(q) = find(summaries, "questdb", size) {
            for (name, ours) in [
                ("roamkv (EdgeX JSON)", roam),
                ("roamkv-binary", find(summaries, "roamkv-binary", size)),
            ] {
                let Some(ours) = ours else { continue };
                lines.push(format!(
                    "{size}/event: {name} / QuestDB 9.2 = {:.2}x ({:.0} vs {:.0} readings/s; CPU {:.1} vs {:.1} µs/reading; the goal: native batches >= QuestDB)",
                    ours.readings_per_sec / q.readings_per_sec,
                    ours.readings_per_sec,
                    q.readings_per_sec,
                    ours.server_cpu_us_per_reading,
                    q.server_cpu_us_per_reading
                ));
            }
        }
        if let Some(r) = roam
            && let (Some(p99), Some(achieved)) = (r.half_peak_p99_ms, r.half_peak_achieved)
        {
            lines.push(format!(
                "{size}/event: roamkv p99 at half the peak ({achieved:.0} readings/s) = {p99:.2} ms (target < 20 ms)"
            ));
        }
        if let (Some(r), Some(b), Some(e), Some(c)) = (
            roam,
            find(summaries, "roamkv-binary", size),
            engine,
            costs.iter().find(|c| c.readings_per_event == size),
        ) {
            lines.push(format!(
                "{size}/event, CPU per reading: roamkv serve {:.1} µs (JSON parse {:.1}, checks + CBOR {:.1}), with binary batches {:.1} µs (decode {:.2}), in-process engine {:.1} µs",
                r.server_cpu_us_per_reading,
                c.json_parse_us_per_reading,
                c.checks_and_cbor_us_per_reading,
                b.server_cpu_us_per_reading,
                c.binary_decode_us_per_reading,
                e.server_cpu_us_per_reading
            ));
        }
    }
    lines
}
