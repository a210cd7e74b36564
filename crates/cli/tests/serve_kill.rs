//! `roamkv serve` killed with SIGKILL during ingest, over and over, against the publishers'
//! ledger (issue 34): an HTTP client that notes every event answered 201, and an EdgeX device
//! service publishing QoS 1 to a real mosquitto that notes every message the broker
//! acknowledged. After the last restart, every acknowledged HTTP event is there, every message
//! the broker acknowledged is there (the server acks a message only once the engine has it, so
//! the broker redelivers the rest to the server's persistent session), and no reading appears
//! twice in the query answers. Rounds and seed: ROAMKV_KILL_ROUNDS (20), ROAMKV_KILL_SEED.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use roamkv_testbed::prerequisite::{self, require_tool};
use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

const HTTP_DEVICE: &str = "http-car";
const MQTT_DEVICE: &str = "mqtt-car";
const ORIGIN_BASE_NS: u64 = 1_700_000_000_000_000_000;

/// On a failing test, prints the ends of the broker's and the servers' logs: what a "not
/// ready" or a reset connection had behind it.
struct LogsOnFailure(std::path::PathBuf);

impl Drop for LogsOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for name in ["mosquitto.log", "server.log"] {
            let text = std::fs::read_to_string(self.0.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!("--- last lines of {name} ---");
            for line in &lines[lines.len().saturating_sub(60)..] {
                eprintln!("{line}");
            }
        }
    }
}

/// Kills the child if the test ends first.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A mosquitto that keeps every queued message for a disconnected persistent session.
fn start_mosquitto(dir: &Path) -> (Killed, u16) {
    let port = free_port();
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "user root\npersistence false\nmax_queued_messages 0\nlistener {port} 127.0.0.1\nallow_anonymous true\n\
             log_dest file {}\nlog_type all\nlog_timestamp_format %H:%M:%S\n",
            dir.join("mosquitto.log").display()
        ),
    )
    .expect("write conf");
    let binary = require_tool("mosquitto", "mosquitto").expect("mosquitto");
    let child = Command::new(binary)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mosquitto");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "mosquitto did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Killed(child), port)
}

/// `roamkv serve` on a free port with MQTT ingest; returns once /ready says it takes both.
/// The server's stderr goes on to `server.log` beside `data`.
fn start_server(data: &Path, broker_port: u16) -> (Killed, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        // Readings from 2023 (ORIGIN_BASE_NS): the default retention would delete them.
        .env("ROAMKV_RETENTION_DEFAULT_H", "0")
        .args(["serve", "--listen", "127.0.0.1:0", "--durability", "sync"])
        .args(["--max-result-count", "1000000", "--data"])
        .arg(data)
        .args(["--mqtt-broker", &format!("127.0.0.1:{broker_port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roamkv serve");
    let stderr = child.stderr.take().expect("stderr");
    let server = Killed(child);
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("the server's address").expect("line");
        if let Some(url) = line.split("listening on http://").nth(1) {
            break url.trim().to_string();
        }
    };
    let log_path = data.with_file_name("server.log");
    std::thread::spawn(move || {
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path)
            .expect("server.log");
        for line in lines.map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !request(&addr, "GET", "/ready", "").is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(Instant::now() < deadline, "not ready within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, addr)
}

fn request(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// An EdgeX AddEventRequest of one reading at `ORIGIN_BASE_NS + n`.
fn event(device: &str, n: u64) -> String {
    let origin = ORIGIN_BASE_NS + n;
    let tag = if device == HTTP_DEVICE { 1 } else { 2 };
    format!(
        r#"{{"apiVersion":"v3","event":{{"id":"{tag:08x}-0000-4000-8000-{n:012x}","deviceName":"{device}","profileName":"car","sourceName":"speed","origin":{origin},"readings":[{{"deviceName":"{device}","resourceName":"speed","profileName":"car","origin":{origin},"valueType":"Int64","value":"{n}"}}]}}}}"#
    )
}

/// Posts events until `stop`, to whichever address the server has now; the ledger holds the n
/// of every event answered 201.
fn http_publisher(addr: Arc<Mutex<String>>, stop: Arc<AtomicBool>) -> Vec<u64> {
    let mut acknowledged = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let to = addr.lock().expect("addr").clone();
        let path = format!("/api/v3/event/svc/car/{HTTP_DEVICE}/speed");
        match request(&to, "POST", &path, &event(HTTP_DEVICE, n)) {
            Ok(r) if r.starts_with("HTTP/1.1 201") => acknowledged.push(n),
            // Refused, cut by the kill, or an answer other than 201: not acknowledged.
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    acknowledged
}

/// Publishes EdgeX envelopes at QoS 1, one at a time, until `stop`; the ledger holds the n of
/// every message the broker acknowledged (PUBACK).
fn mqtt_publisher(broker_port: u16, stop: Arc<AtomicBool>) -> Vec<u64> {
    let mut options = MqttOptions::new("edgex-device-virtual", "127.0.0.1", broker_port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut connection) = Client::new(options, 16);
    let topic = format!("edgex/events/device/device-virtual/car/{MQTT_DEVICE}/speed");
    let mut acknowledged = Vec::new();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
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
        acknowledged.push(n);
        // ~500 messages a second: the broker's queue for the server stays small while it is down.
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = client.disconnect();
    acknowledged
}

/// The n of every reading of `device` the server answers with, duplicates kept.
fn stored(addr: &str, device: &str) -> Vec<u64> {
    let response = request(
        addr,
        "GET",
        &format!("/api/v3/reading/device/name/{device}?limit=1000000"),
        "",
    )
    .expect("query");
    let body = response.split_once("\r\n\r\n").expect("a body").1;
    let answer: serde_json::Value = serde_json::from_str(body).expect("JSON");
    answer["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| r["value"].as_str().expect("value").parse().expect("n"))
        .collect()
}

/// Every acknowledged n is stored, and nothing is stored twice.
fn check(device: &str, acknowledged: &[u64], stored: &[u64]) -> Result<(), String> {
    let unique: BTreeSet<u64> = stored.iter().copied().collect();
    if unique.len() != stored.len() {
        return Err(format!(
            "{device}: {} readings answered, {} distinct: some appear twice",
            stored.len(),
            unique.len()
        ));
    }
    let lost: Vec<u64> = acknowledged
        .iter()
        .filter(|n| !unique.contains(n))
        .copied()
        .collect();
    if lost.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{device}: {} of {} acknowledged events lost, first {:?}",
            lost.len(),
            acknowledged.len(),
            &lost[..lost.len().min(10)]
        ))
    }
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
    let _logs = LogsOnFailure(dir.path().to_path_buf());
    let (_broker, broker_port) = start_mosquitto(dir.path());

    // The first start makes the server's persistent session, so the broker queues for it from
    // the first message on.
    let (mut server, addr) = start_server(&data, broker_port);
    let current = Arc::new(Mutex::new(addr));
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
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let rc = unsafe { libc::kill(server.0.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "round {round}: kill");
        let _ = server.0.wait();
        let (next, addr) = start_server(&data, broker_port);
        server = next;
        *current.lock().expect("addr") = addr;
    }
    stop.store(true, Ordering::Relaxed);
    let http_acknowledged = http.join().expect("HTTP publisher");
    let mqtt_acknowledged = mqtt.join().expect("MQTT publisher");
    assert!(
        http_acknowledged.len() > rounds && mqtt_acknowledged.len() > rounds,
        "too little load: {} HTTP, {} MQTT acknowledged",
        http_acknowledged.len(),
        mqtt_acknowledged.len()
    );

    let addr = current.lock().expect("addr").clone();
    let http_stored = stored(&addr, HTTP_DEVICE);
    // The broker redelivers what the killed servers took but never acked: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mqtt_stored = loop {
        let now = stored(&addr, MQTT_DEVICE);
        if check(MQTT_DEVICE, &mqtt_acknowledged, &now).is_ok() || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    check(HTTP_DEVICE, &http_acknowledged, &http_stored).expect("HTTP ledger");
    check(MQTT_DEVICE, &mqtt_acknowledged, &mqtt_stored).expect("MQTT ledger");
    eprintln!(
        "{rounds} kills (seed {seed}): HTTP {} acknowledged, {} stored; MQTT {} acknowledged by \
         the broker, {} stored; none lost, none doubled",
        http_acknowledged.len(),
        http_stored.len(),
        mqtt_acknowledged.len(),
        mqtt_stored.len()
    );
}
