//! Handoff between two real `roamkv serve` processes on loopback (docs/SERVER.md, "Handoff"):
//! a device's readings follow it from edge A to edge B exactly once, through SIGKILL of either
//! side at every step of the protocol (crash points armed in the child, `ROAMKV_CRASH_POINTS`),
//! with writers writing; bad input and bad luck get clear answers; and devices moved back and
//! forth at random (fixed seed) end with one history each, checked against the writers' ledger.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use roamkv_testbed::ledger::{Ledger, native_lines};
use roamkv_testbed::serve::{ServeProcess, http_call};
use roamkv_testbed::services::free_port;
use serde_json::Value;

/// A `roamkv serve` child on a port it keeps across restarts (peers keep its URL).
struct Edge {
    server: ServeProcess,
}

impl Edge {
    /// Starts on `port` with `crash` armed (`ROAMKV_CRASH_POINTS`).
    fn start(data: &Path, port: u16, crash: Option<&str>) -> Edge {
        let binary = Path::new(env!("CARGO_BIN_EXE_roamkv"));
        let server = ServeProcess::start_on(binary, data, port, |command| {
            command.env("RUST_LOG", "warn");
            if let Some(point) = crash {
                command.env(roamkv_engine::CRASH_POINTS_ENV, point);
            }
        });
        Edge { server }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn restart(self, crash: Option<&str>) -> Edge {
        let (data, port) = (self.server.data().to_path_buf(), self.server.port());
        drop(self);
        Edge::start(&data, port, crash)
    }

    fn killed(&mut self) -> bool {
        self.server.has_exited()
    }

    fn call(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http_call(&self.server.addr, method, path, body)
    }

    fn json(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let (status, text) = self.call(method, path, body);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every reading of `device`'s sensor `s` (the ledger's) here, duplicates kept.
    fn readings(&self, device: &str) -> Vec<(String, i64, String)> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let path =
                format!("/api/roamkv/v1/devices/{device}/readings?sensor=s&limit=10000{after}");
            let (status, page) = self.json("GET", &path, "");
            if status == 404 {
                return out;
            }
            assert_eq!(status, 200, "{path}: {page}");
            for r in page["readings"].as_array().expect("readings") {
                let ts = r["ts_ns"].as_i64().expect("ts_ns");
                let value = r["value"].as_str().expect("value").to_string();
                out.push((device.to_string(), ts, value));
            }
            match page["next"].as_str() {
                Some(next) => after = format!("&after={next}"),
                None => return out,
            }
        }
    }

    /// Starts a handoff of `device` to `to`; its id.
    fn hand(&self, device: &str, to: &Edge) -> String {
        let (status, body) = self.json(
            "POST",
            &format!("/api/roamkv/v1/devices/{device}/handoff"),
            &format!("{{\"to\":\"{}\"}}", to.url()),
        );
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().expect("id").to_string()
    }

    /// The state of handoff `id` here ("" if unknown or unreachable).
    fn state_of(&self, id: &str) -> String {
        let (_, body) = self.json("GET", &format!("/api/roamkv/v1/handoffs/{id}"), "");
        body["handoff"]["state"].as_str().unwrap_or("").to_string()
    }

    fn wait_state(&self, id: &str, want: &str, within: Duration) {
        let started = Instant::now();
        while self.state_of(id) != want {
            assert!(
                started.elapsed() < within,
                "handoff {id} not {want}: {}",
                self.state_of(id)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Writes `n` readings of `device` at `edge` as one native batch, noting the answer in the
/// ledger: its status (0: none; 409: the device is fenced there).
fn write(ledger: &mut Ledger, edge: &Edge, device: &str, n: i64) -> u16 {
    let range = ledger.next(device, n);
    let body = native_lines(device, "s", range.clone());
    let (status, answer) = edge.call("POST", "/api/roamkv/v1/readings", &body);
    assert!(
        matches!(status, 201 | 0 | 409),
        "writing {device}: {status} {answer}"
    );
    ledger.note(device, range, status)
}

/// The device's history at `edge` is exactly what was acknowledged (plus, perhaps, writes
/// whose answer never came), each reading once with its value.
fn check(ledger: &Ledger, edge: &Edge, device: &str) {
    if let Err(e) = ledger.check(edge.readings(device), Some(&[device])) {
        panic!("{device} at {}: {e}", edge.url());
    }
}

fn two_edges(dir: &Path) -> (Edge, Edge) {
    (
        Edge::start(&dir.join("a"), free_port(), None),
        Edge::start(&dir.join("b"), free_port(), None),
    )
}

#[test]
fn a_device_moves_with_its_history_and_the_old_edge_refuses_its_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_edges(dir.path());
    let mut ledger = Ledger::default();
    for _ in 0..20 {
        assert_eq!(write(&mut ledger, &a, "car-1", 300), 201);
    }
    // An EdgeX event too: B finds it by id once the device is there (its index entry is made
    // from the chunks), A no longer does.
    let event_id = "5d6c3f4e-8a1b-4c2d-9e0f-1a2b3c4d5e6f";
    let event = format!(
        r#"{{"apiVersion":"v3","event":{{"apiVersion":"v3","id":"{event_id}","deviceName":"car-1","profileName":"car","sourceName":"s","origin":5000000,"readings":[{{"deviceName":"car-1","resourceName":"speed","profileName":"car","origin":5000000,"valueType":"Float64","value":"88.5"}},{{"deviceName":"car-1","resourceName":"fuel","profileName":"car","origin":5000001,"valueType":"Float64","value":"0.5"}}]}}}}"#
    );
    let (status, body) = a.call("POST", "/api/v3/event/svc/car/car-1/s", &event);
    assert_eq!(status, 201, "{body}");
    let by_id = format!("/api/v3/event/id/{event_id}");
    assert_eq!(a.call("GET", &by_id, "").0, 200);
    let id = a.hand("car-1", &b);
    a.wait_state(&id, "done", Duration::from_secs(30));
    check(&ledger, &b, "car-1");
    assert!(a.readings("car-1").is_empty(), "departed from A");
    let (status, body) = b.json("GET", &by_id, "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["event"]["readings"].as_array().map(Vec::len),
        Some(2),
        "{body}"
    );
    assert_eq!(
        a.call("GET", &by_id, "").0,
        404,
        "A's entry names a departed device"
    );
    // A refuses the device's writes now, naming B.
    let (status, body) = a.call(
        "POST",
        "/api/roamkv/v1/readings",
        "{\"device\":\"car-1\",\"sensor\":\"s\",\"ts_ns\":1,\"value\":\"x\"}\n",
    );
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(&b.url()), "{body}");
    // B took the device: it writes there.
    assert_eq!(write(&mut ledger, &b, "car-1", 10), 201);
    check(&ledger, &b, "car-1");
    assert_eq!(b.state_of(&id), "");
    let (_, inbound) = b.json("GET", &format!("/api/roamkv/v1/handoffs/{id}"), "");
    assert_eq!(inbound["handoff"]["committed"], true, "{inbound}");
}

#[test]
fn bad_input_and_bad_luck_get_clear_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_edges(dir.path());
    let mut ledger = Ledger::default();
    write(&mut ledger, &a, "van-1", 100);
    let hand = |device: &str, to: &str| {
        a.json(
            "POST",
            &format!("/api/roamkv/v1/devices/{device}/handoff"),
            &format!("{{\"to\":\"{to}\"}}"),
        )
    };
    assert_eq!(hand("nobody", &b.url()).0, 404, "unknown device");
    assert_eq!(hand("van-1", "ftp://x").0, 400, "not an http URL");
    let (status, body) = hand("van-1", &a.url());
    assert_eq!(status, 409, "to itself: {body}");
    // Unreachable receiver: the handoff waits, fenced, with the error shown; aborted, the
    // device takes writes again.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let (status, body) = hand("van-1", &nobody);
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("id").to_string();
    assert_eq!(hand("van-1", &b.url()).0, 409, "already moving");
    assert_eq!(write(&mut ledger, &a, "van-1", 1), 409, "fenced");
    let started = Instant::now();
    loop {
        let (_, h) = a.json("GET", &format!("/api/roamkv/v1/handoffs/{id}"), "");
        if h["handoff"]["last_error"].is_string() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{h}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = a.call("DELETE", &format!("/api/roamkv/v1/handoffs/{id}"), "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(write(&mut ledger, &a, "van-1", 5), 201, "writable again");
    // The CLI does the same, following it to the end.
    let out = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args([
            "handoff",
            "--server",
            &a.url(),
            "--device",
            "van-1",
            "--to",
            &b.url(),
        ])
        .output()
        .expect("roamkv handoff");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("done"));
    check(&ledger, &b, "van-1");
    // A chunk for a handoff B does not know, or of a stale epoch, is refused.
    let (status, _) = b.call("PUT", "/api/roamkv/v1/handoffs/nope/chunks/0", "");
    assert!(status == 400 || status == 404, "{status}");
}

/// One kill-and-resume round: `victim` ("a" or "b") is started with `point` armed, a device is
/// handed A -> B while a writer writes at A, the victim dies at the point and is restarted, and
/// the handoff completes by itself. Checked: every reading acknowledged at A is at B once, A
/// has none of the device, no write was acknowledged at A after the fence.
fn kill_round(dir: &Path, victim: &str, point: &str) {
    let (port_a, port_b) = (free_port(), free_port());
    let armed = format!("{point}=1");
    let crash = |who: &str| (who == victim).then_some(armed.as_str());
    let mut a = Edge::start(&dir.join("a"), port_a, crash("a"));
    let mut b = Edge::start(&dir.join("b"), port_b, crash("b"));
    let mut ledger = Ledger::default();
    for _ in 0..30 {
        assert_eq!(write(&mut ledger, &a, "bus-7", 200), 201);
    }
    let (status, body) = a.json(
        "POST",
        "/api/roamkv/v1/devices/bus-7/handoff",
        &format!("{{\"to\":\"{}\"}}", b.url()),
    );
    let id = body["id"].as_str().map(str::to_string);
    assert!(status == 202 || status == 0, "{status} {body}");
    // The writer goes on: refused (409) from the fence on, never acknowledged.
    let started = Instant::now();
    while !(a.killed() || b.killed()) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{point} never reached"
        );
        let status = write(&mut ledger, &a, "bus-7", 10);
        assert!(
            status == 409 || status == 0,
            "A took a write after the fence: {status}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("{victim} killed at {point}");
    if victim == "a" {
        a = a.restart(None);
    } else {
        b = b.restart(None);
    }
    let id = id.unwrap_or_else(|| {
        // A died before it answered: its record (if written) is the one in flight.
        let (_, list) = a.json("GET", "/api/roamkv/v1/handoffs", "");
        list["out"][0]["id"].as_str().unwrap_or("").to_string()
    });
    if id.is_empty() {
        // Killed before the record: nothing happened, the device is still A's and writable.
        assert_eq!(write(&mut ledger, &a, "bus-7", 1), 201);
        check(&ledger, &a, "bus-7");
        return;
    }
    a.wait_state(&id, "done", Duration::from_secs(60));
    check(&ledger, &b, "bus-7");
    assert!(a.readings("bus-7").is_empty(), "{point}: A still has bus-7");
}

#[test]
fn a_handoff_survives_sigkill_of_either_side_at_every_step() {
    let points = [
        ("a", "handoff.after_record"),
        ("a", "handoff.after_begin"),
        ("a", "handoff.after_chunk"),
        ("a", "handoff.after_commit"),
        ("a", "handoff.after_depart"),
        ("b", "handoff_in.after_begin"),
        ("b", "handoff_in.after_chunk"),
        ("b", "handoff_in.after_commit"),
    ];
    for (victim, point) in points {
        let dir = tempfile::tempdir().expect("tempdir");
        kill_round(dir.path(), victim, point);
    }
}

/// Devices handed back and forth between two edges at random (fixed seed), writers writing to
/// each device's edge, edges killed with SIGKILL now and then: every device ends with one
/// history, at the edge that has it, equal to what its writers were acknowledged.
#[test]
fn devices_handed_back_and_forth_at_random_keep_one_history() {
    use rand::{Rng, SeedableRng};
    let seed: u64 = std::env::var("ROAMKV_HANDOFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(26);
    let rounds: usize = std::env::var("ROAMKV_HANDOFF_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_edges(dir.path());
    let mut edges = [Some(a), Some(b)];
    let devices = ["car-1", "car-2", "drone-3", "phone-4"];
    let mut owner: BTreeMap<&str, usize> = devices.iter().map(|d| (*d, 0)).collect();
    let mut ledger = Ledger::default();
    for d in devices {
        assert_eq!(write(&mut ledger, edge(&edges, 0), d, 50), 201);
    }
    for round in 0..rounds {
        let d = devices[rng.random_range(0..devices.len())];
        let from = owner[d];
        let to = 1 - from;
        let id = edge(&edges, from).hand(d, edge(&edges, to));
        // Writers go on at the old edge: refused from the fence on.
        for _ in 0..rng.random_range(0..4) {
            assert_eq!(
                write(&mut ledger, edge(&edges, from), d, 20),
                409,
                "seed {seed} round {round}"
            );
        }
        if rng.random_bool(0.3) {
            // Bad luck: an edge is killed mid-handoff and comes back.
            let victim = rng.random_range(0..2);
            let e = edges[victim].take().expect("an edge");
            edges[victim] = Some(e.restart(None));
            eprintln!("round {round}: edge {victim} killed and restarted during {d}'s handoff");
        }
        edge(&edges, from).wait_state(&id, "done", Duration::from_secs(60));
        owner.insert(d, to);
        for other in devices {
            let at = edge(&edges, owner[other]);
            let status = write(&mut ledger, at, other, 10);
            if status != 201 {
                let (_, again) = at.call(
                    "POST",
                    "/api/roamkv/v1/readings",
                    &format!(
                        "{{\"device\":\"{other}\",\"sensor\":\"s\",\"ts_ns\":1,\"value\":\"x\"}}\n"
                    ),
                );
                panic!(
                    "seed {seed} round {round}: {other} at edge {}: {status}: {again}",
                    owner[other]
                );
            }
        }
    }
    for d in devices {
        let here = owner[d];
        check(&ledger, edge(&edges, here), d);
        assert!(
            edge(&edges, 1 - here).readings(d).is_empty(),
            "{d} is at both edges (seed {seed})"
        );
    }
}

fn edge(edges: &[Option<Edge>; 2], i: usize) -> &Edge {
    edges[i].as_ref().expect("an edge")
}
