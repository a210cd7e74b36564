//! `roamkv bench sink`: the cloud sink of `roamkv serve`, into a private PostgreSQL on this
//! machine (Debian's 15, default durability: fsync on, synchronous_commit on), under HTTP ingest
//! of EdgeX events (`bench serve`'s clients and bodies). Three phases on one server:
//!
//! 1. **Capacity**: ingest with the database away builds a backlog; the database comes back; the
//!    sink's commits per second while it drains the backlog (nothing else running) are its
//!    capacity, and the time from the database's return to the first commit is its resume time.
//! 2. **Lag under ingest**: open-loop ingest at half the capacity (or at `--rate`); the sink's
//!    lag in seconds (`GET /api/roamkv/v1/sink`) sampled every 100 ms: p50, p99, max. On a small
//!    machine the server, its clients, the database and the sink share the cores: the capacity
//!    (measured with nothing else running) is not what the sink gets while ingest goes on.
//! 3. **Outage**: the same ingest, the database killed (SIGKILL of the postmaster) for a while and
//!    restarted; resume time, and the time until the sink is back within a second of the log's
//!    head.
//!
//! At the end every reading the clients had acknowledged must be in the cloud table (and in the
//! edge): the run fails otherwise. What the sink costs ingest is `bench serve --engines
//! roamkv,roamkv-sink` (same clients, the sink on or off).

mod count;
mod fleet;
mod kafka;
mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use roamkv_testbed::report::{Html, MachineHeader, line_chart_svg};

use crate::error::{BenchError, Result};
use crate::serve::load::{Pace, drive};
use crate::serve::targets::{self, Target, Up};
use kafka::KafkaResults;
use watch::{
    LagSampler, lag_percentiles, phase_base_ms, rows_total, wait_caught_up, wait_for_rows_above,
    wait_lag_below,
};

#[derive(Args, Debug)]
pub struct SinkBenchArgs {
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "out/bench-sink")]
    pub out: PathBuf,
    /// Seconds of ingest with the database away: the backlog the sink then drains [default:
    /// 30; quick: 5].
    #[arg(long)]
    pub backlog_seconds: Option<f64>,
    /// Seconds of ingest at half the sink's capacity, its lag sampled [default: 60; quick: 10].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Seconds the database is away during ingest [default: 60; quick: 10].
    #[arg(long)]
    pub outage_seconds: Option<f64>,
    /// Readings per second of ingest in the lag and outage phases [default: half the measured
    /// capacity].
    #[arg(long)]
    pub rate: Option<f64>,
    /// Readings per EdgeX event.
    #[arg(long, default_value_t = 10)]
    pub readings_per_event: usize,
    /// HTTP clients (one device each).
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Seconds, not minutes.
    #[arg(long)]
    pub quick: bool,
    /// Where the server's data directory and the database are made (removed after).
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    /// Then the same phases into a real three-node Kafka 4.4 cluster on this machine (KRaft,
    /// replication 3), its faults a leader killed and every broker stopped: the two clouds side
    /// by side, in one run (`scripts/install-deps test` fetches Kafka).
    #[arg(long)]
    pub kafka: bool,
    /// With `--kafka`: the fleet form instead, for each size in the list (default 1,2,4) that
    /// many `roamkv serve` edges, each in a network namespace of its own, draining into one
    /// three-node cluster (sink/fleet: the drain rate against N, lag at half of it, every
    /// edge's readings once). `--clients` and `--rate` are then each edge's; no PostgreSQL run.
    #[arg(long, requires = "kafka", num_args = 0..=1, value_delimiter = ',',
          default_missing_value = "1,2,4")]
    pub edges: Option<Vec<usize>>,
}

/// The figures of one run, as results.json has them.
#[derive(Debug, Default, serde::Serialize)]
pub struct SinkResults {
    pub backlog_readings: u64,
    /// Readings committed per second while draining the backlog with no ingest.
    pub capacity_readings_per_sec: f64,
    /// From the database accepting connections again to the sink's first commit.
    pub resume_after_backlog_ms: f64,
    /// The ingest rate asked in the lag and outage phases, and how it was chosen.
    pub rate_readings_per_sec: f64,
    pub rate_rule: String,
    pub ingested_per_sec: f64,
    pub lag_p50_s: f64,
    pub lag_p99_s: f64,
    pub lag_max_s: f64,
    pub outage_s: f64,
    pub resume_after_outage_ms: f64,
    /// From the database's return until the sink is within a second of the log's head again.
    pub drained_after_outage_s: f64,
    pub acked_readings: u64,
    pub cloud_readings: u64,
    /// (seconds since the phase began, lag seconds) of the half-rate and outage phases.
    pub lag_series: Vec<(String, Vec<(f64, f64)>)>,
    /// The Kafka run (`--kafka`).
    pub kafka: Option<KafkaResults>,
}

/// The phases' lengths, defaults applied.
struct Plan {
    backlog: Duration,
    steady: Duration,
    outage: Duration,
}

impl Plan {
    fn from_args(args: &SinkBenchArgs) -> Plan {
        let pick = |given: Option<f64>, full: f64, quick: f64| {
            Duration::from_secs_f64(given.unwrap_or(if args.quick { quick } else { full }))
        };
        Plan {
            backlog: pick(args.backlog_seconds, 30.0, 5.0),
            steady: pick(args.seconds, 60.0, 10.0),
            outage: pick(args.outage_seconds, 60.0, 10.0),
        }
    }
}

pub fn run(args: &SinkBenchArgs) -> ExitCode {
    if let Some(edges) = &args.edges {
        return fleet_run(args, edges);
    }
    match bench(args) {
        Ok(results) if results.cloud_readings != results.acked_readings => {
            eprintln!(
                "roamkv bench sink: the cloud holds {} readings, the clients were acknowledged {}",
                results.cloud_readings, results.acked_readings
            );
            ExitCode::FAILURE
        }
        Ok(SinkResults { kafka: Some(k), .. }) if !k.each_once() => {
            eprintln!(
                "roamkv bench sink: the Kafka topic holds {} distinct readings ({} twice), the \
                 clients were acknowledged {}",
                k.topic.distinct_readings, k.topic.duplicated, k.acked_readings
            );
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv bench sink: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--kafka --edges`: the fleet run; fails unless every size's ledger holds.
fn fleet_run(args: &SinkBenchArgs, edges: &[usize]) -> ExitCode {
    let outcome = (|| -> Result<Vec<bool>> {
        roamkv_testbed::prerequisite::require_root()?;
        if edges.is_empty() || edges.contains(&0) {
            return Err(BenchError::Run("--edges: fleet sizes of 1 or more".into()));
        }
        let plan = Plan::from_args(args);
        std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
        let header = MachineHeader::collect();
        let setup = fleet::FleetSetup {
            edges: edges.to_vec(),
            clients: args.clients,
            readings_per_event: args.readings_per_event,
            rate_per_edge: args.rate,
            work_dir: args.work_dir.clone(),
            backlog: plan.backlog,
            steady: plan.steady,
        };
        let results = fleet::run(&setup)?;
        let described = serde_json::json!({
            "edges": edges,
            "clients_per_edge": args.clients,
            "readings_per_event": args.readings_per_event,
            "backlog_s": plan.backlog.as_secs_f64(),
            "lag_phase_s": plan.steady.as_secs_f64(),
        });
        fleet::report::write(&args.out, &header, described, &results)?;
        Ok(results
            .sizes
            .iter()
            .map(fleet::FleetSize::each_once)
            .collect())
    })();
    match outcome {
        Ok(held) if held.iter().all(|h| *h) => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!(
                "roamkv bench sink --edges: an edge's acknowledged readings are not in the topic                  once each (the table's FAILED rows)"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("roamkv bench sink --edges: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &SinkBenchArgs) -> Result<SinkResults> {
    roamkv_testbed::prerequisite::require_root()?;
    let plan = Plan::from_args(args);
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    println!(
        "roamkv bench sink: {} clients, {} readings/event, backlog {} s, half-rate {} s, outage {} s; PostgreSQL under {}",
        args.clients,
        args.readings_per_event,
        plan.backlog.as_secs_f64(),
        plan.steady.as_secs_f64(),
        plan.outage.as_secs_f64(),
        args.work_dir.display()
    );
    let mut up = targets::start(
        Target::RoamkvSink,
        &args.work_dir,
        args.clients,
        roamkv_engine::Durability::Sync,
    )?;
    let mut results = SinkResults::default();
    let phases = run_phases(&mut up, args, &plan, &mut results);
    // Whatever happened, the server stops, and the cloud is compared with the edge.
    let rows = match &up {
        Up::Server(server) => server.cloud_rows_when_caught_up(),
        Up::Engine { .. } => Err(BenchError::Run("the sink runs in a server".into())),
    };
    let edge = up.finish(args.clients);
    phases?;
    results.cloud_readings = rows?.unwrap_or(0);
    let edge = edge?;
    if edge != results.acked_readings {
        return Err(BenchError::Check(format!(
            "the edge holds {edge} readings, the clients were acknowledged {}",
            results.acked_readings
        )));
    }
    if args.kafka {
        let setup = kafka::Setup {
            clients: args.clients,
            readings_per_event: args.readings_per_event,
            rate: args.rate,
            work_dir: args.work_dir.clone(),
            backlog: plan.backlog,
            steady: plan.steady,
            outage: plan.outage,
        };
        results.kafka = Some(kafka::run(&setup)?);
    }
    report(args, &header, &results)?;
    Ok(results)
}

fn run_phases(
    up: &mut Up,
    args: &SinkBenchArgs,
    plan: &Plan,
    results: &mut SinkResults,
) -> Result<()> {
    let (addr, _) = server_parts(up)?;
    wait_caught_up(addr, Duration::from_secs(60))?;
    capacity_phase(up, args, plan, results)?;
    half_rate_phase(up, args, plan, results)?;
    outage_phase(up, args, plan, results)
}

/// The database away, a backlog written; the database back, the backlog drained.
fn capacity_phase(
    up: &mut Up,
    args: &SinkBenchArgs,
    plan: &Plan,
    results: &mut SinkResults,
) -> Result<()> {
    let (addr, cloud) = server_parts(up)?;
    cloud.kill_postmaster()?;
    let senders = up.senders(args.clients, args.readings_per_event)?;
    let load = drive(
        senders,
        args.readings_per_event,
        Pace::ClosedLoop,
        Duration::ZERO,
        plan.backlog,
        phase_base_ms(1),
    );
    results.backlog_readings = load.acked_readings;
    results.acked_readings += load.acked_readings;
    let before = rows_total(addr)?;
    let (_, cloud) = server_parts(up)?;
    cloud.restart()?;
    let back = Instant::now();
    let resumed = wait_for_rows_above(addr, before, Duration::from_secs(60))?;
    wait_caught_up(addr, Duration::from_secs(600))?;
    let drained = back.elapsed();
    results.resume_after_backlog_ms = resumed.as_secs_f64() * 1e3;
    let draining = drained.saturating_sub(resumed).as_secs_f64().max(1e-3);
    results.capacity_readings_per_sec = results.backlog_readings as f64 / draining;
    println!(
        "capacity: {} readings drained in {draining:.1} s after the database came back: {:.0} readings/s (first commit {:.0} ms after it accepted connections)",
        results.backlog_readings,
        results.capacity_readings_per_sec,
        results.resume_after_backlog_ms
    );
    Ok(())
}

/// Open-loop ingest at the phase's rate (half the capacity, or `--rate`); the lag sampled.
fn half_rate_phase(
    up: &mut Up,
    args: &SinkBenchArgs,
    plan: &Plan,
    results: &mut SinkResults,
) -> Result<()> {
    let (addr, _) = server_parts(up)?;
    let (rate, rule) = match args.rate {
        Some(rate) => (rate, "given (--rate)"),
        None => (results.capacity_readings_per_sec / 2.0, "half the capacity"),
    };
    results.rate_readings_per_sec = rate;
    results.rate_rule = rule.to_string();
    let senders = up.senders(args.clients, args.readings_per_event)?;
    let sampler = LagSampler::start(addr);
    let load = drive(
        senders,
        args.readings_per_event,
        Pace::OpenLoop {
            readings_per_sec: rate,
        },
        Duration::from_secs(2),
        plan.steady,
        phase_base_ms(2),
    );
    let samples = sampler.stop();
    results.acked_readings += load.acked_readings;
    results.ingested_per_sec = load.readings_per_sec();
    (results.lag_p50_s, results.lag_p99_s, results.lag_max_s) = lag_percentiles(&samples);
    results
        .lag_series
        .push((format!("ingest at {rate:.0} readings/s"), samples));
    println!(
        "ingest at {rate:.0} readings/s ({rule}): {:.0} ingested; sink lag p50 {:.2} s, p99 {:.2} s, max {:.2} s",
        results.ingested_per_sec, results.lag_p50_s, results.lag_p99_s, results.lag_max_s
    );
    Ok(())
}

/// Ingest at the same rate while the database is away for `plan.outage`.
fn outage_phase(
    up: &mut Up,
    args: &SinkBenchArgs,
    plan: &Plan,
    results: &mut SinkResults,
) -> Result<()> {
    let (addr, _) = server_parts(up)?;
    let rate = results.rate_readings_per_sec;
    let senders = up.senders(args.clients, args.readings_per_event)?;
    let lead = Duration::from_secs(5);
    let total = lead + plan.outage + plan.outage + Duration::from_secs(10);
    let sampler = LagSampler::start(addr);
    let (readings_per_event, base) = (args.readings_per_event, phase_base_ms(3));
    let ingest = std::thread::spawn(move || {
        drive(
            senders,
            readings_per_event,
            Pace::OpenLoop {
                readings_per_sec: rate,
            },
            Duration::ZERO,
            total,
            base,
        )
    });
    std::thread::sleep(lead);
    let (_, cloud) = server_parts(up)?;
    cloud.kill_postmaster()?;
    std::thread::sleep(plan.outage);
    let before = rows_total(addr)?;
    let (_, cloud) = server_parts(up)?;
    cloud.restart()?;
    let resumed = wait_for_rows_above(addr, before, Duration::from_secs(60))?;
    let drained = resumed + wait_lag_below(addr, 1.0, Duration::from_secs(600))?;
    results.outage_s = plan.outage.as_secs_f64();
    results.resume_after_outage_ms = resumed.as_secs_f64() * 1e3;
    results.drained_after_outage_s = drained.as_secs_f64();
    let load = ingest
        .join()
        .map_err(|_| BenchError::Run("the ingest thread panicked".into()))?;
    results.acked_readings += load.acked_readings;
    let samples = sampler.stop();
    results.lag_series.push((
        format!("{:.0} s outage", plan.outage.as_secs_f64()),
        samples,
    ));
    println!(
        "outage of {:.0} s during ingest at {rate:.0} readings/s: first commit {:.0} ms after the database returned, within 1 s of the head {:.1} s after it",
        results.outage_s, results.resume_after_outage_ms, results.drained_after_outage_s
    );
    Ok(())
}

/// The server's address and its cloud database.
fn server_parts(up: &mut Up) -> Result<(SocketAddr, &mut roamkv_testbed::postgres::Cluster)> {
    let Up::Server(server) = up else {
        return Err(BenchError::Run("the sink runs in a server".into()));
    };
    let addr = server.addr();
    let cloud = server
        .cloud()
        .ok_or_else(|| BenchError::Run("the server was started without a sink".into()))?;
    Ok((addr, cloud))
}

fn report(args: &SinkBenchArgs, header: &MachineHeader, r: &SinkResults) -> Result<()> {
    let mut table = comfy_table::Table::new();
    table.set_header(vec!["figure", "value"]);
    let rows = [
        (
            "backlog drained (readings)",
            format!("{}", r.backlog_readings),
        ),
        (
            "capacity (readings/s committed)",
            format!("{:.0}", r.capacity_readings_per_sec),
        ),
        (
            "resume after the database returned (ms)",
            format!(
                "{:.0} / {:.0}",
                r.resume_after_backlog_ms, r.resume_after_outage_ms
            ),
        ),
        (
            "ingest in the lag and outage phases (readings/s)",
            format!("{:.0} ({})", r.ingested_per_sec, r.rate_rule),
        ),
        (
            "lag p50 / p99 / max (s)",
            format!(
                "{:.2} / {:.2} / {:.2}",
                r.lag_p50_s, r.lag_p99_s, r.lag_max_s
            ),
        ),
        (
            "outage (s), then within 1 s of the head after (s)",
            format!("{:.0}, {:.1}", r.outage_s, r.drained_after_outage_s),
        ),
        (
            "readings acknowledged / in the cloud",
            format!("{} / {}", r.acked_readings, r.cloud_readings),
        ),
    ];
    for (figure, value) in rows {
        table.add_row(vec![figure.to_string(), value]);
    }
    println!("{table}");
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "clients": args.clients,
        "readings_per_event": args.readings_per_event,
        "results": r,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    let mut html = Html::new("roamkv bench sink: the cloud sink into PostgreSQL", header);
    html.preformatted(&table.to_string());
    let mut series = r.lag_series.clone();
    if let Some(k) = &r.kafka {
        let both = side_by_side(r, k);
        println!("{both}");
        html.preformatted(&both.to_string());
        series.extend(k.lag_series.iter().cloned());
    }
    html.svg(&line_chart_svg(
        "The sink's lag",
        "seconds since the phase began",
        "lag (s)",
        &series,
    ));
    html.write(&args.out.join("report.html"))?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}

/// The two clouds' figures side by side, with the targets.
fn side_by_side(pg: &SinkResults, k: &KafkaResults) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.set_header(vec!["figure", "PostgreSQL", "Kafka", "target"]);
    let ratio = k.capacity_readings_per_sec / pg.capacity_readings_per_sec.max(1e-9);
    let rows = [
        (
            "drain rate, backlog, nothing else running (readings/s)".to_string(),
            format!("{:.0}", pg.capacity_readings_per_sec),
            format!("{:.0} ({ratio:.2}x)", k.capacity_readings_per_sec),
            "Kafka >= 2x".to_string(),
        ),
        (
            "lag p50 / p99 / max at half the rate (s)".to_string(),
            format!(
                "{:.2} / {:.2} / {:.2}",
                pg.lag_p50_s, pg.lag_p99_s, pg.lag_max_s
            ),
            format!(
                "{:.2} / {:.2} / {:.2}",
                k.lag_p50_s, k.lag_p99_s, k.lag_max_s
            ),
            "p99 < 1 s".to_string(),
        ),
        (
            "ingest at that rate (readings/s)".to_string(),
            format!("{:.0}", pg.ingested_per_sec),
            format!("{:.0}", k.ingested_per_sec),
            String::new(),
        ),
        (
            format!(
                "{:.0} s outage (database killed / every broker stopped): next commit, lag < 1 s, after it ended (s)",
                pg.outage_s
            ),
            format!(
                "{:.1}, {:.1}",
                pg.resume_after_outage_ms / 1e3,
                pg.drained_after_outage_s
            ),
            format!(
                "{:.1}, {:.1}",
                k.link_cut.first_commit_after_s, k.link_cut.caught_up_after_s
            ),
            format!("lag < 1 s within {:.0} s", 2.0 * pg.outage_s),
        ),
        (
            "leader killed: next commit (the outage), lag < 1 s, after the kill (s)".to_string(),
            "-".to_string(),
            format!(
                "{:.1}, {:.1}",
                k.leader_kill.outage_s, k.leader_kill.caught_up_after_s
            ),
            "lag < 1 s within 2x the outage".to_string(),
        ),
        (
            "acknowledged / in the cloud once / twice".to_string(),
            format!(
                "{} / {} / 0 (keyed rows)",
                pg.acked_readings, pg.cloud_readings
            ),
            format!(
                "{} / {} / {}",
                k.acked_readings, k.topic.distinct_readings, k.topic.duplicated
            ),
            "0 lost, 0 twice".to_string(),
        ),
    ];
    for (figure, a, b, target) in rows {
        table.add_row(vec![figure, a, b, target]);
    }
    table.add_row(vec![
        "brokers' end offsets = records + markers and aborted".to_string(),
        "-".to_string(),
        offsets_account(k),
        String::new(),
    ]);
    table
}

/// The brokers' offsets against the records the consumer was given.
fn offsets_account(k: &KafkaResults) -> String {
    let t = &k.topic;
    format!(
        "{} = {} + {}",
        t.end_offsets,
        t.reading_records + t.departures,
        t.markers_and_aborted
    )
}
