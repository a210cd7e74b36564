//! The Kafka sink against a real three-node Kafka 4.4 cluster (KRaft, replication 3,
//! min.insync.replicas 2; roamkv_testbed::kafka), one cluster for the whole binary (its start
//! is most of the time): every reading the engine acknowledged lands once in a read_committed
//! consumer, one device's readings in order on one partition —
//!
//! 1. a first start (the devices present exported by scanning) and then the tail;
//! 2. the partition leader killed with SIGKILL while writers write;
//! 3. the edge killed with SIGKILL inside an open Kafka transaction (a crash point, in a child
//!    process: this binary run again), once during the first scan and once while tailing, then
//!    a sink stopped and started again mid-stream: each start resumes from what Kafka
//!    committed;
//! 4. every broker stopped (SIGSTOP: the link cut, connections left open) for 30 s while the
//!    writers write, then continued: caught up within twice the cut;
//!
//! and brokers that cannot be reached at start retried (the sink starts disconnected), a topic
//! that does not exist refused at start with what to do. The ledger (writers'
//! acknowledgements) is held against what the consumer counted: nothing lost, nothing twice.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use roamkv_engine::{Engine, Options, Record};
use roamkv_sink::{Sink, SinkConfig};
use roamkv_testbed::kafka::{self, KafkaCluster};
use roamkv_testbed::ledger::{Ledger, value_of};
use roamkv_testbed::prerequisite;
use tokio::sync::watch;

/// The child role: `data dir|url|crash point spec`, set by `run_child`.
const CHILD_ENV: &str = "ROAMKV_KAFKA_SINK_CHILD";
/// Partitions of each data topic.
const PARTITIONS: u32 = 3;
/// How long a sink may take to catch up after a fault (a failover is seconds; the issue's
/// target is twice the outage).
const CATCH_UP_MAX: Duration = Duration::from_secs(60);
/// How long the link is cut (issue 56's fault): every broker stopped at once.
const LINK_CUT: Duration = Duration::from_secs(30);

fn options() -> Options {
    Options {
        segment_bytes: 1 << 20,
        ..Options::default()
    }
}

fn url(cluster: &KafkaCluster, topic: &str) -> String {
    format!("kafka://{}/{topic}", cluster.bootstrap())
}

/// Writes the next `n` readings of `device` (the ledger's timestamps and values) in batches of
/// 250 and notes them acknowledged.
fn write(engine: &Engine, ledger: &Mutex<Ledger>, device: &str, n: i64) {
    let range = ledger.lock().next(device, n);
    let ts: Vec<i64> = range.clone().collect();
    for chunk in ts.chunks(250) {
        let values: Vec<String> = chunk.iter().map(|t| value_of(device, *t)).collect();
        let records: Vec<Record<'_>> = chunk
            .iter()
            .zip(&values)
            .map(|(t, v)| Record {
                device,
                sensor: "temp",
                ts_ns: *t,
                value: v.as_bytes(),
            })
            .collect();
        engine.put_batch(&records).expect("put");
        ledger
            .lock()
            .acknowledged(device, chunk[0]..chunk[chunk.len() - 1] + 1);
    }
}

/// Writers on a thread until `stop`: four devices, 100 readings each per round, 20 ms apart.
fn writers(
    engine: Arc<Engine>,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for d in 0..4 {
                write(&engine, &ledger, &format!("car-{d}"), 100);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

async fn start(engine: &Arc<Engine>, url: &str, stop: &watch::Receiver<bool>) -> Sink {
    let config = SinkConfig {
        batch_rows: 1_000,
        ..SinkConfig::new(url, "edge-a")
    };
    Sink::start(Arc::clone(engine), config, stop.clone())
        .await
        .expect("sink starts")
}

/// Waits until the sink holds everything the log holds now; returns how long that took.
async fn caught_up(engine: &Engine, sink: &Sink) -> Duration {
    let begun = Instant::now();
    let end = engine.feed().end();
    sink.wait_past(&end, CATCH_UP_MAX)
        .await
        .expect("the sink catches up");
    begun.elapsed()
}

/// One reading as the consumer found it: (device, ts, value), and the partition it was on.
type Found = Vec<((String, i64, String), i32)>;

/// Reads `topic` whole (read_committed) until `want` readings are found and every partition
/// is at its end, or 30 s pass.
fn consume(cluster: &KafkaCluster, topic: &str, want: usize) -> Found {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("group.id", "roamkv-sink-test")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS as i32 {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    let mut found = Found::new();
    let mut at_end = vec![false; PARTITIONS as usize];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !(found.len() >= want && at_end.iter().all(|e| *e)) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => at_end[p as usize] = true,
            Some(Err(e)) => panic!("consuming {topic}: {e}"),
            Some(Ok(message)) => {
                at_end[message.partition() as usize] = false;
                let value: serde_json::Value =
                    serde_json::from_slice(message.payload().expect("a value")).expect("JSON");
                if value["kind"] != "reading" {
                    continue;
                }
                let device = value["device"].as_str().expect("device").to_string();
                assert_eq!(message.key(), Some(device.as_bytes()), "keyed by device");
                let reading = (
                    device,
                    value["ts_ns"].as_i64().expect("ts_ns"),
                    value["value_utf8"].as_str().unwrap_or_default().to_string(),
                );
                found.push((reading, message.partition()));
            }
        }
    }
    found
}

/// The ledger against the consumer: every acknowledged reading once, nothing else, and each
/// device's readings on one partition in timestamp order.
fn check(cluster: &KafkaCluster, topic: &str, ledger: &Mutex<Ledger>) {
    let ledger = ledger.lock();
    let found = consume(cluster, topic, ledger.acknowledged_count());
    let mut last: BTreeMap<String, (i64, i32)> = BTreeMap::new();
    for ((device, ts, _), partition) in &found {
        if let Some((before, on)) = last.insert(device.clone(), (*ts, *partition)) {
            assert_eq!(on, *partition, "{device} on two partitions");
            assert!(before < *ts, "{device}: {ts} after {before}");
        }
    }
    ledger
        .check(found.into_iter().map(|(r, _)| r), None)
        .expect("every acknowledged reading once");
    eprintln!(
        "{topic}: {} readings, each once, in order per device",
        ledger.acknowledged_count()
    );
}

fn make_topic(cluster: &KafkaCluster, topic: &str) {
    cluster
        .create_topic(topic, PARTITIONS, &["min.insync.replicas=2"])
        .expect("create the topic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reading_once_in_order_through_leader_kill_edge_kill_and_link_cut() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec).await;
    }
    if let Some(why) = kafka::missing() {
        prerequisite::unmet("kafka_sink", &why);
        return;
    }
    let begun = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    // Beside the cluster's start (which blocks this thread), on the other worker.
    let unreachable = tokio::spawn(unreachable_brokers_are_retried(dir.path().join("away")));
    let mut cluster = KafkaCluster::start(3).expect("a 3-node cluster");
    eprintln!("kafka cluster: 3 nodes up in {:?}", cluster.startup);
    unreachable.await.expect("the unreachable brokers' check");

    a_missing_topic_is_refused_at_start(&cluster, dir.path()).await;
    let step = Instant::now();
    scan_then_tail(&cluster, dir.path()).await;
    eprintln!("scan then tail: {:?}", step.elapsed());
    let step = Instant::now();
    leader_killed_mid_stream(&mut cluster, dir.path()).await;
    eprintln!("leader killed: {:?}", step.elapsed());
    let step = Instant::now();
    edge_killed_mid_transaction_and_restarted(&cluster, dir.path()).await;
    eprintln!("edge killed and restarted: {:?}", step.elapsed());
    let step = Instant::now();
    link_cut(&cluster, dir.path()).await;
    eprintln!("link cut: {:?}", step.elapsed());
    eprintln!("kafka sink test: {:?} in all", begun.elapsed());
}

/// Brokers that cannot be reached at start are normal at the edge: the sink starts
/// disconnected, says why, and keeps trying.
async fn unreachable_brokers_are_retried(data: std::path::PathBuf) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let engine = Arc::new(Engine::open(&data, options()).expect("open"));
    let (stop_tx, stop) = watch::channel(false);
    let url = format!("kafka://127.0.0.1:{port}/readings");
    let began = Instant::now();
    let sink = start(&engine, &url, &stop).await;
    let status = sink.status();
    assert_eq!(status.state, "disconnected", "{status:?}");
    assert!(
        status.last_error.is_some_and(|e| e.contains("(retrying)")),
        "{:?}",
        sink.status()
    );
    eprintln!(
        "unreachable brokers: started disconnected in {:?}",
        began.elapsed()
    );
    stop_tx.send(true).expect("stop");
    sink.join().await;
}

async fn a_missing_topic_is_refused_at_start(cluster: &KafkaCluster, dir: &Path) {
    let engine = Arc::new(Engine::open(dir.join("missing"), options()).expect("open"));
    let (_stop_tx, stop) = watch::channel(false);
    let config = SinkConfig::new(&url(cluster, "no-such-topic"), "edge-a");
    let error = Sink::start(Arc::clone(&engine), config, stop)
        .await
        .err()
        .expect("refused");
    assert!(
        error.contains("the topic no-such-topic does not exist") && error.contains("--create"),
        "{error}"
    );
}

/// Readings present before the first start are exported by scanning, then the tail follows.
async fn scan_then_tail(cluster: &KafkaCluster, dir: &Path) {
    make_topic(cluster, "scan");
    let engine = Arc::new(Engine::open(dir.join("scan"), options()).expect("open"));
    let ledger = Mutex::new(Ledger::default());
    for d in 0..4 {
        write(&engine, &ledger, &format!("car-{d}"), 750);
    }
    let (stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &url(cluster, "scan"), &stop).await;
    caught_up(&engine, &sink).await;
    for d in 0..4 {
        write(&engine, &ledger, &format!("car-{d}"), 500);
    }
    caught_up(&engine, &sink).await;
    let status = sink.status();
    assert_eq!(
        (
            status.snapshot_rows_total,
            status.rows_total,
            status.generation
        ),
        (3_000, 2_000, 1),
        "{status:?}"
    );
    check(cluster, "scan", &ledger);
    stop_tx.send(true).expect("stop");
    sink.join().await;
}

/// SIGKILL to the leader of partition 0 while four writers write; the sink rides it out.
async fn leader_killed_mid_stream(cluster: &mut KafkaCluster, dir: &Path) {
    make_topic(cluster, "leader");
    let engine = Arc::new(Engine::open(dir.join("leader"), options()).expect("open"));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &url(cluster, "leader"), &stop).await;
    let done = Arc::new(AtomicBool::new(false));
    let writing = writers(Arc::clone(&engine), Arc::clone(&ledger), Arc::clone(&done));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = cluster
        .leader("leader", 0)
        .expect("describe")
        .expect("a leader");
    cluster.kill(leader);
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    done.store(true, Ordering::Relaxed);
    writing.join().expect("writers");
    let took = caught_up(&engine, &sink).await;
    eprintln!(
        "leader {leader} killed: caught up {:?} after the kill ({took:?} after the writers \
         stopped), {} retries",
        killed.elapsed(),
        sink.status().retries_total
    );
    check(cluster, "leader", &ledger);
    stop_tx.send(true).expect("stop");
    sink.join().await;
    cluster.restart(leader).expect("the killed node back");
}

/// The edge dies (SIGKILL at `sink.before_commit`, records of an open transaction sent) during
/// the first scan, then while tailing; then a sink is stopped and started mid-stream. Each start
/// resumes from Kafka's committed position.
async fn edge_killed_mid_transaction_and_restarted(cluster: &KafkaCluster, dir: &Path) {
    make_topic(cluster, "crash");
    let data = dir.join("crash");
    let url = url(cluster, "crash");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    {
        let engine = Engine::open(&data, options()).expect("open");
        for d in 0..4 {
            write(&engine, &ledger, &format!("car-{d}"), 1_500);
        }
        engine.close().expect("close");
    }
    // The first start: the generation's record (transaction 1), then the scan, 1000-reading
    // pages (batch_rows), one transaction each: the second page's (3) dies open.
    run_child(&data, &url, "sink.before_commit=3", 0);
    // The second start skips the page Kafka has, exports the 7 others (7 transactions), clears
    // the pending scan (8), then tails what this child writes: the second tail transaction (10)
    // dies open.
    run_child(&data, &url, "sink.before_commit=10", 2_000);
    let engine = Arc::new(Engine::open(&data, options()).expect("reopen"));
    // What the child wrote and the engine holds is acknowledged (the sink must export every
    // reading the engine holds); it wrote each device's next readings, in order.
    for d in 0..4 {
        let device = format!("car-{d}");
        let held = engine
            .scan(&device, None, i64::MIN, i64::MAX)
            .expect("scan");
        let n = held.len() as i64;
        assert!(
            held.iter().zip(1..).all(|(r, ts)| r.ts_ns == ts),
            "{device}: the engine holds 1..={n}"
        );
        assert!(
            n > 1_500,
            "the child wrote {device}'s readings before it died"
        );
        let mut ledger = ledger.lock();
        let range = ledger.next(&device, n - 1_500);
        ledger.acknowledged(&device, range);
    }
    // Connecting costs starting the producer (which aborts the dead child's open transaction)
    // and reading the position back.
    let (stop_tx, stop) = watch::channel(false);
    let connecting = Instant::now();
    let sink = start(&engine, &url, &stop).await;
    eprintln!(
        "after the edge's kill: connected in {:?}",
        connecting.elapsed()
    );
    let done = Arc::new(AtomicBool::new(false));
    let writing = writers(Arc::clone(&engine), Arc::clone(&ledger), Arc::clone(&done));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Stopped and started again while the writers write.
    stop_tx.send(true).expect("stop");
    sink.join().await;
    let (stop_tx, stop) = watch::channel(false);
    let connecting = Instant::now();
    let sink = start(&engine, &url, &stop).await;
    eprintln!("after a stop: connected in {:?}", connecting.elapsed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::Relaxed);
    writing.join().expect("writers");
    caught_up(&engine, &sink).await;
    let status = sink.status();
    assert_eq!(
        (status.generation, status.snapshot_rows_total),
        (1, 0),
        "resumed, not scanned again: {status:?}"
    );
    check(cluster, "crash", &ledger);
    stop_tx.send(true).expect("stop");
    sink.join().await;
}

/// Runs this test binary as the child role with `crash` armed: it starts a sink, writes
/// `extra` readings per device after the parent's 1500, and must die by SIGKILL.
fn run_child(data: &Path, url: &str, crash: &str, extra: i64) {
    let exe = std::env::current_exe().expect("the test binary");
    let status = std::process::Command::new(exe)
        .args([
            "--exact",
            "every_reading_once_in_order_through_leader_kill_edge_kill_and_link_cut",
            "--nocapture",
        ])
        .env(CHILD_ENV, format!("{}|{url}|{extra}", data.display()))
        .env(roamkv_engine::CRASH_POINTS_ENV, crash)
        .status()
        .expect("run the child");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child must die at {crash}: {status}"
    );
}

/// The child role: opens the engine, writes `extra` more readings per device, and runs a sink
/// until its crash point kills it (60 s at most, then it exits with 3).
async fn child(spec: &str) -> ! {
    let mut parts = spec.splitn(3, '|');
    let (data, url, extra) = (
        parts.next().expect("data"),
        parts.next().expect("url"),
        parts.next().expect("extra"),
    );
    let extra: i64 = extra.parse().expect("extra");
    let engine = Arc::new(Engine::open(data, options()).expect("child open"));
    let (_stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, url, &stop).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for d in 0..4 {
        let device = format!("car-{d}");
        // The parent's ledger wrote 1..=1500 of each device; these follow.
        let from = 1_501;
        let values: Vec<String> = (from..from + extra).map(|t| value_of(&device, t)).collect();
        for (i, chunk) in values.chunks(250).enumerate() {
            let records: Vec<Record<'_>> = chunk
                .iter()
                .enumerate()
                .map(|(j, v)| Record {
                    device: &device,
                    sensor: "temp",
                    ts_ns: from + (i * 250 + j) as i64,
                    value: v.as_bytes(),
                })
                .collect();
            engine.put_batch(&records).expect("child put");
        }
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    eprintln!("child: not killed; sink {:?}", sink.status());
    std::process::exit(3);
}

/// Every broker stopped (SIGSTOP) for `LINK_CUT` while the writers write: the sink waits,
/// retries, and catches up once they continue, within twice the cut (the target).
async fn link_cut(cluster: &KafkaCluster, dir: &Path) {
    make_topic(cluster, "cut");
    let engine = Arc::new(Engine::open(dir.join("cut"), options()).expect("open"));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &url(cluster, "cut"), &stop).await;
    let done = Arc::new(AtomicBool::new(false));
    let writing = writers(Arc::clone(&engine), Arc::clone(&ledger), Arc::clone(&done));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in cluster.ids() {
        cluster.pause(id, true);
    }
    tokio::time::sleep(LINK_CUT).await;
    let behind = sink.status();
    for id in cluster.ids() {
        cluster.pause(id, false);
    }
    let resumed = Instant::now();
    assert!(
        behind.lag_bytes > 0,
        "the cut held the sink back: {behind:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    done.store(true, Ordering::Relaxed);
    writing.join().expect("writers");
    caught_up(&engine, &sink).await;
    let recovered = resumed.elapsed();
    eprintln!(
        "link cut {LINK_CUT:?}: caught up {recovered:?} after it ended (lag then {} bytes, {} s; \
         {} retries)",
        behind.lag_bytes,
        behind.lag_seconds,
        sink.status().retries_total
    );
    assert!(
        recovered < 2 * LINK_CUT,
        "caught up {recovered:?} after a {LINK_CUT:?} cut"
    );
    check(cluster, "cut", &ledger);
    stop_tx.send(true).expect("stop");
    sink.join().await;
}
