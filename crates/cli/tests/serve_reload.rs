//! `roamkv serve` as an operator runs it under a service manager: SIGHUP reloads what can change
//! while it runs (tokens, log level, access log) and never stops it, with or without TLS; the
//! probes answer without a token; the status page takes a token as a Basic password, so that a
//! browser can open it; /metrics as served passes `promtool check metrics`; `--log-format json`
//! writes one JSON object a line, access-log lines included.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use roamkv_testbed::prerequisite::{self, require_tool};
use roamkv_testbed::serve::ServeProcess;

const TOKEN_A: &str = "token-a-0123456789abcdef";
const TOKEN_B: &str = "token-b-fedcba9876543210";

/// One request with `headers`: (status, the answer's headers and body).
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, String)]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("Content-Length: 0\r\n\r\n");
    stream.write_all(text.as_bytes()).expect("write");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

fn bearer(token: &str) -> Vec<(&'static str, String)> {
    vec![("Authorization", format!("Bearer {token}"))]
}

fn basic(user: &str, password: &str) -> Vec<(&'static str, String)> {
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    vec![("Authorization", format!("Basic {credentials}"))]
}

fn start(dir: &Path, args: &[&str]) -> ServeProcess {
    let server = ServeProcess::start(
        Path::new(env!("CARGO_BIN_EXE_roamkv")),
        &dir.join("data"),
        |c| {
            c.args(args).env_remove("RUST_LOG");
        },
    );
    server.wait_ready(Duration::from_secs(30));
    server
}

/// Waits up to 10 s for `check`.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn sighup_reloads_tokens_log_level_and_access_log_and_never_stops_the_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN_A}\n")).expect("write token");
    let config = dir.path().join("serve.toml");
    let settings = |level: &str, access: bool, durability: &str| {
        format!(
            "auth_token_file = {token_file:?}\nlog_level = {level:?}\naccess_log = {access}\ndurability = {durability:?}\n"
        )
    };
    std::fs::write(&config, settings("warn", false, "sync")).expect("write config");
    let mut server = start(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let addr = server.addr.clone();

    // Probes answer without a token, and say nothing of the data; the rest needs one.
    assert_eq!(request(&addr, "GET", "/health", &[]).0, 200);
    assert_eq!(request(&addr, "GET", "/ready", &[]).0, 200);
    assert_eq!(request(&addr, "GET", "/api/v3/ping", &[]).0, 200);
    assert_eq!(request(&addr, "GET", "/api/v3/event/count", &[]).0, 401);
    assert_eq!(
        request(&addr, "GET", "/api/v3/event/count", &bearer(TOKEN_A)).0,
        200
    );
    // The status page: a browser is challenged for Basic credentials, and the token is the password.
    let (status, answer) = request(&addr, "GET", "/", &[]);
    assert_eq!(status, 401);
    assert!(
        answer.contains("WWW-Authenticate: Basic realm=")
            || answer.contains("www-authenticate: Basic realm="),
        "{answer}"
    );
    assert_eq!(
        request(&addr, "GET", "/", &basic("operator", TOKEN_A)).0,
        200
    );
    assert_eq!(
        request(&addr, "GET", "/", &basic("operator", "not-the-token")).0,
        401
    );
    // Basic is for the page only: the API takes bearer tokens.
    assert_eq!(
        request(&addr, "GET", "/api/v3/event/count", &basic("x", TOKEN_A)).0,
        401
    );

    // A new token, a chattier log, the access log on, and a durability change (a restart's).
    std::fs::write(&token_file, format!("{TOKEN_B}\n")).expect("write token");
    std::fs::write(&config, settings("debug", true, "none")).expect("write config");
    server.signal(libc::SIGHUP);
    assert!(
        eventually(|| request(&addr, "GET", "/api/v3/event/count", &bearer(TOKEN_B)).0 == 200),
        "the new token was not taken after SIGHUP:\n{}",
        server.log_so_far()
    );
    assert_eq!(
        request(&addr, "GET", "/api/v3/event/count", &bearer(TOKEN_A)).0,
        401
    );
    assert!(!server.has_exited(), "SIGHUP stopped the server");
    assert!(
        eventually(|| server.log_so_far().contains("roamkv::access")),
        "no access-log line after SIGHUP turned it on:\n{}",
        server.log_so_far()
    );
    // The refused request's DEBUG line reaches the log a moment after its answer.
    assert!(
        eventually(|| server.log_so_far().contains("DEBUG")),
        "the debug level took effect:\n{}",
        server.log_so_far()
    );
    let log = server.log_so_far();
    assert!(log.contains("SIGHUP: settings reloaded"), "{log}");
    assert!(
        log.contains("durability"),
        "the restart-only change is named:\n{log}"
    );

    // A file that no longer parses changes nothing: the server runs on with token B.
    std::fs::write(&config, "this is = = not toml").expect("write config");
    server.signal(libc::SIGHUP);
    assert!(
        eventually(|| server.log_so_far().contains("the settings did not reload")),
        "{}",
        server.log_so_far()
    );
    assert_eq!(
        request(&addr, "GET", "/api/v3/event/count", &bearer(TOKEN_B)).0,
        200
    );

    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
}

#[test]
fn sighup_without_tls_or_tokens_changes_nothing_and_the_server_runs_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), &[]);
    server.signal(libc::SIGHUP);
    assert!(
        eventually(|| server.log_so_far().contains("SIGHUP: settings reloaded")),
        "{}",
        server.log_so_far()
    );
    assert!(!server.has_exited(), "SIGHUP stopped the server");
    assert_eq!(server.call("GET", "/api/v3/ping", "").0, 200);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
}

#[test]
fn metrics_as_served_pass_promtool() {
    let tool = require_tool("promtool", "prometheus");
    if !prerequisite::met("metrics_as_served_pass_promtool", tool) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(dir.path(), &[]);
    // Something in every family that shows only once used.
    server.call(
        "POST",
        "/api/roamkv/v1/readings",
        "{\"device\":\"d\",\"sensor\":\"s\",\"ts_ns\":1,\"value\":\"1\"}\n",
    );
    let (status, text) = server.call("GET", "/metrics", "");
    assert_eq!(status, 200);
    let mut child =
        std::process::Command::new(require_tool("promtool", "prometheus").expect("promtool"))
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let output = child.wait_with_output().expect("promtool");
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
}

#[test]
fn a_json_log_is_one_object_a_line_access_lines_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = start(
        dir.path(),
        &["--log-format", "json", "--access-log", "true"],
    );
    assert_eq!(server.call("GET", "/api/v3/ping", "").0, 200);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    let log = server.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{log}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("listening on http://"))),
        "{log}"
    );
    let access = lines
        .iter()
        .find(|l| l["target"] == "roamkv::access" && l["path"] == "/api/v3/ping")
        .unwrap_or_else(|| panic!("no access line for /api/v3/ping:\n{log}"));
    assert_eq!(access["status"], 200, "{access}");
    assert_eq!(access["method"], "GET", "{access}");
    assert!(
        access["client"]
            .as_str()
            .is_some_and(|c| c.starts_with("127.0.0.1:")),
        "{access}"
    );
    assert!(
        access["level"] == "INFO" && access["timestamp"].is_string(),
        "{access}"
    );
}
