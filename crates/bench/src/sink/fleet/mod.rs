//! `roamkv bench sink --kafka --edges 1,2,4`: the fleet form. For each fleet size N, N real
//! `roamkv serve` processes, each with its own data directory (so its own edge id, its own
//! transactional producer and its own position in the offsets topic), drain into one three-node
//! Kafka cluster (the single-edge run's: kafka.rs) and one topic of their own size
//! (`roamkv-fleet-N`, 3 partitions, replication 3, `min.insync.replicas=2`):
//!
//! 0. **Warm-up**, once: one edge's backlog drained into a topic of its own, not reported
//!    (`warm_up`: a cold cluster drains at about half its warm rate).
//! 1. **Drain**: every broker stopped (SIGSTOP, the link cut) while every edge writes a backlog
//!    (closed loop); continued; each edge's drain rate (its backlog over its first commit to
//!    caught up), the fleet's (every backlog over the first commit to the last edge caught up),
//!    and the brokers' CPU time over the drain (utime + stime of the three JVMs).
//! 2. **Lag**: open-loop ingest into every edge at the same per-edge rate (half the fleet's
//!    drain split evenly, or `--rate` for each edge), each edge's lag sampled every 100 ms.
//! 3. **Ledger**: a read_committed consumer reads the topic whole; each edge's acknowledged
//!    readings must be there once each, counted by the edge id every record carries.
//!
//! Each edge runs in a network namespace of its own (net.rs): its clients reach it, and it
//! reaches the brokers, over its own veth pair and a bridge, as an edge on a machine of its own
//! reaches the cloud over its own link; the brokers, the clients and the consumer stay in the
//! root namespace, on the bridge's address. Edges, clients and brokers share this machine's cores:
//! N edges' ingest is N servers' work beside the brokers', so the aggregate is a lower bound
//! on what the same cluster takes from edges on their own machines.

pub mod net;
pub mod report;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use roamkv_testbed::command::process_cpu_seconds;
use roamkv_testbed::kafka::KafkaCluster;
use roamkv_testbed::serve::ServeProcess;

use super::count::{TopicCount, count_topic};
use super::kafka::{edgex_senders, start_edge};
use super::watch::{
    LagSampler, lag_percentiles, phase_base_ms, rows_total, wait_caught_up, wait_for_rows_above,
};
use crate::error::{BenchError, Result};
use crate::serve::load::{LoadOutcome, Pace, drive};
use net::FleetNet;

/// Each fleet size's topic: this prefix and N, so that each size is counted alone.
const TOPIC_PREFIX: &str = "roamkv-fleet-";
/// Its partitions, as the single-edge run's topic.
const PARTITIONS: u32 = 3;
/// How long an edge may take to drain its backlog.
const DRAIN_MAX: Duration = Duration::from_secs(900);

/// What the fleet run is given.
pub struct FleetSetup {
    /// The fleet sizes, in order.
    pub edges: Vec<usize>,
    /// HTTP clients per edge.
    pub clients: usize,
    pub readings_per_event: usize,
    /// Readings per second into each edge in the lag phase; None: half the fleet's drain rate,
    /// split evenly.
    pub rate_per_edge: Option<f64>,
    pub work_dir: PathBuf,
    pub backlog: Duration,
    pub steady: Duration,
}

/// One edge of one fleet size, as results.json has it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct EdgeFigures {
    pub edge_id: String,
    pub backlog_readings: u64,
    /// From the brokers continued to this edge's first commit.
    pub first_commit_after_ms: f64,
    /// From its first commit to caught up.
    pub drain_s: f64,
    pub drain_readings_per_sec: f64,
    pub lag_p50_s: f64,
    pub lag_p99_s: f64,
    pub lag_max_s: f64,
    pub acked_readings: u64,
    pub ingest_errors: u64,
    /// Its readings in the topic, distinct and twice.
    pub topic_readings: u64,
    pub topic_duplicated: u64,
}

/// One fleet size.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct FleetSize {
    pub edges: usize,
    /// /proc/loadavg before and after.
    pub load_before: String,
    pub load_after: String,
    pub backlog_readings: u64,
    /// Every edge's backlog over the first commit of any edge to the last edge caught up.
    pub aggregate_readings_per_sec: f64,
    pub drain_s: f64,
    /// The brokers' CPU (cores busy) from their continue to the last edge caught up, and their
    /// CPU milliseconds per thousand readings drained.
    pub brokers_cores_drain: f64,
    pub brokers_cpu_ms_per_1k_readings: f64,
    /// The edges' servers' CPU over the same window (cores busy, all edges).
    pub edges_cores_drain: f64,
    pub rate_per_edge: f64,
    pub rate_rule: String,
    /// Readings per second acknowledged over all edges in the lag phase.
    pub ingested_per_sec: f64,
    /// The brokers' cores busy in the lag phase.
    pub brokers_cores_at_rate: f64,
    /// The worst edge's lag p99, and the p99 of every edge's samples pooled.
    pub lag_p99_worst_s: f64,
    pub lag_p99_pooled_s: f64,
    pub acked_readings: u64,
    pub topic: TopicCount,
    pub per_edge: Vec<EdgeFigures>,
    pub lag_series: Vec<(String, Vec<(f64, f64)>)>,
}

impl FleetSize {
    /// Every edge's acknowledged readings in the topic once, and no reading of another edge.
    pub fn each_once(&self) -> bool {
        let edges_ok = self.per_edge.iter().all(|e| {
            e.topic_readings == e.acked_readings && e.topic_duplicated == 0 && e.ingest_errors == 0
        });
        edges_ok
            && self.topic.by_edge.len() == self.per_edge.len()
            && self.topic.distinct_readings == self.acked_readings
            && self.topic.duplicated == 0
    }
}

/// The figures of the fleet run.
#[derive(Debug, Default, serde::Serialize)]
pub struct FleetResults {
    pub cluster_startup_s: f64,
    /// The warm-up drain's rate (one edge, not a fleet size).
    pub warm_up_readings_per_sec: f64,
    pub sizes: Vec<FleetSize>,
}

/// One `roamkv serve` of the fleet, killed on drop (ServeProcess) before its directory goes.
struct Edge {
    server: ServeProcess,
    addr: SocketAddr,
    edge_id: String,
    _dir: tempfile::TempDir,
}

impl Edge {
    /// Starts an edge in the namespace `netns`, listening on `ip`.
    fn start(setup: &FleetSetup, url: &str, (netns, ip): (String, Ipv4Addr)) -> Result<Edge> {
        let dir = tempfile::Builder::new()
            .prefix("bench-sink-fleet-")
            .tempdir_in(&setup.work_dir)
            .map_err(|e| BenchError::io("making a directory under", &setup.work_dir, e))?;
        let data = dir.path().join("data");
        let (server, addr) = start_edge(&data, url, setup.clients, Some((&netns, ip)))?;
        let edge_id = edge_id(&data)?;
        Ok(Edge {
            server,
            addr,
            edge_id,
            _dir: dir,
        })
    }

    fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(&format!("/proc/{}/stat", self.server.child.id()))
    }
}

/// The edge id `roamkv serve` made for `data` (`server/edge.json`): what its records carry.
fn edge_id(data: &std::path::Path) -> Result<String> {
    let path = data.join("server").join("edge.json");
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io("reading", &path, e))?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    value["edge_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| BenchError::Run(format!("{} holds no edge_id", path.display())))
}

/// Runs every fleet size against one cluster; the cluster, every edge and every namespace are
/// stopped or deleted whatever happens (drops: the edges of a size when it ends, then the
/// cluster, the network last).
pub fn run(setup: &FleetSetup) -> Result<FleetResults> {
    let largest = setup.edges.iter().copied().max().unwrap_or(1);
    let net = FleetNet::create(largest)?;
    let cluster = KafkaCluster::start_on(3, net::HOST_IP)?;
    let mut results = FleetResults {
        cluster_startup_s: cluster.startup.as_secs_f64(),
        warm_up_readings_per_sec: 0.0,
        sizes: Vec::new(),
    };
    println!(
        "kafka: 3 nodes up in {:.1} s on {}; fleets of {:?} edges, {} clients each, each edge \
         in a network namespace of its own",
        results.cluster_startup_s,
        net::HOST_IP,
        setup.edges,
        setup.clients
    );
    results.warm_up_readings_per_sec = warm_up(&cluster, &net, setup)?;
    println!(
        "warm-up: one edge drained {:.0} readings/s (not reported as a fleet size)",
        results.warm_up_readings_per_sec
    );
    for &n in &setup.edges {
        let size = run_size(&cluster, &net, setup, n)?;
        println!(
            "{n} edges: drained {:.0} readings/s together ({:.0} each), brokers {:.2} cores \
             ({:.1} ms CPU per 1,000 readings); lag p99 {:.2} s (worst edge) at {:.0} \
             readings/s each; topic once {} of {} acknowledged, twice {}",
            size.aggregate_readings_per_sec,
            size.aggregate_readings_per_sec / n as f64,
            size.brokers_cores_drain,
            size.brokers_cpu_ms_per_1k_readings,
            size.lag_p99_worst_s,
            size.rate_per_edge,
            size.topic.distinct_readings,
            size.acked_readings,
            size.topic.duplicated
        );
        results.sizes.push(size);
    }
    Ok(results)
}

/// One edge's backlog drained into a topic of its own, before any fleet size is measured: a
/// cold cluster's JVMs compile their hot paths during the first minutes of load (in two runs
/// without it, 1,2,4 and 4,2,1, the size measured first drained at about half the rate of the
/// same size measured last; the shared machine's load swings as much: docs/BENCHMARKS.md,
/// "A fleet into one cluster"). Returns its rate.
fn warm_up(cluster: &KafkaCluster, net: &FleetNet, setup: &FleetSetup) -> Result<f64> {
    let topic = format!("{TOPIC_PREFIX}warm-up");
    cluster.create_topic(&topic, PARTITIONS, &["min.insync.replicas=2"])?;
    let url = format!("kafka://{}/{topic}", cluster.bootstrap());
    let edges = vec![Edge::start(setup, &url, net.edge(1))?];
    wait_caught_up(edges[0].addr, Duration::from_secs(60))?;
    let mut scratch = FleetSize {
        per_edge: vec![EdgeFigures::default()],
        ..FleetSize::default()
    };
    drain(cluster, &edges, setup, &mut scratch)?;
    Ok(scratch.aggregate_readings_per_sec)
}

/// One fleet size: its topic, its N edges started, drained, driven, counted and stopped.
fn run_size(
    cluster: &KafkaCluster,
    net: &FleetNet,
    setup: &FleetSetup,
    n: usize,
) -> Result<FleetSize> {
    let topic = format!("{TOPIC_PREFIX}{n}");
    cluster.create_topic(&topic, PARTITIONS, &["min.insync.replicas=2"])?;
    let url = format!("kafka://{}/{topic}", cluster.bootstrap());
    let mut edges = (0..n)
        .map(|i| Edge::start(setup, &url, net.edge(i + 1)))
        .collect::<Result<Vec<Edge>>>()?;
    for edge in &edges {
        wait_caught_up(edge.addr, Duration::from_secs(60))?;
    }
    let mut size = FleetSize {
        edges: n,
        load_before: load_average(),
        per_edge: edges
            .iter()
            .map(|e| EdgeFigures {
                edge_id: e.edge_id.clone(),
                ..EdgeFigures::default()
            })
            .collect(),
        ..FleetSize::default()
    };
    drain(cluster, &edges, setup, &mut size)?;
    lag(cluster, &edges, setup, &mut size)?;
    for edge in &edges {
        wait_caught_up(edge.addr, DRAIN_MAX)?;
    }
    size.topic = count_topic(&cluster.bootstrap(), &topic)?;
    ledger(&mut size);
    for edge in &mut edges {
        edge.server.signal(libc::SIGTERM);
        edge.server.wait_exit(120);
    }
    size.load_after = load_average();
    Ok(size)
}

/// Each edge's readings found in the topic, by its edge id.
fn ledger(size: &mut FleetSize) {
    for edge in &mut size.per_edge {
        let found = size.topic.by_edge.get(&edge.edge_id);
        edge.topic_readings = found.map_or(0, |c| c.distinct_readings);
        edge.topic_duplicated = found.map_or(0, |c| c.duplicated);
    }
    size.acked_readings = size.per_edge.iter().map(|e| e.acked_readings).sum();
}

/// Each edge's `drive` of `duration` at `pace`, all at once, one thread each; their outcomes in
/// the edges' order.
fn drive_all(
    edges: &[Edge],
    setup: &FleetSetup,
    pace: impl Fn() -> Pace + Sync,
    (warmup, duration): (Duration, Duration),
    phase: i64,
) -> Vec<LoadOutcome> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = edges
            .iter()
            .map(|edge| {
                let senders = edgex_senders(edge.addr, setup.clients);
                let pace = pace();
                scope.spawn(move || {
                    drive(
                        senders,
                        setup.readings_per_event,
                        pace,
                        warmup,
                        duration,
                        phase_base_ms(phase),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a fleet ingest thread panicked"))
            .collect()
    })
}

fn note_loads(size: &mut FleetSize, loads: &[LoadOutcome]) {
    for (edge, load) in size.per_edge.iter_mut().zip(loads) {
        edge.acked_readings += load.acked_readings;
        edge.ingest_errors += load.errors;
    }
}

/// The brokers' CPU seconds so far (utime + stime of every node's JVM).
fn brokers_cpu_seconds(cluster: &KafkaCluster) -> f64 {
    cluster
        .pids()
        .iter()
        .map(|pid| process_cpu_seconds(&format!("/proc/{pid}/stat")))
        .sum()
}

/// When one edge's drain began and ended, from the brokers' continue.
struct DrainTimes {
    first_commit: Duration,
    caught_up: Duration,
}

/// The brokers stopped while every edge writes a backlog; continued, every backlog drained.
fn drain(
    cluster: &KafkaCluster,
    edges: &[Edge],
    setup: &FleetSetup,
    size: &mut FleetSize,
) -> Result<()> {
    let cut = |stop: bool| {
        cluster
            .ids()
            .into_iter()
            .for_each(|id| cluster.pause(id, stop))
    };
    cut(true);
    let loads = drive_all(
        edges,
        setup,
        || Pace::ClosedLoop,
        (Duration::ZERO, setup.backlog),
        1,
    );
    note_loads(size, &loads);
    let before = edges
        .iter()
        .map(|e| rows_total(e.addr))
        .collect::<Result<Vec<u64>>>()?;
    cut(false);
    let back = Instant::now();
    let cpu_0 = (brokers_cpu_seconds(cluster), edges_cpu_seconds(edges));
    let times = watch_drains(edges, &before, back)?;
    let window = back.elapsed().as_secs_f64().max(1e-3);
    let cpu_1 = (brokers_cpu_seconds(cluster), edges_cpu_seconds(edges));
    let mut first = f64::MAX;
    let mut last = 0.0f64;
    for ((edge, load), t) in size.per_edge.iter_mut().zip(&loads).zip(&times) {
        edge.backlog_readings = load.acked_readings;
        edge.first_commit_after_ms = t.first_commit.as_secs_f64() * 1e3;
        edge.drain_s = (t.caught_up - t.first_commit).as_secs_f64().max(1e-3);
        edge.drain_readings_per_sec = edge.backlog_readings as f64 / edge.drain_s;
        first = first.min(t.first_commit.as_secs_f64());
        last = last.max(t.caught_up.as_secs_f64());
    }
    size.backlog_readings = size.per_edge.iter().map(|e| e.backlog_readings).sum();
    size.drain_s = (last - first).max(1e-3);
    size.aggregate_readings_per_sec = size.backlog_readings as f64 / size.drain_s;
    size.brokers_cores_drain = (cpu_1.0 - cpu_0.0) / window;
    size.edges_cores_drain = (cpu_1.1 - cpu_0.1) / window;
    size.brokers_cpu_ms_per_1k_readings =
        (cpu_1.0 - cpu_0.0) * 1e3 / (size.backlog_readings as f64 / 1e3).max(1e-9);
    Ok(())
}

fn edges_cpu_seconds(edges: &[Edge]) -> f64 {
    edges.iter().map(Edge::cpu_seconds).sum()
}

/// Each edge's first commit after `before[i]` rows and its catching up, watched on a thread of
/// its own, timed from `back`.
fn watch_drains(edges: &[Edge], before: &[u64], back: Instant) -> Result<Vec<DrainTimes>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = edges
            .iter()
            .zip(before)
            .map(|(edge, &before)| {
                let addr = edge.addr;
                scope.spawn(move || -> Result<DrainTimes> {
                    wait_for_rows_above(addr, before, Duration::from_secs(120))?;
                    let first_commit = back.elapsed();
                    wait_caught_up(addr, DRAIN_MAX)?;
                    Ok(DrainTimes {
                        first_commit,
                        caught_up: back.elapsed(),
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| BenchError::Run("a drain watcher panicked".into()))?
            })
            .collect()
    })
}

/// Open-loop ingest into every edge at one per-edge rate, each edge's lag sampled.
fn lag(
    cluster: &KafkaCluster,
    edges: &[Edge],
    setup: &FleetSetup,
    size: &mut FleetSize,
) -> Result<()> {
    let (rate, rule) = match setup.rate_per_edge {
        Some(rate) => (rate, "given (--rate, each edge)"),
        None => (
            size.aggregate_readings_per_sec / 2.0 / edges.len() as f64,
            "half the fleet's drain rate, split evenly",
        ),
    };
    size.rate_per_edge = rate;
    size.rate_rule = rule.to_string();
    let samplers: Vec<LagSampler> = edges.iter().map(|e| LagSampler::start(e.addr)).collect();
    let warmup = Duration::from_secs(2);
    let cpu_0 = brokers_cpu_seconds(cluster);
    let begun = Instant::now();
    let loads = drive_all(
        edges,
        setup,
        || Pace::OpenLoop {
            readings_per_sec: rate,
        },
        (warmup, setup.steady),
        2,
    );
    size.brokers_cores_at_rate =
        (brokers_cpu_seconds(cluster) - cpu_0) / begun.elapsed().as_secs_f64().max(1e-3);
    note_loads(size, &loads);
    size.ingested_per_sec = loads.iter().map(LoadOutcome::readings_per_sec).sum();
    let mut pooled = Vec::new();
    for (i, (edge, sampler)) in size.per_edge.iter_mut().zip(samplers).enumerate() {
        let samples = sampler.stop();
        (edge.lag_p50_s, edge.lag_p99_s, edge.lag_max_s) = lag_percentiles(&samples);
        size.lag_p99_worst_s = size.lag_p99_worst_s.max(edge.lag_p99_s);
        pooled.extend(samples.iter().copied());
        size.lag_series.push((
            format!(
                "{} edges, edge {}, {rate:.0} readings/s",
                edges.len(),
                i + 1
            ),
            samples,
        ));
    }
    size.lag_p99_pooled_s = lag_percentiles(&pooled).1;
    Ok(())
}

/// /proc/loadavg's three averages ("" if it cannot be read).
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
