//! `roamkv serve --sink kafka://…` end to end, against a real three-node Kafka 4.4 cluster
//! (roamkv_testbed::kafka): readings posted to the native API land in the topic once, the
//! server killed with SIGKILL while its sink tails and started again resumes from what Kafka
//! committed, and a departure under `--on-depart cloud` waits for the sink and lands after the
//! device's last reading. Read back with Kafka's own console consumer (read_committed) and
//! held against the writer's ledger. The sink's fault tests (leader killed, link cut, a crash
//! inside an open transaction) are in crates/sink/tests/kafka.rs.

use std::path::Path;
use std::time::{Duration, Instant};

use roamkv_testbed::kafka::{self, KafkaCluster};
use roamkv_testbed::ledger::{Ledger, native_lines};
use roamkv_testbed::prerequisite;
use roamkv_testbed::serve::{ServeProcess, http_call};

const TOPIC: &str = "readings";

fn start(data: &Path, cluster: &KafkaCluster) -> ServeProcess {
    let binary = Path::new(env!("CARGO_BIN_EXE_roamkv"));
    let url = format!("kafka://{}/{TOPIC}", cluster.bootstrap());
    let server = ServeProcess::start(binary, data, |command| {
        command.args(["--sink", &url, "--on-depart", "cloud"]);
        command.env("RUST_LOG", "warn");
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

#[test]
fn serve_sends_every_reading_once_across_a_kill_and_a_departure_waits_for_kafka() {
    if let Some(why) = kafka::missing() {
        prerequisite::unmet("cloud_sink_kafka", &why);
        return;
    }
    let cluster = KafkaCluster::start(3).expect("a 3-node cluster");
    cluster
        .create_topic(TOPIC, 3, &["min.insync.replicas=2"])
        .expect("the topic");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("edge");
    let mut ledger = Ledger::default();
    let mut server = start(&data, &cluster);
    for round in 0..20 {
        for d in 0..3 {
            write(&mut ledger, &server, &format!("car-{d}"), 50 + round);
        }
    }
    // SIGKILL while the sink is still sending (the writes are all answered).
    server.kill9();
    let server = start(&data, &cluster);
    for d in 0..3 {
        write(&mut ledger, &server, &format!("car-{d}"), 100);
    }
    let (status, body) = http_call(&server.addr, "DELETE", "/api/roamkv/v1/devices/car-1", "");
    assert_eq!(status, 202, "the departure waits for the sink: {body}");
    wait_caught_up(&server);
    let readings = ledger.acknowledged_count();
    let records = cluster
        .consume(TOPIC, readings + 1)
        .expect("read the topic");
    let mut found = Vec::new();
    let mut departed_after = None;
    for line in &records {
        let (key, value) = line.split_once(':').expect("KEY:VALUE");
        let record: serde_json::Value = serde_json::from_str(value).expect("JSON");
        assert_eq!(record["device"], key, "keyed by device");
        if record["kind"] == "departure" {
            departed_after = Some(found.len());
            continue;
        }
        found.push((
            key.to_string(),
            record["ts_ns"].as_i64().expect("ts_ns"),
            record["value_utf8"].as_str().expect("text").to_string(),
        ));
    }
    ledger
        .check(found.clone(), None)
        .expect("every reading once");
    let departed_after = departed_after.expect("car-1's departure is in the topic");
    assert!(
        !found[departed_after..].iter().any(|(d, _, _)| d == "car-1"),
        "car-1's departure comes after its readings"
    );
    eprintln!("{readings} readings once, and car-1's departure after its last");
    drop(server);
}
