//! `roamkv bench serve`: HTTP ingest of `roamkv serve` against InfluxDB 1.6 at equal durability
//! and against the in-process engine (the ceiling), with EdgeX events of 1..100 readings.
//!
//! For each readings-per-event size and repeat, every system (`targets`) is started
//! fresh and driven by the same clients (`load`): first closed loop (the peak rate and
//! its latency), then open loop at half the median peak (the latency a server has when it is
//! not saturated). After every run the readings the system stored are counted and must equal
//! the readings it acked. Medians over the repeats; a table, results.json and report.html.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, say};
use roamkv_testbed::stats::median;

use crate::error::{BenchError, Result};

pub mod load;
pub mod targets;

use load::{EventSpec, Pace, drive, edgex_json};
use roamkv_testbed::command::process_cpu_seconds;
use targets::{Target, start, stored_values};

#[derive(Args, Debug)]
pub struct ServeBenchArgs {
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "out/bench-serve")]
    pub out: PathBuf,
    /// Systems, comma-separated: roamkv, roamkv-binary, influxdb, engine [default: all].
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Option<Vec<Target>>,
    /// Readings per event, comma-separated [default: 1,10,100; quick: 1,100].
    #[arg(long, value_delimiter = ',')]
    pub readings_per_event: Option<Vec<usize>>,
    /// Concurrent clients (one connection, one device each) [default: 32; quick: 8].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Measured seconds per run [default: 10; quick: 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Unmeasured seconds at the start of every run [default: 1; quick: 0.3].
    #[arg(long)]
    pub warmup_seconds: Option<f64>,
    /// Runs per configuration; medians are reported [default: 3; quick: 1].
    #[arg(long)]
    pub repeats: Option<usize>,
    /// A short run (seconds, not minutes): fewer sizes, clients, repeats.
    #[arg(long)]
    pub quick: bool,
    /// Where the systems' data directories are made (each run gets a fresh one, deleted after).
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    /// Leave out the open-loop runs at half the peak rate.
    #[arg(long)]
    pub skip_half_peak: bool,
    /// Readings per second of every open-loop run, the same for every system (default: half of
    /// each system's own median peak). One offered load for all: what a feature costs below
    /// saturation (`--engines roamkv,roamkv-sink`), where half of each one's own peak would
    /// compare two different loads.
    #[arg(long)]
    pub open_loop_rate: Option<f64>,
}

/// The settings of one invocation, defaults applied.
struct Plan {
    targets: Vec<Target>,
    sizes: Vec<usize>,
    clients: usize,
    measured: Duration,
    warmup: Duration,
    repeats: usize,
}

impl Plan {
    fn from_args(args: &ServeBenchArgs) -> Result<Plan> {
        let q = args.quick;
        let plan = Plan {
            targets: args
                .engines
                .clone()
                .unwrap_or_else(|| Target::all().to_vec()),
            sizes: args
                .readings_per_event
                .clone()
                .unwrap_or_else(|| if q { vec![1, 100] } else { vec![1, 10, 100] }),
            clients: args.clients.unwrap_or(if q { 8 } else { 32 }),
            measured: Duration::from_secs_f64(args.seconds.unwrap_or(if q { 1.0 } else { 10.0 })),
            warmup: Duration::from_secs_f64(args.warmup_seconds.unwrap_or(if q {
                0.3
            } else {
                1.0
            })),
            repeats: args.repeats.unwrap_or(if q { 1 } else { 3 }),
        };
        if plan.clients == 0 || plan.repeats == 0 || plan.targets.is_empty() {
            return Err(BenchError::Usage(
                "--clients, --repeats and --engines need at least one".into(),
            ));
        }
        if plan.sizes.iter().any(|n| !(1..=10_000).contains(n)) {
            return Err(BenchError::Usage(
                "--readings-per-event values must be in 1..=10000".into(),
            ));
        }
        if plan.measured.is_zero() {
            return Err(BenchError::Usage("--seconds must be above 0".into()));
        }
        Ok(plan)
    }

    fn runs(&self, half_peak: bool) -> usize {
        let http = self.targets.iter().filter(|t| t.is_http()).count();
        self.sizes.len() * self.repeats * (self.targets.len() + if half_peak { http } else { 0 })
    }
}

/// One run of one system.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeRun {
    pub target: String,
    pub readings_per_event: usize,
    /// "peak" (closed loop) or "half-peak" (open loop at half the median peak).
    pub phase: &'static str,
    pub repeat: usize,
    pub clients: usize,
    pub offered_readings_per_sec: Option<f64>,
    pub readings_per_sec: f64,
    pub events: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// CPU seconds of the system under test over the run (server process; in-process engine:
    /// this process), and of this process (the load generator) for HTTP systems.
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
    pub server_cpu_us_per_reading: f64,
    pub acked_readings: u64,
    pub stored_readings: u64,
    pub check: String,
    pub measured_s: f64,
}

/// Medians of a configuration's repeats.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeSummary {
    pub target: String,
    pub readings_per_event: usize,
    pub readings_per_sec: f64,
    pub readings_per_sec_repeats: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub server_cpu_us_per_reading: f64,
    pub half_peak_offered: Option<f64>,
    pub half_peak_achieved: Option<f64>,
    pub half_peak_p50_ms: Option<f64>,
    pub half_peak_p99_ms: Option<f64>,
    pub checks_ok: bool,
}

/// CPU cost of the server's decoding steps for one event, measured in this process.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecodeCost {
    pub readings_per_event: usize,
    pub json_parse_us_per_reading: f64,
    pub checks_and_cbor_us_per_reading: f64,
    pub binary_decode_us_per_reading: f64,
}

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
    if plan.targets.contains(&Target::Influxdb) && !influxd_installed() {
        return Err(BenchError::Usage(targets::INFLUXDB_MISSING.into()));
    }
    let header = MachineHeader::collect();
    println!(
        "roamkv bench serve: {} clients, {} s measured + {} s warm-up per run, {} repeat(s), readings/event {:?}, systems {}, durability sync (InfluxDB: WAL fsync per write), data under {}",
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
        args.work_dir.display()
    );
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
    let lines = verdict(&summaries, &costs);
    for line in &lines {
        println!("{line}");
    }
    write_outputs(args, &plan, &header, &runs, &summaries, &costs, &lines)?;
    Ok(runs.iter().all(|r| r.check == "ok" && r.errors == 0))
}

fn influxd_installed() -> bool {
    std::process::Command::new("influxd")
        .arg("version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
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
                let run = run_one(plan, args, target, size, Pace::ClosedLoop, repeat)?;
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
    let up = start(target, &args.work_dir, plan.clients)?;
    let senders = up.senders(plan.clients, size)?;
    let (server_cpu_0, client_cpu_0) = (up.cpu_seconds(), process_cpu_seconds("/proc/self/stat"));
    let outcome = drive(senders, size, pace, plan.warmup, plan.measured, now_ms());
    let (server_cpu_1, client_cpu_1) = (up.cpu_seconds(), process_cpu_seconds("/proc/self/stat"));
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
                checks_ok: peak
                    .iter()
                    .chain(&half)
                    .all(|r| r.check == "ok" && r.errors == 0),
            });
        }
    }
    out
}

/// The server's decode steps for one event of `size` readings, timed in this process (one
/// thread, ~0.4 s per step): JSON parsing, the checks and CBOR encoding of each reading, and
/// (for comparison) decoding the same readings as a binary batch.
fn decode_cost(size: usize) -> Result<DecodeCost> {
    use roamkv_wire::edgex::{event_to_readings, parse_add_event};
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
        parse_add_event(json.as_bytes(), false)
            .map(drop)
            .map_err(BenchError::from)
    })?;
    let parse_and_convert = time(&mut || {
        let request = parse_add_event(json.as_bytes(), false)?;
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

fn terminal_table(summaries: &[ServeSummary]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "readings/event",
        "system",
        "readings/s (median)",
        "repeats",
        "p50 ms",
        "p99 ms",
        "half-peak readings/s",
        "half p50 ms",
        "half p99 ms",
        "CPU µs/reading",
        "checks",
    ]);
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    for s in summaries {
        table.add_row([
            s.readings_per_event.to_string(),
            s.target.clone(),
            format!("{:.0}", s.readings_per_sec),
            s.readings_per_sec_repeats
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            format!("{:.2}", s.p50_ms),
            format!("{:.2}", s.p99_ms),
            opt(s.half_peak_achieved, 0),
            opt(s.half_peak_p50_ms, 2),
            opt(s.half_peak_p99_ms, 2),
            format!("{:.1}", s.server_cpu_us_per_reading),
            if s.checks_ok {
                "ok".into()
            } else {
                "FAILED".into()
            },
        ]);
    }
    table.to_string()
}

fn write_outputs(
    args: &ServeBenchArgs,
    plan: &Plan,
    header: &MachineHeader,
    runs: &[ServeRun],
    summaries: &[ServeSummary],
    costs: &[DecodeCost],
    verdict: &[String],
) -> Result<()> {
    let notes = notes(plan);
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "config": {
            "systems": plan.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
            "readings_per_event": plan.sizes,
            "clients": plan.clients,
            "measured_s": plan.measured.as_secs_f64(),
            "warmup_s": plan.warmup.as_secs_f64(),
            "repeats": plan.repeats,
            "work_dir": args.work_dir.display().to_string(),
            "half_peak": !args.skip_half_peak,
        },
        "verdict": verdict,
        "notes": notes,
        "summaries": summaries,
        "decode_cost": costs,
        "runs": runs,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    write_html(
        &args.out.join("report.html"),
        header,
        summaries,
        verdict,
        &notes,
    )?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}

fn notes(plan: &Plan) -> Vec<String> {
    vec![
        format!("Each run starts its system fresh on a new data directory, runs {} clients (one keep-alive HTTP/1.1 connection and one device each; in-process: one thread each) for {:.1} s of warm-up and {:.1} s measured, then stops the system and counts the readings it stored, which must equal the readings it acked.", plan.clients, plan.warmup.as_secs_f64(), plan.measured.as_secs_f64()),
        "Peak: closed loop (a client sends its next event when the last is answered); latency per request. Half-peak: open loop at half the median peak rate, events on a fixed schedule per client, latency from the scheduled send time (a server that falls behind shows it as latency).".into(),
        "roamkv: `roamkv serve --durability sync` as a child process, EdgeX v3 AddEventRequests (JSON) on /api/v3/event/...; roamkv-binary: the same server and the same stored bytes as native binary batches; influxdb: InfluxDB 1.6 (Debian), line protocol on /write, wal-fsync-delay 0s (its WAL fsync'd on every write, as roamkv's sync acks after fdatasync); engine: the in-process engine (Durability::Sync) writing the same keys and CBOR values from one thread per client.".into(),
        "Every event of a client has a new origin (1 ms apart), so every reading is a new key in every system. InfluxDB gets each reading as one point: device, resource, profile and source as tags; value, valueType, units, reading id and event id as fields — what roamkv stores in its CBOR value.".into(),
        "CPU µs/reading: CPU time of the system's process over the whole run (warm-up included) per acked reading; for the in-process engine it is this process's. The decode costs are the server's own functions timed in this process on one thread.".into(),
    ]
}

fn write_html(
    path: &std::path::Path,
    header: &MachineHeader,
    summaries: &[ServeSummary],
    verdict: &[String],
    notes: &[String],
) -> Result<()> {
    let mut html = Html::new(
        "roamkv bench serve: HTTP ingest vs InfluxDB 1.6 and the engine",
        header,
    );
    html.heading("Against the targets");
    for line in verdict {
        html.paragraph(line);
    }
    charts(&mut html, summaries);
    html.heading("Medians");
    medians_table(&mut html, summaries);
    html.heading("Method");
    for note in notes {
        html.paragraph(note);
    }
    Ok(html.write(path)?)
}

/// Bar charts by readings per event, one bar per system: rate, p99 at peak and at half, CPU.
fn charts(html: &mut Html, summaries: &[ServeSummary]) {
    let mut sizes: Vec<usize> = summaries.iter().map(|s| s.readings_per_event).collect();
    sizes.dedup();
    let mut targets: Vec<String> = Vec::new();
    for s in summaries {
        if !targets.contains(&s.target) {
            targets.push(s.target.clone());
        }
    }
    let categories: Vec<String> = sizes
        .iter()
        .map(|n| format!("{n} readings/event"))
        .collect();
    let series = |f: &dyn Fn(&ServeSummary) -> Option<f64>| -> Vec<(String, Vec<f64>)> {
        let by: BTreeMap<(String, usize), &ServeSummary> = summaries
            .iter()
            .map(|s| ((s.target.clone(), s.readings_per_event), s))
            .collect();
        targets
            .iter()
            .map(|t| {
                let values = sizes
                    .iter()
                    .map(|n| {
                        by.get(&(t.clone(), *n))
                            .and_then(|s| f(s))
                            .unwrap_or(f64::NAN)
                    })
                    .collect();
                (t.clone(), values)
            })
            .collect()
    };
    html.svg(&bar_chart_svg(
        "Peak ingest (median of repeats)",
        "readings/s",
        &categories,
        &series(&|s| Some(s.readings_per_sec)),
    ));
    html.svg(&bar_chart_svg(
        "p99 latency at the peak (closed loop)",
        "ms",
        &categories,
        &series(&|s| Some(s.p99_ms)),
    ));
    html.svg(&bar_chart_svg(
        "p99 latency at half the peak rate (open loop)",
        "ms",
        &categories,
        &series(&|s| s.half_peak_p99_ms),
    ));
    html.svg(&bar_chart_svg(
        "CPU of the system per reading",
        "µs",
        &categories,
        &series(&|s| Some(s.server_cpu_us_per_reading)),
    ));
}

fn medians_table(html: &mut Html, summaries: &[ServeSummary]) {
    let columns = [
        "readings/event",
        "system",
        "readings/s",
        "repeats",
        "p50 ms",
        "p99 ms",
        "half-peak readings/s",
        "half p99 ms",
        "CPU µs/reading",
        "checks",
    ];
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.readings_per_event.to_string(),
                s.target.clone(),
                format!("{:.0}", s.readings_per_sec),
                s.readings_per_sec_repeats
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                format!("{:.2}", s.p50_ms),
                format!("{:.2}", s.p99_ms),
                s.half_peak_achieved
                    .map_or("-".into(), |v| format!("{v:.0}")),
                s.half_peak_p99_ms.map_or("-".into(), |v| format!("{v:.2}")),
                format!("{:.1}", s.server_cpu_us_per_reading),
                if s.checks_ok {
                    "ok".into()
                } else {
                    "FAILED".into()
                },
            ]
        })
        .collect();
    html.table(&columns, &rows);
}
