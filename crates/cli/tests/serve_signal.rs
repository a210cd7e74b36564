//! `roamkv serve` as a real process: it answers HTTP, and on SIGTERM it finishes, closes the
//! engine cleanly and exits 0, with what it acknowledged on disk.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server if the test fails before it exits by itself.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

/// Starts `roamkv serve` on a free loopback port; returns the process, its address and a
/// thread that collects its log (stderr) until it exits.
fn start_server(
    data: &std::path::Path,
) -> (ServerProcess, String, std::thread::JoinHandle<Vec<String>>) {
    let child = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roamkv serve");
    let mut server = ServerProcess(child);
    let stderr = server.0.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("server printed its address")
            .expect("stderr line");
        if let Some(url) = line.split("listening on http://").nth(1) {
            break url.trim().to_string();
        }
    };
    // Keep draining stderr (so the server never blocks on a full pipe), and keep the log.
    let log = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<String>>());
    (server, addr, log)
}

fn signal(server: &ServerProcess, signal: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    let rc = unsafe { libc::kill(server.0.id() as libc::pid_t, signal) };
    assert_eq!(rc, 0);
}

fn wait_exit(server: &mut ServerProcess, seconds: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(status) = server.0.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "no exit within {seconds} s of the signal"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_drains_closes_the_engine_and_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (mut server, addr, log) = start_server(&data);

    let body = r#"{"apiVersion":"v3","event":{"id":"040bd523-ec33-440d-9d72-e5813a465f37","deviceName":"car-17","profileName":"car","sourceName":"speed","origin":1700000000000000000,"readings":[{"deviceName":"car-17","resourceName":"speed","profileName":"car","origin":1700000000000000000,"valueType":"Float64","value":"88.5"}]}}"#;
    let response = http(
        &addr,
        &format!(
            "POST /api/v3/event/svc/car/car-17/speed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");

    signal(&server, libc::SIGTERM);
    let status = wait_exit(&mut server, 20);
    assert!(status.success(), "exit status {status}");
    let log = log.join().expect("log thread").join("\n");
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
    let (mut server, addr, log) = start_server(&data);
    // A request whose body never completes keeps the shutdown waiting for it (drain: 30 s).
    let mut stuck = TcpStream::connect(&addr).expect("connect");
    stuck
        .write_all(
            b"POST /api/roamkv/v1/readings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        )
        .expect("write");
    std::thread::sleep(Duration::from_millis(300));
    signal(&server, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        server.0.try_wait().expect("wait").is_none(),
        "still draining"
    );
    let started = Instant::now();
    signal(&server, libc::SIGINT);
    let status = wait_exit(&mut server, 5);
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let log = log.join().expect("log thread").join("\n");
    assert!(log.contains("second signal"), "{log}");
    drop(stuck);
    roamkv_engine::Engine::open(&data, roamkv_engine::Options::default()).expect("recovers");
}
