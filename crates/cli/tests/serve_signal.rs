//! `roamkv serve` as a real process: it answers HTTP, and on SIGTERM it finishes, closes the
//! engine cleanly and exits 0, with what it acknowledged on disk; it takes its settings from
//! flags, then the environment, then the file; its defaults fit a small gateway's disk.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use roamkv_testbed::serve::ServeProcess;

fn http(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// Starts `roamkv serve` on a free loopback port.
fn start_server(data: &std::path::Path) -> ServeProcess {
    start_server_with(data, |_| {})
}

/// `start_server` with more flags or environment.
fn start_server_with(data: &std::path::Path, adjust: impl FnOnce(&mut Command)) -> ServeProcess {
    ServeProcess::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_roamkv")),
        data,
        adjust,
    )
}

#[test]
fn sigterm_drains_closes_the_engine_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = start_server(&data);
    let addr = server.addr.clone();

    let body = r#"{"apiVersion":"v3","event":{"id":"040bd523-ec33-440d-9d72-e5813a465f37","deviceName":"car-17","profileName":"car","sourceName":"speed","origin":1700000000000000000,"readings":[{"deviceName":"car-17","resourceName":"speed","profileName":"car","origin":1700000000000000000,"valueType":"Float64","value":"88.5"}]}}"#;
    let response = http(
        &addr,
        &format!(
            "POST /api/v3/event/svc/car/car-17/speed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");

    server.signal(libc::SIGTERM);
    let status = server.wait_exit(20);
    assert!(status.success(), "exit status {status}");
    let log = server.log();
    assert!(log.contains("shutting down"), "{log}");
    assert!(
        !log.contains("still in use"),
        "the engine was not closed cleanly: {log}"
    );

    // The engine was closed (its LOCK released) and holds the acknowledged reading.
    let engine =
        roamkv_engine::Engine::open(&data, roamkv_engine::Options::default()).expect("reopen");
    assert!(
        engine
            .get("car-17", "speed", 1_700_000_000_000_000_000)
            .expect("get")
            .is_some()
    );
}

#[test]
fn a_second_signal_exits_at_once_and_recovery_covers_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = start_server(&data);
    let addr = server.addr.clone();
    // A request whose body never completes keeps the shutdown waiting for it (drain: 30 s).
    let mut stuck = TcpStream::connect(&addr).expect("connect");
    stuck
        .write_all(
            b"POST /api/roamkv/v1/readings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        )
        .expect("write");
    std::thread::sleep(Duration::from_millis(300));
    server.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "still draining"
    );
    let started = Instant::now();
    server.signal(libc::SIGINT);
    let status = server.wait_exit(5);
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let log = server.log();
    assert!(log.contains("second signal"), "{log}");
    drop(stuck);
    roamkv_engine::Engine::open(&data, roamkv_engine::Options::default()).expect("recovers");
}

/// An EdgeX event of one reading; its id is unique per (client, origin).
fn event_body(client: u64, device: &str, origin_ns: u64) -> String {
    format!(
        r#"{{"apiVersion":"v3","event":{{"id":"{id}","deviceName":"{device}","profileName":"car","sourceName":"speed","origin":{origin_ns},"readings":[{{"deviceName":"{device}","resourceName":"speed","profileName":"car","origin":{origin_ns},"valueType":"Float64","value":"88.5"}}]}}}}"#,
        id = format_args!(
            "{client:08x}-ec33-440d-9d72-{:012x}",
            origin_ns & 0xffff_ffff_ffff
        ),
    )
}

fn post_event(addr: &str, client: u64, device: &str, origin_ns: u64) -> std::io::Result<String> {
    let body = event_body(client, device, origin_ns);
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(
        format!(
            "POST /api/v3/event/svc/car/{device}/speed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let response = http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    );
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .expect("a body");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

#[test]
fn sigterm_during_ingest_keeps_every_acknowledged_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = start_server(&data);
    let addr = server.addr.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..4u64)
        .map(|client| {
            let addr = addr.clone();
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let device = format!("car-{client}");
                let mut acknowledged = Vec::new();
                for n in 1u64.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let origin_ns = 1_700_000_000_000_000_000 + n;
                    match post_event(&addr, client, &device, origin_ns) {
                        Ok(response) if response.starts_with("HTTP/1.1 201") => {
                            acknowledged.push(origin_ns)
                        }
                        // Refused, cut or 503 while shutting down: not acknowledged.
                        _ => break,
                    }
                }
                (device, acknowledged)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(20);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(status.success(), "exit status {status}");
    let acknowledged: Vec<(String, Vec<u64>)> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let total: usize = acknowledged.iter().map(|(_, a)| a.len()).sum();
    assert!(
        total >= 20,
        "only {total} events acknowledged before SIGTERM"
    );

    // Restarted, the server has every one of them.
    let mut server = start_server(&data);
    let addr = server.addr.clone();
    for (device, origins) in &acknowledged {
        let count = get_json(
            &addr,
            &format!("/api/v3/reading/count/device/name/{device}"),
        );
        assert_eq!(
            count["count"].as_u64(),
            Some(origins.len() as u64),
            "{device}: {count}"
        );
    }
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(20).success());
}

#[test]
fn settings_come_from_flags_then_environment_then_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = dir.path().join("serve.toml");
    std::fs::write(
        &file,
        "durability = \"none\"\nmax_result_count = 7\nbody_timeout_s = 5\nsegment_mib = 4\n",
    )
    .expect("write config");
    let mut server = start_server_with(&data, |command| {
        command
            .arg("--config")
            .arg(&file)
            .args(["--max-result-count", "9"])
            .env("ROAMKV_DURABILITY", "periodic:50")
            .env("ROAMKV_MAX_RESULT_COUNT", "8");
    });
    let addr = server.addr.clone();
    let config = &get_json(&addr, "/api/v3/config")["config"];
    assert_eq!(config["durability"], "periodic:50", "environment over file");
    assert_eq!(config["maxResultCount"], 9, "flag over environment");
    assert_eq!(config["bodyTimeoutS"], 5, "file over default");
    assert_eq!(config["segmentMib"], 4);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(20).success());

    // An unknown key is an error naming it, and nothing starts.
    std::fs::write(&file, "segment_size = 4\n").expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        // A reading from 2023: the default retention would delete it.
        .env("ROAMKV_RETENTION_DEFAULT_H", "0")
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .arg("--config")
        .arg(&file)
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("segment_size"), "{stderr}");
}

/// Bytes the files under `dir` take on disk (allocated blocks, as du counts them).
fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                disk_bytes(&entry.path())
            } else {
                meta.blocks() * 512
            }
        })
        .sum()
}

#[test]
fn a_dozen_readings_take_megabytes_not_hundreds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = start_server(&data);
    let addr = server.addr.clone();
    for n in 0..12 {
        let response = post_event(&addr, 0, "car-1", 1_700_000_000_000_000_000 + n).expect("post");
        assert!(response.starts_with("HTTP/1.1 201"), "{response}");
    }
    let config = &get_json(&addr, "/api/v3/config")["config"];
    assert_eq!(config["segmentMib"], 8);
    let bytes = disk_bytes(&data);
    assert!(
        bytes < 40 << 20,
        "12 readings take {} MiB on disk",
        bytes >> 20
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(20).success());
}
