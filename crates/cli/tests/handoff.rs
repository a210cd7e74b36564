//! Handoff between two real `roamkv serve` processes on loopback (docs/SERVER.md, "Handoff"):
//! a device's readings follow it from edge A to edge B exactly once, through SIGKILL of either
//! side at every step of the protocol (crash points armed in the child, `ROAMKV_CRASH_POINTS`),
//! with writers writing; bad input and bad luck get clear answers; and devices moved back and
//! forth at random (fixed seed) end with one history each, checked against the writers' ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `roamkv serve` child; killed if the test ends first.
struct Edge {
    child: Child,
    addr: String,
    data: PathBuf,
    port: u16,
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Edge {
    /// Starts on `port` (the same port across restarts: peers keep its URL).
    fn start(data: &Path, port: u16, crash: Option<&str>) -> Edge {
        let mut command = Command::new(env!("CARGO_BIN_EXE_roamkv"));
        // Readings at synthetic times: the default retention would delete them.
        command.env("ROAMKV_RETENTION_DEFAULT_H", "0");
        command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data"])
            .arg(data)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(point) = crash {
            command.env(roamkv_engine::CRASH_POINTS_ENV, point);
        }
        let mut child = command.spawn().expect("start roamkv serve");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("the server printed its address")
                .expect("stderr line");
            if let Some(url) = line.split("listening on http://").nth(1) {
                break url.trim().to_string();
            }
        };
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("  serve {port}: {line}");
            }
        });
        Edge {
            child,
            addr,
            data: data.to_path_buf(),
            port,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn restart(self, crash: Option<&str>) -> Edge {
        let (data, port) = (self.data.clone(), self.port);
        drop(self);
        Edge::start(&data, port, crash)
    }

    fn killed(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_some()
    }

    fn call(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        http(&self.addr, method, path, body)
    }

    fn json(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let (status, text) = self.call(method, path, body);
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every reading of `device`'s sensor `s` (the ledger's) here: (ts, value).
    fn readings(&self, device: &str) -> BTreeMap<i64, String> {
        let mut out = BTreeMap::new();
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
                assert!(out.insert(ts, value).is_none(), "ts {ts} twice");
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

/// One HTTP/1.1 request on its own connection: (status, body); 0 when the server is gone.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut response = String::new();
    if stream.read_to_string(&mut response).is_err() {
        return (0, String::new());
    }
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

fn value_of(device: &str, ts: i64) -> String {
    format!("{device}/{ts}")
}

/// What writers were told, per device: acknowledged readings, and those whose answer never came.
#[derive(Default)]
struct Ledger {
    acked: BTreeMap<String, BTreeMap<i64, String>>,
    unknown: BTreeMap<String, BTreeSet<i64>>,
    next_ts: BTreeMap<String, i64>,
}

impl Ledger {
    /// Writes `n` readings of `device` at `edge`: Some(status) of the answer (0: none).
    fn write(&mut self, edge: &Edge, device: &str, n: i64) -> u16 {
        let from = *self.next_ts.entry(device.to_string()).or_insert(1);
        self.next_ts.insert(device.to_string(), from + n);
        let body: String = (from..from + n)
            .map(|ts| {
                format!(
                    "{{\"device\":\"{device}\",\"sensor\":\"s\",\"ts_ns\":{ts},\"value\":\"{}\"}}\n",
                    value_of(device, ts)
                )
            })
            .collect();
        let (status, answer) = edge.call("POST", "/api/roamkv/v1/readings", &body);
        match status {
            201 => {
                let acked = self.acked.entry(device.to_string()).or_default();
                acked.extend((from..from + n).map(|ts| (ts, value_of(device, ts))));
            }
            0 => {
                self.unknown
                    .entry(device.to_string())
                    .or_default()
                    .extend(from..from + n);
            }
            409 => {}
            other => panic!("writing {device}: {other} {answer}"),
        }
        status
    }

    /// The device's history at `edge` is exactly what was acknowledged (plus, perhaps, writes
    /// whose answer never came), each reading once with its value.
    fn check(&self, edge: &Edge, device: &str) {
        let got = edge.readings(device);
        let empty = BTreeMap::new();
        let acked = self.acked.get(device).unwrap_or(&empty);
        let unknown = self.unknown.get(device).cloned().unwrap_or_default();
        for (ts, value) in acked {
            assert_eq!(
                got.get(ts),
                Some(value),
                "{device} ts {ts} at {}",
                edge.url()
            );
        }
        for (ts, value) in &got {
            assert!(
                acked.contains_key(ts) || unknown.contains(ts),
                "{device} ts {ts} ({value}) at {} was never written",
                edge.url()
            );
            assert_eq!(value, &value_of(device, *ts));
        }
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
        assert_eq!(ledger.write(&a, "car-1", 300), 201);
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
    ledger.check(&b, "car-1");
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
    assert_eq!(ledger.write(&b, "car-1", 10), 201);
    ledger.check(&b, "car-1");
    assert_eq!(b.state_of(&id), "");
    let (_, inbound) = b.json("GET", &format!("/api/roamkv/v1/handoffs/{id}"), "");
    assert_eq!(inbound["handoff"]["committed"], true, "{inbound}");
}

#[test]
fn bad_input_and_bad_luck_get_clear_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = two_edges(dir.path());
    let mut ledger = Ledger::default();
    ledger.write(&a, "van-1", 100);
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
    assert_eq!(ledger.write(&a, "van-1", 1), 409, "fenced");
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
    assert_eq!(ledger.write(&a, "van-1", 5), 201, "writable again");
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
    ledger.check(&b, "van-1");
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
        assert_eq!(ledger.write(&a, "bus-7", 200), 201);
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
        let status = ledger.write(&a, "bus-7", 10);
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
        assert_eq!(ledger.write(&a, "bus-7", 1), 201);
        ledger.check(&a, "bus-7");
        return;
    }
    a.wait_state(&id, "done", Duration::from_secs(60));
    ledger.check(&b, "bus-7");
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
        assert_eq!(ledger.write(edge(&edges, 0), d, 50), 201);
    }
    for round in 0..rounds {
        let d = devices[rng.random_range(0..devices.len())];
        let from = owner[d];
        let to = 1 - from;
        let id = edge(&edges, from).hand(d, edge(&edges, to));
        // Writers go on at the old edge: refused from the fence on.
        for _ in 0..rng.random_range(0..4) {
            assert_eq!(
                ledger.write(edge(&edges, from), d, 20),
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
            let status = ledger.write(at, other, 10);
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
        ledger.check(edge(&edges, here), d);
        assert!(
            edge(&edges, 1 - here).readings(d).is_empty(),
            "{d} is at both edges (seed {seed})"
        );
    }
}

fn edge(edges: &[Option<Edge>; 2], i: usize) -> &Edge {
    edges[i].as_ref().expect("an edge")
}
