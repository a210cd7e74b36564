//! The reading commands and `depart` against a running `roamkv serve` (`--server URL`): they
//! print what the same commands print from the data directory once the server has stopped,
//! page through scans longer than a page, take the token from a file or $ROAMKV_TOKEN (the
//! read-only one is enough to read, not to depart), and reach an HTTPS server through a CA file.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use roamkv_testbed::serve::ServeProcess;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
const READ_WRITE_TOKEN: &str = "read-write-token-0123456789";
const READ_ONLY_TOKEN: &str = "read-only-token-0123456789";
/// More than one page of a scan through a server (10,000 readings a page).
const LONG_DEVICE_READINGS: usize = 12_345;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `roamkv ARGS`, with $ROAMKV_TOKEN set to `token` (or unset).
fn roamkv(args: &[&str], token: Option<&str>) -> Output {
    let mut command = Command::new(ROAMKV);
    command.args(args).env_remove("ROAMKV_TOKEN");
    if let Some(token) = token {
        command.env("ROAMKV_TOKEN", token);
    }
    command.output().expect("run roamkv")
}

fn ok(output: &Output, what: &str) -> String {
    assert!(output.status.success(), "{what}: {}", text(&output.stderr));
    text(&output.stdout)
}

/// POSTs JSON lines to the native API with the read-write token; the status line.
fn post_readings(addr: &str, body: &str) -> String {
    post(addr, "/api/roamkv/v1/readings", body)
}

/// POSTs `body` to `path` with the read-write token; the status line.
fn post(addr: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {READ_WRITE_TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    answer.lines().next().unwrap_or_default().to_string()
}

/// The readings the test writes: a long device (paged), a name that needs escaping in a URL
/// path, a binary value, a time before 1970, and a device that departs.
fn load(addr: &str) {
    let mut lines: Vec<String> = (0..LONG_DEVICE_READINGS)
        .map(|i| {
            format!(
                r#"{{"device":"truck-9","sensor":"{}","ts_ns":{},"value":"{i}"}}"#,
                ["speed", "fuel", "temp"][i % 3],
                1_700_000_000_000_000_000i64 + i as i64 * 1_000_000
            )
        })
        .collect();
    lines.extend([
        r#"{"device":"car 1/x?","sensor":"speed","ts":1000,"value":"10"}"#.to_string(),
        r#"{"device":"car 1/x?","sensor":"speed","ts":2000,"value_b64":"AAEC/w=="}"#.to_string(),
        r#"{"device":"drone","sensor":"alt","ts":-5,"value":"120"}"#.to_string(),
        r#"{"device":"visitor","sensor":"cam","ts":7,"value":"x"}"#.to_string(),
    ]);
    for chunk in lines.chunks(5_000) {
        let status = post_readings(addr, &chunk.join("\n"));
        assert!(status.contains(" 201 "), "{status}");
    }
}

/// The commands whose output must not depend on where it came from; `devices --json` without
/// its ages, which move with the clock.
fn answers(source: &[&str], token: Option<&str>) -> Vec<String> {
    let queries: [&[&str]; 7] = [
        &["scan", "--device", "truck-9"],
        &[
            "scan",
            "--device",
            "truck-9",
            "--sensor",
            "fuel",
            "--from",
            "1700000000001",
            "--to",
            "1700000000100",
        ],
        &["scan", "--device", "car 1/x?"],
        &[
            "get", "--device", "car 1/x?", "--sensor", "speed", "--ts", "2000",
        ],
        &[
            "get", "--device", "drone", "--sensor", "alt", "--ts-ns", "-5000000",
        ],
        &["latest", "--device", "truck-9"],
        &["latest", "--device", "truck-9", "--sensor", "temp"],
    ];
    let mut out: Vec<String> = queries
        .iter()
        .map(|q| ok(&roamkv(&[*q, source].concat(), token), &format!("{q:?}")))
        .collect();
    let devices = ok(
        &roamkv(&[&["devices", "--json"], source].concat(), token),
        "devices",
    );
    let mut listing: Vec<serde_json::Value> = devices
        .lines()
        .map(|l| serde_json::from_str(l).expect("device line"))
        .collect();
    for device in &mut listing {
        device.as_object_mut().expect("object").remove("age_ms");
    }
    out.push(format!("{listing:?}"));
    out
}

fn stats(source: &[&str], token: Option<&str>) -> serde_json::Value {
    let out = ok(
        &roamkv(&[&["stats", "--json"], source].concat(), token),
        "stats",
    );
    serde_json::from_str(&out).expect("stats json")
}

#[test]
fn through_a_server_the_commands_print_what_the_directory_gives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (rw_file, ro_file) = (dir.path().join("rw"), dir.path().join("ro"));
    std::fs::write(&rw_file, READ_WRITE_TOKEN).expect("token");
    std::fs::write(&ro_file, READ_ONLY_TOKEN).expect("token");
    let mut server = ServeProcess::start(Path::new(ROAMKV), &data, |c| {
        c.arg("--auth-token-file")
            .arg(&rw_file)
            .arg("--read-only-token-file")
            .arg(&ro_file);
    });
    load(&server.addr);
    let url = server.url();
    let remote = ["--server", url.as_str()];

    let scan = ok(
        &roamkv(
            &["scan", "--device", "truck-9", "--server", &url],
            Some(READ_ONLY_TOKEN),
        ),
        "scan",
    );
    assert_eq!(scan.lines().count(), LONG_DEVICE_READINGS, "every page");
    let through_server = answers(&remote, Some(READ_ONLY_TOKEN));
    let server_stats = stats(&remote, Some(READ_ONLY_TOKEN));
    assert_eq!(server_stats["upper"]["devices"], 4, "{server_stats}");
    assert!(
        stats(&remote, Some(READ_ONLY_TOKEN))["user_records"].as_u64()
            >= Some(LONG_DEVICE_READINGS as u64),
        "the server's own session counters"
    );
    let table = ok(
        &roamkv(&["stats", "--server", &url], Some(READ_ONLY_TOKEN)),
        "stats table",
    );
    assert!(
        table.contains("index memory") && table.contains("upper"),
        "{table}"
    );

    // The token: none is a 401 that says how to give one; from a file as from the environment.
    let refused = roamkv(&["devices", "--server", &url], None);
    assert!(
        !refused.status.success()
            && text(&refused.stderr).contains("401")
            && text(&refused.stderr).contains("--token-file"),
        "{}",
        text(&refused.stderr)
    );
    let from_file = roamkv(
        &[
            "devices",
            "--server",
            &url,
            "--token-file",
            ro_file.to_str().expect("utf-8"),
        ],
        None,
    );
    assert!(
        text(&from_file.stdout).contains("4 devices"),
        "{}",
        text(&from_file.stderr)
    );

    // The directory is the server's while it runs: the error says to ask the server.
    let locked = roamkv(&["devices", "--data", data.to_str().expect("utf-8")], None);
    assert!(
        !locked.status.success() && text(&locked.stderr).contains("--server"),
        "{}",
        text(&locked.stderr)
    );

    // Depart: the read-only token may not; the read-write one does; a second time is an error.
    let depart = ["depart", "--device", "visitor", "--server", url.as_str()];
    let forbidden = roamkv(&depart, Some(READ_ONLY_TOKEN));
    assert!(
        !forbidden.status.success() && text(&forbidden.stderr).contains("403"),
        "{}",
        text(&forbidden.stderr)
    );
    ok(&roamkv(&depart, Some(READ_WRITE_TOKEN)), "depart");
    let again = roamkv(&depart, Some(READ_WRITE_TOKEN));
    assert!(
        !again.status.success() && text(&again.stderr).contains("no device \"visitor\""),
        "{}",
        text(&again.stderr)
    );
    let through_server_after = answers(&remote, Some(READ_ONLY_TOKEN));

    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success(), "{}", server.log());

    let data_arg = data.to_str().expect("utf-8");
    let local = ["--data", data_arg];
    let from_directory = answers(&local, None);
    assert_eq!(
        from_directory[..7],
        through_server[..7],
        "readings read through the server and from the directory"
    );
    assert_eq!(
        from_directory, through_server_after,
        "devices after the departure too"
    );
    assert!(
        through_server[7].contains("\"visitor\""),
        "{}",
        through_server[7]
    );
    assert!(
        !from_directory[7].contains("\"visitor\""),
        "{}",
        from_directory[7]
    );
    assert_eq!(stats(&local, None)["upper"]["devices"], 3);
}

#[test]
fn an_https_server_is_reached_through_its_ca_and_refused_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = roamkv_testbed::certificates::certificates(dir.path(), "edge");
    let mut server = ServeProcess::start(Path::new(ROAMKV), &dir.path().join("data"), |c| {
        c.arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key);
    });
    let url = server.url();
    assert!(url.starts_with("https://"), "{url}");
    let ca_arg = ca.to_str().expect("utf-8");
    let listed = roamkv(&["devices", "--server", &url, "--ca-file", ca_arg], None);
    assert!(
        text(&listed.stdout).contains("0 devices"),
        "{}",
        text(&listed.stderr)
    );
    let untrusted = roamkv(&["devices", "--server", &url], None);
    assert!(
        !untrusted.status.success()
            && text(&untrusted.stderr)
                .to_lowercase()
                .contains("certificate"),
        "{}",
        text(&untrusted.stderr)
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
}

/// A reading stored from an EdgeX event prints decoded (`"edgex"`: its value, type, units, a
/// binary value with its media type, its event's fields), the same through the server and from
/// the directory, and loads back (`roamkv load`) into the very bytes it was stored as.
#[test]
fn edgex_readings_print_decoded_and_load_back_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = ServeProcess::start(Path::new(ROAMKV), &data, |_| {});
    let event = r#"{"apiVersion":"v3","event":{"apiVersion":"v3","id":"6f1c1b43-63b2-4c2b-a5a0-0c4b1a9d2e01","deviceName":"thermo-1","profileName":"thermo","sourceName":"readings","origin":1000,"tags":{"site":"a"},"readings":[{"deviceName":"thermo-1","resourceName":"temp","profileName":"thermo","origin":1000,"valueType":"Float64","units":"C","value":"21.5"},{"deviceName":"thermo-1","resourceName":"snapshot","profileName":"thermo","origin":1001,"valueType":"Binary","binaryValue":"AAEC","mediaType":"image/jpeg"}]}}"#;
    let status = post(
        &server.addr,
        "/api/v3/event/svc/thermo/thermo-1/readings",
        event,
    );
    assert!(status.contains(" 201 "), "{status}");
    let scan = |source: &[&str]| {
        ok(
            &roamkv(&[&["scan", "--device", "thermo-1"], source].concat(), None),
            "scan",
        )
    };
    let url = server.url();
    let through_server = scan(&["--server", &url]);
    server.signal(libc::SIGTERM);
    server.wait_exit(30);
    let from_directory = scan(&["--data", data.to_str().expect("utf-8")]);
    assert_eq!(through_server, from_directory);
    let lines: Vec<serde_json::Value> = from_directory
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{from_directory}");
    let (snapshot, temp) = (&lines[0]["edgex"], &lines[1]["edgex"]);
    assert_eq!(
        (temp["value"].clone(), temp["valueType"].clone()),
        ("21.5".into(), "Float64".into())
    );
    assert_eq!(temp["units"], "C");
    assert_eq!(temp["eventId"], "6f1c1b43-63b2-4c2b-a5a0-0c4b1a9d2e01");
    assert_eq!(
        (
            snapshot["binaryValue"].clone(),
            snapshot["mediaType"].clone()
        ),
        ("AAEC".into(), "image/jpeg".into())
    );

    // Loaded into another directory, it prints the same: the same bytes.
    let copy = dir.path().join("copy");
    let mut load = Command::new(ROAMKV)
        .args(["load", "--data", copy.to_str().expect("utf-8")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("roamkv load");
    load.stdin
        .take()
        .expect("stdin")
        .write_all(from_directory.as_bytes())
        .expect("write");
    let loaded = load.wait_with_output().expect("load");
    ok(&loaded, "load");
    assert_eq!(
        scan(&["--data", copy.to_str().expect("utf-8")]),
        from_directory
    );
}
