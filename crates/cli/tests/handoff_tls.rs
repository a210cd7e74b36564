//! Handoff between two real `roamkv serve` over HTTPS with bearer tokens on both edges
//! (docs/SERVER.md, "Handoff"): the sender dials the next edge's `https://` URL trusting the CA
//! of `--peer-ca-file` and presents the token of `--peer-token-file`, which the next edge takes
//! as its read-write token. Without that CA, or with a token the next edge refuses, the handoff
//! waits (fenced, retrying) and its record says what is wrong and what to do; given the right
//! setting, it completes, every reading at the next edge exactly once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::Method;
use reqwest::blocking::Client;
use roamkv_testbed::certificates::certificates;
use roamkv_testbed::ledger::{Ledger, native_lines};
use roamkv_testbed::serve::ServeProcess;
use roamkv_testbed::services::free_port;
use serde_json::{Value, json};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

/// The files of two edges: each its CA, certificate, key and read-write token; B a read-only
/// token too; and a token neither edge takes.
struct Files {
    dir: tempfile::TempDir,
    /// (CA, certificate, key) of edge a and of edge b.
    pki: [(PathBuf, PathBuf, PathBuf); 2],
}

const TOKEN_A: &str = "edge-a-read-write-token-0123456789";
const TOKEN_B: &str = "edge-b-read-write-token-0123456789";
const READ_ONLY_B: &str = "edge-b-read-only-token-0123456789";
const WRONG: &str = "nobodys-token-abcdefghijklmnopqrstuvwxyz";

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().expect("tempdir");
        let pki = [certificates(dir.path(), "a"), certificates(dir.path(), "b")];
        for token in [TOKEN_A, TOKEN_B, READ_ONLY_B, WRONG] {
            std::fs::write(dir.path().join(token), format!("{token}\n")).expect("write token");
        }
        Files { dir, pki }
    }

    /// The file holding `token`.
    fn token(&self, token: &str) -> PathBuf {
        self.dir.path().join(token)
    }

    fn ca(&self, edge: usize) -> &Path {
        &self.pki[edge].0
    }

    fn data(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A `roamkv serve` over HTTPS with its read-write token, on a port it keeps across restarts,
/// and a client that trusts its CA and presents that token.
struct Edge {
    server: ServeProcess,
    client: Client,
    /// Its read-write token, which the client presents.
    token: &'static str,
}

impl Edge {
    /// Edge `which` (0: a, 1: b) on `port`, with `extra` flags (the peer settings).
    fn start(files: &Files, which: usize, port: u16, extra: &[(&str, &Path)]) -> Edge {
        let (ca, cert, key) = &files.pki[which];
        let token = [TOKEN_A, TOKEN_B][which];
        let data = files.data(["a", "b"][which]);
        let server = ServeProcess::start_on(Path::new(ROAMKV), &data, port, |c| {
            c.env("RUST_LOG", "warn")
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key)
                .arg("--auth-token-file")
                .arg(files.token(token));
            if which == 1 {
                c.arg("--read-only-token-file")
                    .arg(files.token(READ_ONLY_B));
            }
            for (flag, value) in extra {
                c.arg(flag).arg(value);
            }
        });
        assert_eq!(server.scheme, "https", "{}", server.log_so_far());
        let tls = roamkv_sink::tls::client_config(Some(ca), "--ca-file").expect("client TLS");
        let client = Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client");
        let edge = Edge {
            server,
            client,
            token,
        };
        edge.wait_ready();
        edge
    }

    fn url(&self) -> String {
        self.server.url()
    }

    /// (status, body as JSON) of one request with this edge's token; status 0 when unanswered.
    fn call(&self, method: Method, path: &str, body: Option<String>) -> (u16, Value) {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.url()))
            .bearer_auth(self.token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        match request.send() {
            Ok(answer) => {
                let status = answer.status().as_u16();
                (status, answer.json().unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        }
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        while self.call(Method::GET, "/ready", None).0 != 200 {
            assert!(started.elapsed() < Duration::from_secs(30), "not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Writes `n` readings of `device` as one native batch, noted in the ledger; its status.
    fn write(&self, ledger: &mut Ledger, device: &str, n: i64) -> u16 {
        let range = ledger.next(device, n);
        let body = native_lines(device, "s", range.clone());
        let (status, answer) = self.call(Method::POST, "/api/roamkv/v1/readings", Some(body));
        assert!(
            matches!(status, 201 | 409),
            "writing {device}: {status} {answer}"
        );
        ledger.note(device, range, status)
    }

    /// Every reading of `device`'s sensor `s` here, duplicates kept.
    fn readings(&self, device: &str) -> Vec<(String, i64, String)> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let path =
                format!("/api/roamkv/v1/devices/{device}/readings?sensor=s&limit=10000{after}");
            let (status, page) = self.call(Method::GET, &path, None);
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
        let path = format!("/api/roamkv/v1/devices/{device}/handoff");
        let body = json!({"to": to.url()}).to_string();
        let (status, answer) = self.call(Method::POST, &path, Some(body));
        assert_eq!(status, 202, "{answer}");
        answer["id"].as_str().expect("id").to_string()
    }

    /// The record of handoff `id` here.
    fn handoff(&self, id: &str) -> Value {
        let (_, body) = self.call(Method::GET, &format!("/api/roamkv/v1/handoffs/{id}"), None);
        body["handoff"].clone()
    }

    /// Waits until `done` holds of handoff `id`'s record; the record.
    fn wait_for(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let record = self.handoff(id);
            if done(&record) {
                return record;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "handoff {id}: not {what}: {record}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_done(&self, id: &str) {
        self.wait_for(id, "done", |r| r["state"] == "done");
    }

    /// Waits until handoff `id`'s last error holds every one of `parts`; the error.
    fn wait_error(&self, id: &str, parts: &[&str]) -> String {
        let record = self.wait_for(id, &format!("failing with {parts:?}"), |r| {
            r["last_error"]
                .as_str()
                .is_some_and(|e| parts.iter().all(|p| e.contains(p)))
        });
        assert_eq!(record["state"], "fenced", "{record}");
        let error = record["last_error"].as_str().expect("error").to_string();
        println!("handoff {id} at {}: {error}", self.url());
        error
    }

    /// How many times the sender logged a failed step it retries.
    fn retries(&self) -> usize {
        self.server
            .log_so_far()
            .matches("handoff step failed; retrying")
            .count()
    }
}

/// `device`'s history at `edge` is exactly what was acknowledged, each reading once.
fn check(ledger: &Ledger, edge: &Edge, device: &str) {
    if let Err(e) = ledger.check(edge.readings(device), Some(&[device])) {
        panic!("{device} at {}: {e}", edge.url());
    }
}

/// Edge b as every test here runs it: HTTPS, its read-write and read-only tokens; it may pull a
/// device from a (`arrived`) with a's token and CA.
fn edge_b(files: &Files, port: u16) -> Edge {
    Edge::start(
        files,
        1,
        port,
        &[
            ("--peer-token-file", &files.token(TOKEN_A)),
            ("--peer-ca-file", files.ca(0)),
        ],
    )
}

#[test]
fn two_https_edges_with_tokens_hand_a_device_over_and_back_exactly_once() {
    let files = Files::new();
    let b = edge_b(&files, free_port());
    let peer_token = files.token(TOKEN_B);
    let a = Edge::start(
        &files,
        0,
        free_port(),
        &[
            ("--peer-token-file", &peer_token),
            ("--peer-ca-file", files.ca(1)),
        ],
    );
    let mut ledger = Ledger::default();
    for _ in 0..10 {
        assert_eq!(a.write(&mut ledger, "car-1", 500), 201);
    }
    let id = a.hand("car-1", &b);
    a.wait_done(&id);
    check(&ledger, &b, "car-1");
    assert!(a.readings("car-1").is_empty(), "departed from a");
    assert_eq!(a.write(&mut ledger, "car-1", 1), 409, "a refuses it now");
    assert_eq!(b.write(&mut ledger, "car-1", 100), 201, "b takes it");
    // b pulls a second device from a (`arrived`): b dials a with a's CA and token.
    for _ in 0..3 {
        assert_eq!(a.write(&mut ledger, "car-2", 400), 201);
    }
    let path = "/api/roamkv/v1/devices/car-2/arrived";
    let (status, answer) = b.call(
        Method::POST,
        path,
        Some(json!({"from": a.url()}).to_string()),
    );
    assert_eq!(status, 202, "{answer}");
    a.wait_done(answer["id"].as_str().expect("id"));
    check(&ledger, &b, "car-2");
    // And car-1 goes back to a, with its history and b's writes.
    let back = b.hand("car-1", &a);
    b.wait_done(&back);
    check(&ledger, &a, "car-1");
    // The peer token is shown nowhere: not in the settings, not in a log.
    let (_, config) = a.call(Method::GET, "/api/v3/config", None);
    assert!(!config.to_string().contains(TOKEN_B), "{config}");
    assert_eq!(config["config"]["peer"]["token"], true, "{config}");
    for edge in [&a, &b] {
        let log = edge.server.log_so_far();
        assert!(!log.contains(TOKEN_A) && !log.contains(TOKEN_B), "{log}");
    }
}

#[test]
fn without_the_next_edges_ca_the_handoff_says_to_give_it_and_retries_until_given() {
    let files = Files::new();
    let b = edge_b(&files, free_port());
    let peer_token = files.token(TOKEN_B);
    let port_a = free_port();
    let a = Edge::start(&files, 0, port_a, &[("--peer-token-file", &peer_token)]);
    let mut ledger = Ledger::default();
    assert_eq!(a.write(&mut ledger, "drone-1", 3_000), 201);
    let id = a.hand("drone-1", &b);
    a.wait_error(
        &id,
        &[
            "begin at https://127.0.0.1:",
            "presents a certificate signed by a CA this client does not trust",
            "--peer-ca-file ca.crt",
            "UnknownIssuer)",
        ],
    );
    assert_eq!(a.write(&mut ledger, "drone-1", 1), 409, "fenced meanwhile");
    let started = Instant::now();
    while a.retries() < 3 {
        assert!(started.elapsed() < Duration::from_secs(20), "no retries");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(b.readings("drone-1").is_empty(), "nothing reached b");
    // Given the CA, the same handoff goes through from its record.
    drop(a);
    let a = Edge::start(
        &files,
        0,
        port_a,
        &[
            ("--peer-token-file", &peer_token),
            ("--peer-ca-file", files.ca(1)),
        ],
    );
    a.wait_done(&id);
    check(&ledger, &b, "drone-1");
}

#[test]
fn a_token_the_next_edge_refuses_is_said_and_the_handoff_waits_for_the_right_one() {
    let files = Files::new();
    let b = edge_b(&files, free_port());
    let port_a = free_port();
    let with_token = |token: &str| {
        Edge::start(
            &files,
            0,
            port_a,
            &[
                ("--peer-token-file", &files.token(token)),
                ("--peer-ca-file", files.ca(1)),
            ],
        )
    };
    let a = with_token(WRONG);
    let mut ledger = Ledger::default();
    assert_eq!(a.write(&mut ledger, "bus-1", 2_500), 201);
    let id = a.hand("bus-1", &b);
    a.wait_error(
        &id,
        &[
            "refused this edge's peer token",
            "--peer-token-file FILE",
            "401 Unauthorized: the bearer token is not valid)",
        ],
    );
    // b's read-only token cannot write: the handoff says so.
    drop(a);
    let a = with_token(READ_ONLY_B);
    a.wait_error(
        &id,
        &[
            "read-only token",
            "a handoff writes",
            "--peer-token-file FILE",
            "403 Forbidden",
        ],
    );
    assert!(b.readings("bus-1").is_empty(), "nothing reached b");
    drop(a);
    let a = with_token(TOKEN_B);
    a.wait_done(&id);
    check(&ledger, &b, "bus-1");
}

#[test]
fn a_peer_token_rotated_in_its_file_is_taken_on_sighup() {
    let files = Files::new();
    let b = edge_b(&files, free_port());
    // One peer token file whose content the operator replaces, as a rotation does.
    let token_file = files.data("peer-token");
    std::fs::write(&token_file, format!("{WRONG}\n")).expect("write token");
    let a = Edge::start(
        &files,
        0,
        free_port(),
        &[
            ("--peer-token-file", &token_file),
            ("--peer-ca-file", files.ca(1)),
        ],
    );
    let mut ledger = Ledger::default();
    assert_eq!(a.write(&mut ledger, "tram-1", 1_500), 201);
    let id = a.hand("tram-1", &b);
    a.wait_error(&id, &["refused this edge's peer token"]);
    std::fs::write(&token_file, format!("{TOKEN_B}\n")).expect("write token");
    a.server.signal(libc::SIGHUP);
    // No restart: the next retry carries the new token (the edges log at warn: the reload's own
    // info line is not shown, the finished handoff is the proof).
    a.wait_done(&id);
    check(&ledger, &b, "tram-1");
    assert!(!a.server.log_so_far().contains("did not reload"));
}
