//! QoS 1 across kill -9 of `roamkv serve`, seen from the broker (issue 55: the bus, in).
//!
//! At QoS 1 the broker's PUBACK tells a device service that the *broker* has its message, not
//! the server; what the server itself promises is narrower: a message it acknowledged (PUBACK
//! to the broker) is stored, and a message the broker delivers again (it was not acknowledged
//! before the kill, whether or not it was written) is not stored twice. This test reads both
//! halves from mosquitto's own log (`log_type all`): every PUBLISH the broker sent to the
//! server's persistent session, with its DUP flag and packet id, and every PUBACK the server
//! sent back. The message's number rides in the topic's service level
//! (`edgex/events/device/svc-{n}/car/bus-car/speed`), which the server does not check against
//! the event, so a log line names the message without the payload.
//!
//! After ROAMKV_KILL_ROUNDS (20) SIGKILLs at random points (ROAMKV_KILL_SEED) and restarts (a
//! kill left 0.4 to 3 messages written but not acknowledged here, so 20 kills all but never
//! leave none, which would fail the test below):
//! - every message the server acknowledged is answered once with its value (the ledger of its
//!   acks), and nothing is answered that was never published;
//! - every message the broker acknowledged to the publisher is answered once too: end to end,
//!   which holds because this broker keeps the session's queue (unbounded, never restarted);
//! - messages were delivered again after kills (DUP set), among them messages the data
//!   directory already held at the kill (read with `roamkv scan` while the server is down):
//!   written, not acknowledged, written again; so "not doubled" was put to the test. Each
//!   redelivered message is answered once by id (GET /api/v3/event/id) and the device's event
//!   count equals the messages stored.
//!
//! What it does not prove: anything about a broker that loses its queue (a mosquitto restarted
//! without persistence, or one that drops past `max_queued_messages`), or about QoS 0.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use roamkv_testbed::ledger::{Ledger, value_of};
use roamkv_testbed::mosquitto::Mosquitto;
use roamkv_testbed::prerequisite::{self, require_tool};
use roamkv_testbed::serve::{ServeProcess, http_call};
use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

const DEVICE: &str = "bus-car";
const SERVER_CLIENT_ID: &str = "roamkv-core-data";
const ORIGIN_BASE_NS: i64 = 1_700_000_000_000_000_000;

fn start_server(data: &Path, broker_port: u16) -> ServeProcess {
    let server = ServeProcess::start(Path::new(env!("CARGO_BIN_EXE_roamkv")), data, |c| {
        c.args(["--durability", "sync", "--max-result-count", "1000000"])
            .args(["--mqtt-broker", &format!("127.0.0.1:{broker_port}")]);
    });
    server.wait_ready(Duration::from_secs(20));
    server
}

fn event_id(n: i64) -> String {
    format!("0000bb55-0000-4000-8000-{n:012x}")
}

/// Message `n` as device-sdk-go v4 publishes it: a v4 MessageEnvelope (the AddEventRequest as
/// its object payload), on a topic whose service level is `svc-{n}`.
fn message(n: i64) -> (String, Vec<u8>) {
    let origin = ORIGIN_BASE_NS + n;
    let request = format!(
        r#"{{"apiVersion":"v3","event":{{"apiVersion":"v3","id":"{id}","deviceName":"{DEVICE}","profileName":"car","sourceName":"speed","origin":{origin},"readings":[{{"id":"{id}","deviceName":"{DEVICE}","resourceName":"speed","profileName":"car","origin":{origin},"valueType":"String","value":"{value}"}}]}}}}"#,
        id = event_id(n),
        value = value_of(DEVICE, n)
    );
    let envelope = format!(
        r#"{{"apiVersion":"v3","receivedTopic":"","correlationID":"{}","requestID":"","errorCode":0,"payload":{request},"contentType":"application/json"}}"#,
        event_id(n)
    );
    (
        format!("edgex/events/device/svc-{n}/car/{DEVICE}/speed"),
        envelope.into_bytes(),
    )
}

/// Publishes at QoS 1, each message once the last one's PUBACK came, until `stop`; the
/// ledger holds every message the broker acknowledged. Returns it and the count published.
fn publisher(broker_port: u16, stop: Arc<AtomicBool>) -> (Ledger, i64) {
    let mut options = MqttOptions::new("device-bus-kill", "127.0.0.1", broker_port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut connection) = Client::new(options, 16);
    let mut ledger = Ledger::default();
    let mut published = 0;
    while !stop.load(Ordering::Relaxed) {
        let n = ledger.next(DEVICE, 1);
        let (topic, payload) = message(n.start);
        client
            .publish(topic, QoS::AtLeastOnce, false, payload)
            .expect("publish");
        published = n.end - 1;
        loop {
            match connection.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => break,
                Ok(Ok(_)) => {}
                Ok(Err(e)) => panic!("publisher: {e}"),
                Err(e) => panic!("publisher: no PUBACK from the broker: {e:?}"),
            }
        }
        ledger.acknowledged(DEVICE, n);
        std::thread::sleep(Duration::from_micros(500));
    }
    let _ = client.disconnect();
    (ledger, published)
}

/// What the broker's log says of the server's session: the messages sent to the server again
/// (DUP), and those the server acknowledged.
#[derive(Default)]
struct Deliveries {
    redelivered: BTreeSet<i64>,
    /// (where in the log, message) of every send with DUP set.
    redeliveries: Vec<(usize, i64)>,
    acked: BTreeSet<i64>,
}

/// Reads mosquitto's `log_type all` lines for the server's client id: "Sending PUBLISH to ID
/// (d1, q1, r0, m12, 'edgex/events/device/svc-7/...', ... (372 bytes))." and "Received PUBACK
/// from ID (Mid: 12, RC:0)". An ack names the packet id, which is the latest send's with it.
fn deliveries(log: &str) -> Deliveries {
    let sending = format!("Sending PUBLISH to {SERVER_CLIENT_ID} (");
    let puback = format!("Received PUBACK from {SERVER_CLIENT_ID} (Mid: ");
    let mut out = Deliveries::default();
    let mut in_flight: BTreeMap<u16, i64> = BTreeMap::new();
    let mut offset = 0;
    for line in log.split_inclusive('\n') {
        let at = offset;
        offset += line.len();
        if let Some((_, rest)) = line.split_once(&sending) {
            let fields: Vec<&str> = rest.splitn(5, ", ").collect();
            let mid = fields
                .get(3)
                .and_then(|m| m.strip_prefix('m')?.parse().ok());
            let n = fields
                .get(4)
                .and_then(|t| t.split("svc-").nth(1)?.split('/').next()?.parse().ok());
            if let (Some(mid), Some(n)) = (mid, n) {
                in_flight.insert(mid, n);
                if fields[0] == "d1" {
                    out.redelivered.insert(n);
                    out.redeliveries.push((at, n));
                }
            }
        } else if let Some((_, rest)) = line.split_once(&puback) {
            let mid: Option<u16> = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|m| m.parse().ok());
            if let Some(n) = mid.and_then(|mid| in_flight.remove(&mid)) {
                out.acked.insert(n);
            }
        }
    }
    out
}

/// A kill: where the broker's log stood (the redeliveries it causes come after), and the
/// messages the data directory held at that moment.
struct Kill {
    log_offset: usize,
    stored: BTreeSet<i64>,
}

/// The device's messages in the data directory of a server that is down (`roamkv scan`).
fn stored_on_disk(data: &Path) -> BTreeSet<i64> {
    let out = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args(["scan", "--data"])
        .arg(data)
        .args(["--device", DEVICE])
        .output()
        .expect("roamkv scan");
    assert!(
        out.status.success(),
        "roamkv scan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["ts_ns"].as_i64())
        .map(|ts| ts - ORIGIN_BASE_NS)
        .collect()
}

/// SIGKILLs the server `rounds` times at random points, noting each kill, and starts it again.
fn kill_rounds(
    mut server: ServeProcess,
    broker: &Mosquitto,
    rounds: usize,
    rng: &mut rand::rngs::StdRng,
) -> (ServeProcess, Vec<Kill>) {
    let data = server.data().to_path_buf();
    let mut kills = Vec::new();
    for round in 0..rounds {
        let load_ms = rng.random_range(150..500);
        std::thread::sleep(Duration::from_millis(load_ms));
        server.signal(libc::SIGKILL);
        server.wait_exit(10);
        drop(server);
        let log_offset = std::fs::metadata(broker.log_path()).map_or(0, |m| m.len() as usize);
        kills.push(Kill {
            log_offset,
            stored: stored_on_disk(&data),
        });
        server = start_server(&data, broker.port);
        eprintln!("round {round}: killed after {load_ms} ms, restarted");
    }
    (server, kills)
}

/// Messages stored at a kill and delivered again after it: written, not acknowledged, and
/// so written a second time (the case "not doubled" is about).
fn rewritten(kills: &[Kill], seen: &Deliveries) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for &(at, n) in &seen.redeliveries {
        let kill = kills.iter().rev().find(|k| k.log_offset <= at);
        if kill.is_some_and(|k| k.stored.contains(&n)) {
            out.insert(n);
        }
    }
    out
}

/// Every reading of the device the server answers with, as the ledger keys them.
fn stored(addr: &str) -> Vec<(String, i64, String)> {
    let path = format!("/api/v3/reading/device/name/{DEVICE}?limit=1000000");
    let (status, body) = http_call(addr, "GET", &path, "");
    assert_eq!(status, 200, "{path}: {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    answer["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| {
            let n = r["origin"].as_i64().expect("origin") - ORIGIN_BASE_NS;
            (
                DEVICE.to_string(),
                n,
                r["value"].as_str().expect("value").into(),
            )
        })
        .collect()
}

#[test]
fn messages_the_server_acked_are_stored_and_redelivered_ones_are_not_doubled() {
    let test = "messages_the_server_acked_are_stored_and_redelivered_ones_are_not_doubled";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    let rounds: usize =
        std::env::var("ROAMKV_KILL_ROUNDS").map_or(20, |v| v.parse().expect("rounds"));
    let seed: u64 = std::env::var("ROAMKV_KILL_SEED").map_or(55, |v| v.parse().expect("seed"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // Log everything (the default of the testbed's broker); keep every queued message.
    let broker = Mosquitto::start_with(|_| "allow_anonymous true\nmax_queued_messages 0\n".into());
    let port = broker.port;
    // The first start makes the persistent session: from here on the broker queues for it.
    let server = start_server(&data, port);
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || publisher(port, stop))
    };
    let (server, kills) = kill_rounds(server, &broker, rounds, &mut rng);
    stop.store(true, Ordering::Relaxed);
    let (broker_acked, published) = publishing.join().expect("publisher");

    // The broker delivers what the killed servers took but never acked: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let now = stored(&server.addr);
        if broker_acked.check(now.clone(), None).is_ok() || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let seen = deliveries(&std::fs::read_to_string(broker.log_path()).expect("broker log"));
    let mut server_acked = Ledger::default();
    for n in 1..=published {
        if seen.acked.contains(&n) {
            server_acked.acknowledged(DEVICE, n..n + 1);
        } else {
            server_acked.unanswered(DEVICE, n..n + 1);
        }
    }
    server_acked
        .check(found.clone(), None)
        .expect("the messages the server acknowledged to the broker");
    broker_acked
        .check(found.clone(), None)
        .expect("the messages the broker acknowledged to the publisher");
    assert!(
        !seen.redelivered.is_empty(),
        "no message was delivered again after {rounds} kills: the test proved nothing of \
         doubles (seed {seed}; more rounds: ROAMKV_KILL_ROUNDS)"
    );
    for n in seen.redelivered.iter().take(50) {
        let (status, body) = http_call(
            &server.addr,
            "GET",
            &format!("/api/v3/event/id/{}", event_id(*n)),
            "",
        );
        assert_eq!(status, 200, "redelivered message {n}: {body}");
        let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            answer["event"]["readings"].as_array().map(Vec::len),
            Some(1),
            "{body}"
        );
    }
    let (status, body) = http_call(
        &server.addr,
        "GET",
        &format!("/api/v3/event/count/device/name/{DEVICE}"),
        "",
    );
    assert_eq!(status, 200, "{body}");
    let events: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(events["count"].as_u64(), Some(found.len() as u64), "{body}");
    // The messages the server wrote and then got again: each is answered once (checked above
    // with every other); how many there were says how hard "not doubled" was tested.
    let rewritten = rewritten(&kills, &seen);
    assert!(
        !rewritten.is_empty(),
        "no message was written, left unacknowledged by a kill and delivered again in {rounds} \
         kills (seed {seed}): \"not doubled\" was not put to the test (more: ROAMKV_KILL_ROUNDS)"
    );
    eprintln!(
        "{rounds} kills (seed {seed}): {published} published, {} acknowledged by the broker, \
         {} acknowledged by the server, {} delivered again, {} of them stored before the kill \
         that caused it, {} stored; none lost, none doubled",
        broker_acked.acknowledged_count(),
        seen.acked.len(),
        seen.redelivered.len(),
        rewritten.len(),
        found.len()
    );
}
