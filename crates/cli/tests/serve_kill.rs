//! `roamkv serve` killed with SIGKILL during ingest, over and over, against the publishers'
//! ledger (issue 34): an HTTP client that notes every event answered 201, and an EdgeX device
//! service publishing QoS 1 to a real mosquitto that notes every message the broker
//! acknowledged. After the last restart, every acknowledged HTTP event is there, every message
//! the broker acknowledged is there (the server acks a message only once the engine has it, so
//! the broker redelivers the rest to the server's persistent session), and no reading appears
//! twice in the query answers. Rounds and seed: ROAMKV_KILL_ROUNDS (20), ROAMKV_KILL_SEED.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use roamkv_testbed::ledger::{Ledger, value_of};
use roamkv_testbed::mosquitto::Mosquitto;
use roamkv_testbed::prerequisite::{self, require_tool};
use roamkv_testbed::serve::{ServeProcess, http_call};
use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

const HTTP_DEVICE: &str = "http-car";
const MQTT_DEVICE: &str = "mqtt-car";
const ORIGIN_BASE_NS: u64 = 1_700_000_000_000_000_000;

/// `roamkv serve` with MQTT ingest from the broker on `broker_port`; returns once /ready says
/// it takes both.
fn start_server(data: &Path, broker_port: u16) -> ServeProcess {
    let server = ServeProcess::start(Path::new(env!("CARGO_BIN_EXE_roamkv")), data, |c| {
        c.args(["--durability", "sync", "--max-result-count", "1000000"])
            .args(["--mqtt-broker", &format!("127.0.0.1:{broker_port}")]);
    });
    server.wait_ready(Duration::from_secs(20));
    server
}

/// An EdgeX AddEventRequest of one reading at `ORIGIN_BASE_NS + n`.
fn event(device: &str, n: u64) -> String {
    let origin = ORIGIN_BASE_NS + n;
    let tag = if device == HTTP_DEVICE { 1 } else { 2 };
    format!(
        r#"{{"apiVersion":"v3","event":{{"id":"{tag:08x}-0000-4000-8000-{n:012x}","deviceName":"{device}","profileName":"car","sourceName":"speed","origin":{origin},"readings":[{{"deviceName":"{device}","resourceName":"speed","profileName":"car","origin":{origin},"valueType":"String","value":"{value}"}}]}}}}"#,
        value = value_of(device, n as i64)
    )
}

/// Posts events until `stop`, to whichever address the server has now, noting each answer in
/// the ledger (201 acknowledged, no answer unanswered, any other answer refused).
fn http_publisher(addr: Arc<Mutex<String>>, stop: Arc<AtomicBool>) -> Ledger {
    let mut ledger = Ledger::default();
    while !stop.load(Ordering::Relaxed) {
        let range = ledger.next(HTTP_DEVICE, 1);
        let n = range.start as u64;
        let to = addr.lock().expect("addr").clone();
        let path = format!("/api/v3/event/svc/car/{HTTP_DEVICE}/speed");
        let (status, _) = http_call(&to, "POST", &path, &event(HTTP_DEVICE, n));
        if ledger.note(HTTP_DEVICE, range, status) != 201 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    ledger
}

/// Publishes EdgeX envelopes at QoS 1, one at a time, until `stop`; the ledger holds the n of
/// every message the broker acknowledged (PUBACK).
fn mqtt_publisher(broker_port: u16, stop: Arc<AtomicBool>) -> Ledger {
    let mut options = MqttOptions::new("edgex-device-virtual", "127.0.0.1", broker_port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut connection) = Client::new(options, 16);
    let topic = format!("edgex/events/device/device-virtual/car/{MQTT_DEVICE}/speed");
    let mut ledger = Ledger::default();
    while !stop.load(Ordering::Relaxed) {
        let range = ledger.next(MQTT_DEVICE, 1);
        let n = range.start as u64;
        let envelope = format!(
            r#"{{"apiVersion":"v3","contentType":"application/json","payload":{}}}"#,
            event(MQTT_DEVICE, n)
        );
        client
            .publish(&topic, QoS::AtLeastOnce, false, envelope.into_bytes())
            .expect("publish");
        loop {
            match connection.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => break,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("MQTT publisher: {e}"),
                Err(e) => panic!("MQTT publisher: no PUBACK: {e:?}"),
            }
        }
        ledger.acknowledged(MQTT_DEVICE, range);
        // ~500 messages a second: the broker's queue for the server stays small while it is down.
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = client.disconnect();
    ledger
}

/// Every reading of `device` the server answers with, as the ledger keys it (duplicates kept).
fn stored(addr: &str, device: &str) -> Vec<(String, i64, String)> {
    let path = format!("/api/v3/reading/device/name/{device}?limit=1000000");
    let (status, body) = http_call(addr, "GET", &path, "");
    assert_eq!(status, 200, "query {path}: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    answer["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| {
            let origin = r["origin"].as_u64().expect("origin");
            let value = r["value"].as_str().expect("value").to_string();
            (device.to_string(), (origin - ORIGIN_BASE_NS) as i64, value)
        })
        .collect()
}

#[test]
fn sigkill_during_http_and_mqtt_ingest_loses_and_doubles_nothing() {
    let test = "sigkill_during_http_and_mqtt_ingest_loses_and_doubles_nothing";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    let rounds: usize =
        std::env::var("ROAMKV_KILL_ROUNDS").map_or(20, |v| v.parse().expect("rounds"));
    let seed: u64 =
        std::env::var("ROAMKV_KILL_SEED").map_or(20261126, |v| v.parse().expect("seed"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // Unbounded queues: every message for the server's persistent session waits while it is down.
    let broker = Mosquitto::start_with(|_| "allow_anonymous true\nmax_queued_messages 0\n".into());
    let broker_port = broker.port;

    // The first start makes the server's persistent session, so the broker queues for it from
    // the first message on.
    let mut server = start_server(&data, broker_port);
    let current = Arc::new(Mutex::new(server.addr.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let http = {
        let (current, stop) = (Arc::clone(&current), Arc::clone(&stop));
        std::thread::spawn(move || http_publisher(current, stop))
    };
    let mqtt = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || mqtt_publisher(broker_port, stop))
    };
    for round in 0..rounds {
        let load_ms = rng.random_range(100..600);
        std::thread::sleep(Duration::from_millis(load_ms));
        server.signal(libc::SIGKILL);
        server.wait_exit(10);
        drop(server);
        server = start_server(&data, broker_port);
        *current.lock().expect("addr") = server.addr.clone();
        eprintln!("round {round}: killed after {load_ms} ms, restarted");
    }
    stop.store(true, Ordering::Relaxed);
    let http_ledger = http.join().expect("HTTP publisher");
    let mqtt_ledger = mqtt.join().expect("MQTT publisher");
    assert!(
        http_ledger.acknowledged_count() > rounds && mqtt_ledger.acknowledged_count() > rounds,
        "too little load: {} HTTP, {} MQTT acknowledged",
        http_ledger.acknowledged_count(),
        mqtt_ledger.acknowledged_count()
    );

    let addr = current.lock().expect("addr").clone();
    let http_stored = stored(&addr, HTTP_DEVICE);
    // The broker redelivers what the killed servers took but never acked: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mqtt_stored = loop {
        let now = stored(&addr, MQTT_DEVICE);
        if mqtt_ledger.check(now.clone(), None).is_ok() || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    http_ledger
        .check(http_stored.clone(), None)
        .expect("HTTP ledger");
    mqtt_ledger
        .check(mqtt_stored.clone(), None)
        .expect("MQTT ledger");
    eprintln!(
        "{rounds} kills (seed {seed}): HTTP {} acknowledged, {} stored; MQTT {} acknowledged by \
         the broker, {} stored; none lost, none doubled",
        http_ledger.acknowledged_count(),
        http_stored.len(),
        mqtt_ledger.acknowledged_count(),
        mqtt_stored.len()
    );
}
