//! `roamkv serve --sink kafka://…` end to end, against a real three-node Kafka 4.4 cluster
//! (roamkv_testbed::kafka, one cluster for the file): readings posted to the native API land in
//! the topic once, the server killed with SIGKILL while its sink tails and started again resumes
//! from what Kafka committed, and a departure under `--on-depart cloud` waits for the sink and
//! lands after the device's last reading; then the server killed by SIGKILL at each of the
//! sink's crash points (`sink.before_commit`: inside an open Kafka transaction, its records
//! sent; `sink.after_commit`: Kafka committed, the engine's slot not moved; `sink.after_hold`),
//! as the PostgreSQL sink is in cloud_sink.rs. Read back with Kafka's own console consumer
//! (read_committed) and held against the writers' ledger: every acknowledged reading once,
//! nothing never written, each device's readings in order. The sink's fault tests (leader
//! killed, link cut, a crash inside an open transaction during a scan) are in
//! crates/sink/tests/kafka.rs.

use std::path::Path;
use std::time::{Duration, Instant};

use roamkv_testbed::kafka::{self, KafkaCluster};
use roamkv_testbed::ledger::{Ledger, native_lines};
use roamkv_testbed::prerequisite;
use roamkv_testbed::serve::{ServeProcess, http_call};

const TOPIC: &str = "readings";

/// `roamkv serve` with its sink on `topic`, `crash` armed (`ROAMKV_CRASH_POINTS`), ready.
fn start(data: &Path, cluster: &KafkaCluster, topic: &str, crash: Option<&str>) -> ServeProcess {
    let binary = Path::new(env!("CARGO_BIN_EXE_roamkv"));
    let url = format!("kafka://{}/{topic}", cluster.bootstrap());
    let server = ServeProcess::start(binary, data, |command| {
        command.args(["--sink", &url, "--on-depart", "cloud"]);
        command.env("RUST_LOG", "warn");
        if let Some(point) = crash {
            command.env(roamkv_engine::CRASH_POINTS_ENV, point);
        }
    });
    server.wait_ready(Duration::from_secs(30));
    server
}

fn sink_view(server: &ServeProcess) -> serde_json::Value {
    let (status, body) = http_call(&server.addr, "GET", "/api/roamkv/v1/sink", "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

/// Waits until the sink tails with nothing behind and no departure waits.
fn wait_caught_up(server: &ServeProcess) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let view = sink_view(server);
        if view["sink"]["state"] == "tailing"
            && view["lag_bytes"] == 0
            && view["departures_waiting"]
                .as_array()
                .is_some_and(Vec::is_empty)
        {
            return;
        }
        assert!(Instant::now() < deadline, "not caught up: {view}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Posts `n` readings of `device`; every one must be acknowledged (no fault is under way).
fn write(ledger: &mut Ledger, server: &ServeProcess, device: &str, n: i64) {
    let range = ledger.next(device, n);
    let body = native_lines(device, "temp", range.clone());
    let (status, answer) = http_call(&server.addr, "POST", "/api/roamkv/v1/readings", &body);
    assert_eq!(status, 201, "POST readings: {answer}");
    ledger.acknowledged(device, range);
}

/// Posts `n` readings of `device` while the server may die under the request: the answer
/// noted in the ledger; true if acknowledged.
fn write_noting(ledger: &mut Ledger, server: &ServeProcess, device: &str, n: i64) -> bool {
    let range = ledger.next(device, n);
    let body = native_lines(device, "temp", range.clone());
    let (status, answer) = http_call(&server.addr, "POST", "/api/roamkv/v1/readings", &body);
    assert!(
        matches!(status, 201 | 0),
        "POST readings: {status} {answer}"
    );
    ledger.note(device, range, status) == 201
}

/// The readings of `device` the engine holds (one page: the tests write fewer than 10,000).
fn held(server: &ServeProcess, device: &str) -> i64 {
    let path = format!("/api/roamkv/v1/devices/{device}/readings?limit=10000");
    let (status, body) = http_call(&server.addr, "GET", &path, "");
    assert_eq!(status, 200, "{body}");
    let page: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert!(page["next"].is_null(), "one page: {page}");
    page["readings"].as_array().expect("readings").len() as i64
}

/// A reading as the topic holds it: (device, ts_ns, value).
type Found = (String, i64, String);

/// Every record of `topic` (read_committed, read until none comes for 10 s: a record found
/// twice is read too) as (device, ts, value) readings in the order the topic holds them, and
/// the index in that list after which each departure record came.
fn read_topic(cluster: &KafkaCluster, topic: &str) -> (Vec<Found>, Vec<(String, usize)>) {
    let records = cluster
        .consume_all(topic, Duration::from_secs(10))
        .expect("read the topic");
    let mut found = Vec::new();
    let mut departures = Vec::new();
    for line in &records {
        let (key, value) = line.split_once(':').expect("KEY:VALUE");
        let record: serde_json::Value = serde_json::from_str(value).expect("JSON");
        assert_eq!(record["device"], key, "keyed by device");
        if record["kind"] == "departure" {
            departures.push((key.to_string(), found.len()));
            continue;
        }
        found.push((
            key.to_string(),
            record["ts_ns"].as_i64().expect("ts_ns"),
            record["value_utf8"].as_str().expect("text").to_string(),
        ));
    }
    (found, departures)
}

/// The topic against the ledger: every acknowledged reading once with its value, nothing never
/// written, and each device's readings in timestamp order (one device is on one partition; the
/// console consumer prints a partition in order).
fn check(ledger: &Ledger, found: &[Found]) {
    ledger
        .check(found.iter().cloned(), None)
        .expect("every reading once");
    let mut last: std::collections::BTreeMap<&str, i64> = Default::default();
    for (device, ts, _) in found {
        if let Some(before) = last.insert(device, *ts) {
            assert!(before < *ts, "{device}: {ts} after {before}");
        }
    }
}

#[test]
fn serve_sends_every_reading_once_across_kills_crash_points_and_a_departure() {
    if let Some(why) = kafka::missing() {
        prerequisite::unmet("cloud_sink_kafka", &why);
        return;
    }
    let cluster = KafkaCluster::start(3).expect("a 3-node cluster");
    eprintln!("kafka cluster: 3 nodes up in {:?}", cluster.startup);
    let dir = tempfile::tempdir().expect("tempdir");
    let step = Instant::now();
    killed_then_a_departure_waits(&cluster, &dir.path().join("edge"));
    eprintln!("killed, then a departure: {:?}", step.elapsed());
    let step = Instant::now();
    killed_at_each_crash_point(&cluster, &dir.path().join("crash"));
    eprintln!("crash points: {:?}", step.elapsed());
}

/// SIGKILL while the sink is still sending, a restart, then a departure that waits for Kafka.
fn killed_then_a_departure_waits(cluster: &KafkaCluster, data: &Path) {
    cluster
        .create_topic(TOPIC, 3, &["min.insync.replicas=2"])
        .expect("the topic");
    let mut ledger = Ledger::default();
    let mut server = start(data, cluster, TOPIC, None);
    for round in 0..20 {
        for d in 0..3 {
            write(&mut ledger, &server, &format!("car-{d}"), 50 + round);
        }
    }
    // SIGKILL while the sink is still sending (the writes are all answered).
    server.kill9();
    let server = start(data, cluster, TOPIC, None);
    for d in 0..3 {
        write(&mut ledger, &server, &format!("car-{d}"), 100);
    }
    let (status, body) = http_call(&server.addr, "DELETE", "/api/roamkv/v1/devices/car-1", "");
    assert_eq!(status, 202, "the departure waits for the sink: {body}");
    wait_caught_up(&server);
    let (found, departures) = read_topic(cluster, TOPIC);
    check(&ledger, &found);
    let departed_after = departures
        .iter()
        .find(|(d, _)| d == "car-1")
        .map(|(_, at)| *at)
        .expect("car-1's departure is in the topic");
    assert!(
        !found[departed_after..].iter().any(|(d, _, _)| d == "car-1"),
        "car-1's departure comes after its readings"
    );
    eprintln!(
        "{} readings once, and car-1's departure after its last",
        found.len()
    );
}

/// The server killed (SIGKILL, by the crash point itself) at each of the sink's crash points,
/// each armed at its third reach while writers post, and started again: each restart resumes
/// from what Kafka committed (a transaction left open is aborted by the new producer's fence).
fn killed_at_each_crash_point(cluster: &KafkaCluster, data: &Path) {
    const CRASH_TOPIC: &str = "crash";
    cluster
        .create_topic(CRASH_TOPIC, 3, &["min.insync.replicas=2"])
        .expect("the topic");
    let mut ledger = Ledger::default();
    let server = start(data, cluster, CRASH_TOPIC, None);
    write(&mut ledger, &server, "car-0", 100);
    wait_caught_up(&server);
    drop(server);
    for (round, point) in ["sink.before_commit", "sink.after_commit", "sink.after_hold"]
        .iter()
        .enumerate()
    {
        let device = format!("car-{}", round + 1);
        let mut server = start(data, cluster, CRASH_TOPIC, Some(&format!("{point}=3")));
        for _ in 0..200 {
            if !write_noting(&mut ledger, &server, &device, 50) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.has_exited() {
            assert!(Instant::now() < deadline, "{point} was not reached");
            std::thread::sleep(Duration::from_millis(20));
        }
        let server = start(data, cluster, CRASH_TOPIC, None);
        // What the engine holds must reach Kafka, answered or not (a write in flight at the
        // kill may have been stored): the device's readings 1..=n.
        let n = held(&server, &device);
        ledger.acknowledged(&device, 1..n + 1);
        write(&mut ledger, &server, &device, 50);
        wait_caught_up(&server);
        eprintln!("{point}: killed there, {n} readings of {device} held, restarted");
    }
    let (found, _) = read_topic(cluster, CRASH_TOPIC);
    check(&ledger, &found);
    eprintln!(
        "crash points: {} readings once, in order per device",
        found.len()
    );
}
