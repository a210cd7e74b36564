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
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "POST /api/roamkv/v1/readings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {READ_WRITE_TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
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
