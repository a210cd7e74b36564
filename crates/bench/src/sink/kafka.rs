//! `roamkv bench sink --kafka`: the same server and clients as the PostgreSQL run, the sink
//! pointed at a real three-node Kafka 4.4 cluster on this machine (roamkv_testbed::kafka: KRaft,
//! replication 3, `min.insync.replicas=2`, the topic's 3 partitions), with Kafka's faults:
//!
//! 1. **Capacity**: every broker stopped (SIGSTOP: the link cut) while a backlog is written;
//!    continued; the sink's drain rate with nothing else running, and the time to its first
//!    commit (which includes the cluster's own recovery from a stop of all its nodes).
//! 2. **Lag** at half that rate (or `--rate`), sampled every 100 ms.
//! 3. **Leader kill** under the same ingest: SIGKILL to the leader of partition 0; the outage is
//!    the kill to the sink's next commit, then the time until its lag is under 1 s.
//! 4. **Link cut** under the same ingest: every broker stopped for `--outage-seconds`, as the
//!    database is away in the PostgreSQL run; the time from the cut's end to a lag under 1 s.
//!
//! At the end the topic is read back (count.rs): every acknowledged reading once, by a
//! read_committed consumer, and the brokers' offsets accounted for.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use roamkv_testbed::kafka::KafkaCluster;
use roamkv_testbed::serve::ServeProcess;

use super::count::{TopicCount, count_topic};
use super::watch::{
    LagSampler, lag_percentiles, phase_base_ms, rows_total, wait_caught_up, wait_for_rows_above,
    wait_lag_below,
};
use crate::error::{BenchError, Result};
use crate::serve::load::{
    HttpClient, HttpSender, PROFILE, Pace, SOURCE, Sender, drive, edgex_json,
};

/// The data topic.
const TOPIC: &str = "roamkv-readings";
/// Its partitions (a device's readings on one of them).
const PARTITIONS: u32 = 3;
/// Ingest before a fault under ingest, so that the fault finds the sink tailing.
const LEAD: Duration = Duration::from_secs(5);

/// What the Kafka run is given: the PostgreSQL run's clients, rate rule and phase lengths, so
/// that the two compare.
pub struct Setup {
    pub clients: usize,
    pub readings_per_event: usize,
    /// `--rate`; None: half the capacity measured.
    pub rate: Option<f64>,
    pub work_dir: PathBuf,
    pub backlog: Duration,
    pub steady: Duration,
    pub outage: Duration,
}

/// One fault under ingest, as results.json has it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FaultFigures {
    /// How long the cloud was away: the cut's length; for a leader kill, from the kill to the
    /// sink's next commit (the failover as the sink saw it).
    pub outage_s: f64,
    /// From the fault's end (the cut lifted, the leader killed) to the sink's next commit.
    pub first_commit_after_s: f64,
    /// From the fault's end to the sink's lag under 1 s.
    pub caught_up_after_s: f64,
}

/// The figures of the Kafka run.
#[derive(Debug, Default, serde::Serialize)]
pub struct KafkaResults {
    pub cluster_startup_s: f64,
    pub backlog_readings: u64,
    pub capacity_readings_per_sec: f64,
    /// From the brokers continued to the sink's first commit.
    pub resume_after_backlog_ms: f64,
    pub rate_readings_per_sec: f64,
    pub rate_rule: String,
    pub ingested_per_sec: f64,
    pub lag_p50_s: f64,
    pub lag_p99_s: f64,
    pub lag_max_s: f64,
    pub leader_kill: FaultFigures,
    pub link_cut: FaultFigures,
    pub acked_readings: u64,
    pub ingest_errors: u64,
    pub topic: TopicCount,
    pub lag_series: Vec<(String, Vec<(f64, f64)>)>,
}

/// The cluster and the server whose sink feeds it, stopped on every path out (Drop: the server
/// first, then every broker, then the data directory).
struct Rig {
    server: ServeProcess,
    cluster: KafkaCluster,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn start(setup: &Setup) -> Result<Rig> {
        let cluster = KafkaCluster::start(3)?;
        cluster.create_topic(TOPIC, PARTITIONS, &["min.insync.replicas=2"])?;
        let dir = tempfile::Builder::new()
            .prefix("bench-sink-kafka-")
            .tempdir_in(&setup.work_dir)
            .map_err(|e| BenchError::io("making a directory under", &setup.work_dir, e))?;
        let url = format!("kafka://{}/{TOPIC}", cluster.bootstrap());
        let (server, addr) = start_edge(&dir.path().join("data"), &url, setup.clients, None)?;
        Ok(Rig {
            server,
            cluster,
            addr,
            _dir: dir,
        })
    }

    fn senders(&self, clients: usize) -> Vec<Box<dyn Sender>> {
        edgex_senders(self.addr, clients)
    }

    /// SIGSTOP (`true`) or SIGCONT to every broker: the link cut and restored.
    fn cut(&self, stop: bool) {
        for id in self.cluster.ids() {
            self.cluster.pause(id, stop);
        }
    }
}

/// `roamkv serve --sink URL` on `data`, as the PostgreSQL run's server (serve/targets.rs): sync
/// durability, the load's 2023 origins kept (ServeProcess turns the default retention off),
/// room for `clients` concurrent requests; ready, with its address. On a free loopback port, or
/// `within` a network namespace (its name) on a free port of its address there (fleet/net.rs).
pub(super) fn start_edge(
    data: &Path,
    url: &str,
    clients: usize,
    within: Option<(&str, Ipv4Addr)>,
) -> Result<(ServeProcess, SocketAddr)> {
    let exe =
        std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
    let requests_max = (clients * 2 + 8).to_string();
    let listen = within.map_or(Ipv4Addr::LOCALHOST, |(_, ip)| ip);
    let mut entered = Ok(());
    let server = ServeProcess::start_listening(&exe, data, &format!("{listen}:0"), |command| {
        command.args(["--sink", url, "--durability", "sync"]);
        command.args(["--concurrent-requests-max", &requests_max]);
        command.env("RUST_LOG", "warn");
        if let Some((netns, _)) = within {
            // No token: the namespaces' network is private to the bench, as the handoff's.
            command.arg("--insecure");
            entered = roamkv_testbed::netns::enter_in_child(command, netns);
        }
    });
    entered?;
    server.wait_ready(Duration::from_secs(60));
    let addr = server
        .addr
        .parse()
        .map_err(|e| BenchError::Run(format!("serve's address {}: {e}", server.addr)))?;
    Ok((server, addr))
}

/// `clients` clients of the server at `addr`: EdgeX JSON events on core-data's route, as the
/// PostgreSQL run's.
pub(super) fn edgex_senders(addr: SocketAddr, clients: usize) -> Vec<Box<dyn Sender>> {
    (0..clients)
        .map(|_| {
            Box::new(HttpSender {
                client: HttpClient::new(addr),
                content_type: "application/json",
                path: std::sync::Arc::new(|e| {
                    format!("/api/v3/event/bench/{PROFILE}/{}/{SOURCE}", e.device())
                }),
                body: std::sync::Arc::new(|e| edgex_json(e).into_bytes()),
            }) as Box<dyn Sender>
        })
        .collect()
}

/// Runs the Kafka phases; the cluster and server are stopped whatever happens.
pub fn run(setup: &Setup) -> Result<KafkaResults> {
    let mut results = KafkaResults::default();
    let mut rig = Rig::start(setup)?;
    results.cluster_startup_s = rig.cluster.startup.as_secs_f64();
    println!(
        "kafka: 3 nodes up in {:.1} s; roamkv serve --sink kafka://…/{TOPIC}",
        results.cluster_startup_s
    );
    wait_caught_up(rig.addr, Duration::from_secs(60))?;
    capacity(&rig, setup, &mut results)?;
    half_rate(&rig, setup, &mut results)?;
    // Each fault finds the sink caught up (and the killed leader back in the cluster).
    wait_caught_up(rig.addr, Duration::from_secs(600))?;
    leader_kill(&mut rig, setup, &mut results)?;
    wait_caught_up(rig.addr, Duration::from_secs(600))?;
    link_cut(&rig, setup, &mut results)?;
    wait_caught_up(rig.addr, Duration::from_secs(600))?;
    results.topic = count_topic(&rig.cluster.bootstrap(), TOPIC)?;
    rig.server.signal(libc::SIGTERM);
    rig.server.wait_exit(120);
    let t = &results.topic;
    println!(
        "kafka topic: {} reading records, {} distinct, {} twice; {} acknowledged; end offsets {} \
         ({} markers and aborted)",
        t.reading_records,
        t.distinct_readings,
        t.duplicated,
        results.acked_readings,
        t.end_offsets,
        t.markers_and_aborted
    );
    Ok(results)
}

/// The brokers stopped while a backlog is written; continued, the backlog drained.
fn capacity(rig: &Rig, setup: &Setup, results: &mut KafkaResults) -> Result<()> {
    rig.cut(true);
    let load = drive(
        rig.senders(setup.clients),
        setup.readings_per_event,
        Pace::ClosedLoop,
        Duration::ZERO,
        setup.backlog,
        phase_base_ms(1),
    );
    note_load(results, &load);
    results.backlog_readings = load.acked_readings;
    let before = rows_total(rig.addr)?;
    rig.cut(false);
    let back = Instant::now();
    let resumed = wait_for_rows_above(rig.addr, before, Duration::from_secs(120))?;
    wait_caught_up(rig.addr, Duration::from_secs(900))?;
    let draining = back.elapsed().saturating_sub(resumed).as_secs_f64();
    results.resume_after_backlog_ms = resumed.as_secs_f64() * 1e3;
    results.capacity_readings_per_sec = results.backlog_readings as f64 / draining.max(1e-3);
    println!(
        "kafka capacity: {} readings drained in {draining:.1} s: {:.0} readings/s (first commit \
         {:.0} ms after the brokers continued)",
        results.backlog_readings,
        results.capacity_readings_per_sec,
        results.resume_after_backlog_ms
    );
    Ok(())
}

/// Open-loop ingest at half the capacity (or `--rate`), the lag sampled.
fn half_rate(rig: &Rig, setup: &Setup, results: &mut KafkaResults) -> Result<()> {
    let (rate, rule) = match setup.rate {
        Some(rate) => (rate, "given (--rate)"),
        None => (results.capacity_readings_per_sec / 2.0, "half the capacity"),
    };
    results.rate_readings_per_sec = rate;
    results.rate_rule = rule.to_string();
    let sampler = LagSampler::start(rig.addr);
    let load = drive(
        rig.senders(setup.clients),
        setup.readings_per_event,
        Pace::OpenLoop {
            readings_per_sec: rate,
        },
        Duration::from_secs(2),
        setup.steady,
        phase_base_ms(2),
    );
    let samples = sampler.stop();
    note_load(results, &load);
    results.ingested_per_sec = load.readings_per_sec();
    (results.lag_p50_s, results.lag_p99_s, results.lag_max_s) = lag_percentiles(&samples);
    results
        .lag_series
        .push((format!("kafka, ingest at {rate:.0} readings/s"), samples));
    println!(
        "kafka, ingest at {rate:.0} readings/s ({rule}): {:.0} ingested; lag p50 {:.2} s, p99 \
         {:.2} s, max {:.2} s",
        results.ingested_per_sec, results.lag_p50_s, results.lag_p99_s, results.lag_max_s
    );
    Ok(())
}

/// `senders` ingest at the phase rate on a thread for `LEAD` + `during`, the lag of the server
/// at `addr` sampled; `fault` runs after `LEAD` and returns the figures; the ingest is then
/// waited for.
fn under_ingest(
    senders: Vec<Box<dyn Sender>>,
    addr: SocketAddr,
    (during, phase): (Duration, i64),
    per_event: usize,
    results: &mut KafkaResults,
    fault: impl FnOnce() -> Result<FaultFigures>,
) -> Result<(FaultFigures, Vec<(f64, f64)>)> {
    let rate = results.rate_readings_per_sec;
    let sampler = LagSampler::start(addr);
    let ingest = std::thread::spawn(move || {
        drive(
            senders,
            per_event,
            Pace::OpenLoop {
                readings_per_sec: rate,
            },
            Duration::ZERO,
            LEAD + during,
            phase_base_ms(phase),
        )
    });
    std::thread::sleep(LEAD);
    let figures = fault();
    let load = ingest
        .join()
        .map_err(|_| BenchError::Run("the ingest thread panicked".into()))?;
    note_load(results, &load);
    Ok((figures?, sampler.stop()))
}

/// SIGKILL to partition 0's leader under ingest (the outage: until the sink's next commit);
/// the node started again once the phase ends.
fn leader_kill(rig: &mut Rig, setup: &Setup, results: &mut KafkaResults) -> Result<()> {
    let leader = rig
        .cluster
        .leader(TOPIC, 0)?
        .ok_or_else(|| BenchError::Run("partition 0 has no leader".into()))?;
    let (senders, addr) = (rig.senders(setup.clients), rig.addr);
    let cluster = &mut rig.cluster;
    let during = (setup.outage + setup.outage, 3);
    let per_event = setup.readings_per_event;
    let (figures, samples) = under_ingest(senders, addr, during, per_event, results, || {
        let before = rows_total(addr)?;
        cluster.kill(leader);
        let failover = wait_for_rows_above(addr, before, Duration::from_secs(120))?;
        let caught_up = failover + wait_lag_below(addr, 1.0, Duration::from_secs(600))?;
        Ok(FaultFigures {
            outage_s: failover.as_secs_f64(),
            first_commit_after_s: failover.as_secs_f64(),
            caught_up_after_s: caught_up.as_secs_f64(),
        })
    })?;
    rig.cluster.restart(leader)?;
    println!(
        "kafka leader (node {leader}) killed under ingest: next commit {:.1} s after, lag under \
         1 s {:.1} s after",
        figures.first_commit_after_s, figures.caught_up_after_s
    );
    results.leader_kill = figures;
    results
        .lag_series
        .push(("kafka, leader killed".to_string(), samples));
    Ok(())
}

/// Every broker stopped for `setup.outage` under ingest.
fn link_cut(rig: &Rig, setup: &Setup, results: &mut KafkaResults) -> Result<()> {
    let during = setup.outage + setup.outage + Duration::from_secs(10);
    let senders = rig.senders(setup.clients);
    let (during, per_event) = ((during, 4), setup.readings_per_event);
    let (figures, samples) = under_ingest(senders, rig.addr, during, per_event, results, || {
        rig.cut(true);
        std::thread::sleep(setup.outage);
        let before = rows_total(rig.addr)?;
        rig.cut(false);
        let resumed = wait_for_rows_above(rig.addr, before, Duration::from_secs(120))?;
        let caught_up = resumed + wait_lag_below(rig.addr, 1.0, Duration::from_secs(600))?;
        Ok(FaultFigures {
            outage_s: setup.outage.as_secs_f64(),
            first_commit_after_s: resumed.as_secs_f64(),
            caught_up_after_s: caught_up.as_secs_f64(),
        })
    })?;
    println!(
        "kafka link cut {:.0} s under ingest: next commit {:.1} s after it ended, lag under 1 s \
         {:.1} s after",
        figures.outage_s, figures.first_commit_after_s, figures.caught_up_after_s
    );
    results.link_cut = figures;
    results.lag_series.push((
        format!("kafka, {:.0} s link cut", setup.outage.as_secs_f64()),
        samples,
    ));
    Ok(())
}

fn note_load(results: &mut KafkaResults, load: &crate::serve::load::LoadOutcome) {
    results.acked_readings += load.acked_readings;
    results.ingest_errors += load.errors;
}

impl KafkaResults {
    /// Every acknowledged reading in the topic once: as many distinct readings as the clients
    /// were acknowledged, none twice.
    pub fn each_once(&self) -> bool {
        self.topic.distinct_readings == self.acked_readings && self.topic.duplicated == 0
    }
}
