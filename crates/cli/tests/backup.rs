//! `roamkv backup` and `roamkv restore` against a real `roamkv serve`, in real processes:
//! - a backup taken while writers keep writing restores to a directory that passes `roamkv
//!   check` and holds every batch acknowledged before the backup began, whole, and no batch
//!   acknowledged after it ended (each writer's batches there are a prefix of what it wrote);
//! - a backup killed with SIGKILL half-way is refused (restore and --verify name its missing
//!   manifest), the server lets its snapshot go, and the next backup completes, copying only
//!   what the set does not hold;
//! - a restored edge with the cloud sink starts a new generation in the cloud table (a real
//!   PostgreSQL).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roamkv_testbed::postgres::Cluster;
use roamkv_testbed::prerequisite;
use roamkv_testbed::serve::ServeProcess;

const PER_BATCH: i64 = 20;

/// `roamkv serve` with 1 MiB segments (a backup then spans several); killed if the test ends
/// first.
struct Edge {
    server: ServeProcess,
    addr: String,
}

impl Edge {
    fn start(data: &Path, extra: &[&str]) -> Edge {
        let binary = Path::new(env!("CARGO_BIN_EXE_roamkv"));
        let server = ServeProcess::start(binary, data, |command| {
            command.args(["--segment-mib", "1"]).args(extra);
            command.env("RUST_LOG", "warn");
        });
        let addr = server.addr.clone();
        Edge { server, addr }
    }

    fn url(&self) -> String {
        self.server.url()
    }
}

/// One HTTP/1.1 request on its own connection: (status, body); status 0 if it failed.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut response = String::new();
    if stream.write_all(request.as_bytes()).is_err()
        || stream.read_to_string(&mut response).is_err()
    {
        return (0, String::new());
    }
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (
        status,
        response.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    )
}

/// A reading's value: its name, then 200 hex digits that look random. The lower tier compresses
/// its blocks, and the incremental backup's check needs the history to outweigh what is new.
fn value_of(device: &str, ts: i64) -> String {
    let mut state = (ts as u64 ^ device.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let noise: String = (0..25)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            format!("{:08x}", state as u32)
        })
        .collect();
    format!("{device}/{ts}/{noise}")
}

/// Posts batch `b` of `device` (readings b*PER_BATCH ..): true if acknowledged.
fn post_batch(addr: &str, device: &str, b: i64) -> bool {
    let body: String = (b * PER_BATCH..(b + 1) * PER_BATCH)
        .map(|ts| {
            format!(
                "{{\"device\":\"{device}\",\"sensor\":\"s\",\"ts_ns\":{ts},\"value\":\"{}\"}}\n",
                value_of(device, ts)
            )
        })
        .collect();
    let (status, answer) = http(addr, "POST", "/api/roamkv/v1/readings", &body);
    assert!(
        status == 201 || status == 0,
        "POST readings: {status} {answer}"
    );
    status == 201
}

fn roamkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args(args)
        .output()
        .expect("run roamkv")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Batches acknowledged per device, in order, while writers run.
type Acked = Arc<Mutex<BTreeMap<String, Vec<i64>>>>;

/// Writers, one per device, each posting its batches in order until told to stop.
fn start_writers(
    addr: &str,
    devices: usize,
    acked: &Acked,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..devices)
        .map(|d| {
            let (addr, acked, stop) = (addr.to_string(), Arc::clone(acked), Arc::clone(stop));
            std::thread::spawn(move || {
                let device = format!("car-{d}");
                let mut b = 0;
                while !stop.load(Ordering::Relaxed) {
                    if post_batch(&addr, &device, b) {
                        acked
                            .lock()
                            .expect("lock")
                            .entry(device.clone())
                            .or_default()
                            .push(b);
                    }
                    b += 1;
                }
            })
        })
        .collect()
}

/// The batches the restored directory holds per device; every batch whole and as written.
fn batches_in(data: &Path, devices: usize) -> BTreeMap<String, Vec<i64>> {
    let engine = roamkv_engine::Engine::open(
        data,
        roamkv_engine::Options {
            background_maintenance: false,
            ..roamkv_engine::Options::default()
        },
    )
    .expect("open the restored directory");
    let mut held = BTreeMap::new();
    for d in 0..devices {
        let device = format!("car-{d}");
        let readings = engine.scan(&device, None, 0, i64::MAX).expect("scan");
        let mut per_batch: BTreeMap<i64, i64> = BTreeMap::new();
        for r in &readings {
            assert_eq!(
                r.value,
                value_of(&device, r.ts_ns).as_bytes(),
                "{device} {}",
                r.ts_ns
            );
            *per_batch.entry(r.ts_ns / PER_BATCH).or_default() += 1;
        }
        for (b, n) in &per_batch {
            assert_eq!(*n, PER_BATCH, "{device} batch {b} is half there");
        }
        held.insert(device, per_batch.into_keys().collect());
    }
    engine.close().expect("close");
    held
}

#[test]
fn a_backup_during_ingest_restores_every_batch_acknowledged_before_it_and_none_after() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("edge");
    let edge = Edge::start(&data, &["--management-time-ms", "2000"]);
    let (acked, stop) = (Acked::default(), Arc::new(AtomicBool::new(false)));
    let devices = 4;
    let writers = start_writers(&edge.addr, devices, &acked, &stop);
    std::thread::sleep(Duration::from_secs(3));
    let before = acked.lock().expect("lock").clone();
    let set = tmp.path().join("set");
    let output = roamkv(&[
        "backup",
        "--server",
        &edge.url(),
        "--to",
        set.to_str().expect("utf-8"),
        "--json",
    ]);
    let after = acked.lock().expect("lock").clone();
    assert!(output.status.success(), "{}", text(&output));
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    writers.into_iter().for_each(|w| w.join().expect("writer"));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["backup"], 1);

    let restored = tmp.path().join("restored");
    let output = roamkv(&[
        "restore",
        "--from",
        set.to_str().expect("utf-8"),
        "--to",
        restored.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let output = roamkv(&["check", "--data", restored.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", text(&output));
    let held = batches_in(&restored, devices);
    for (device, batches) in &held {
        let written_before = before.get(device).map_or(0, Vec::len);
        let written_by_end = after.get(device).map_or(0, Vec::len);
        // A writer's batches are acknowledged in order: the backup holds a prefix of them.
        let prefix: Vec<i64> = (0..batches.len() as i64).collect();
        assert_eq!(
            batches, &prefix,
            "{device}: not a prefix of what was written"
        );
        assert!(
            batches.len() >= written_before,
            "{device}: {} batches acknowledged before the backup, {} restored",
            written_before,
            batches.len()
        );
        assert!(
            batches.len() <= written_by_end + 1,
            "{device}: {} restored, only {written_by_end} acknowledged by the backup's end",
            batches.len()
        );
        eprintln!(
            "{device}: {written_before} before, {} restored, {written_by_end} by the end",
            batches.len()
        );
    }
    assert!(
        held.values().map(Vec::len).sum::<usize>() > 0,
        "nothing restored"
    );
}

/// Starts `roamkv backup` paused after its first file, waits until it says so, kills it -9.
fn kill_backup_half_way(url: &str, set: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args(["backup", "--server", url, "--to"])
        .arg(set)
        .env(roamkv_engine::backup::PAUSE_ENV, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roamkv backup");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let paused = lines.any(|l| l.is_ok_and(|l| l.contains("backup: paused")));
    assert!(paused, "the backup did not pause");
    child.kill().expect("kill -9");
    child.wait().expect("wait");
}

#[test]
fn a_backup_killed_half_way_is_refused_and_the_next_one_copies_only_what_is_new() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("edge");
    let edge = Edge::start(&data, &["--management-time-ms", "1000"]);
    for b in 0..150 {
        assert!(post_batch(&edge.addr, "car-0", b));
    }
    // The first readings leave the log for the lower tier (a management time).
    std::thread::sleep(Duration::from_secs(3));
    let set = tmp.path().join("set");
    let set_arg = set.to_str().expect("utf-8");
    let first = roamkv(&["backup", "--server", &edge.url(), "--to", set_arg, "--json"]);
    assert!(first.status.success(), "{}", text(&first));
    for b in 150..170 {
        assert!(post_batch(&edge.addr, "car-0", b));
    }

    kill_backup_half_way(&edge.url(), &set);
    let target = tmp.path().join("restored");
    let target_arg = target.to_str().expect("utf-8");
    let refused = roamkv(&[
        "restore", "--from", set_arg, "--backup", "2", "--to", target_arg,
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("partial") && text(&refused).contains("manifest.json"),
        "{}",
        text(&refused)
    );
    assert!(!target.exists());
    let verify = roamkv(&["backup", "--verify", set_arg]);
    assert!(!verify.status.success(), "{}", text(&verify));
    assert!(text(&verify).contains("backup 2: BAD"), "{}", text(&verify));
    // The server let the killed backup's snapshot go: nothing staged, no hold on the log.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir(data.join("backup")).is_ok_and(|mut d| d.next().is_some()) {
        assert!(Instant::now() < deadline, "the staged snapshot stayed");
        std::thread::sleep(Duration::from_millis(50));
    }

    let second = roamkv(&["backup", "--server", &edge.url(), "--to", set_arg, "--json"]);
    assert!(second.status.success(), "{}", text(&second));
    let (first, second): (serde_json::Value, serde_json::Value) = (
        serde_json::from_slice(&first.stdout).expect("JSON"),
        serde_json::from_slice(&second.stdout).expect("JSON"),
    );
    assert_eq!(second["backup"], 2);
    let copied = second["bytes_copied"].as_u64().expect("bytes_copied");
    assert!(
        copied < second["bytes"].as_u64().expect("bytes")
            && copied < first["bytes_copied"].as_u64().expect("first"),
        "the second backup copied {copied} bytes: {second} after {first}"
    );
    let verify = roamkv(&["backup", "--verify", set_arg]);
    assert!(verify.status.success(), "{}", text(&verify));
    let restored = roamkv(&["restore", "--from", set_arg, "--to", target_arg]);
    assert!(restored.status.success(), "{}", text(&restored));
    drop(edge);
    assert_eq!(batches_in(&target, 1)["car-0"].len(), 170);
    // With no server on it, the directory itself is backed up (`--data`), into the same set.
    let offline = roamkv(&[
        "backup",
        "--data",
        data.to_str().expect("utf-8"),
        "--to",
        set_arg,
        "--json",
    ]);
    assert!(offline.status.success(), "{}", text(&offline));
    let offline: serde_json::Value = serde_json::from_slice(&offline.stdout).expect("JSON");
    assert_eq!(offline["backup"], 3);
    let target = tmp.path().join("restored-offline");
    let restored = roamkv(&[
        "restore",
        "--from",
        set_arg,
        "--to",
        target.to_str().expect("utf-8"),
    ]);
    assert!(restored.status.success(), "{}", text(&restored));
    assert_eq!(batches_in(&target, 1)["car-0"].len(), 170);
}

#[test]
fn a_restored_edge_starts_a_new_generation_in_the_cloud() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pg = match Cluster::create(tmp.path(), tmp.path(), "fsync = off\n") {
        Ok(c) => c,
        Err(e) => {
            prerequisite::unmet("backup_restore_sink", &format!("a private PostgreSQL: {e}"));
            return;
        }
    };
    let sink_url = pg.socket_url();
    let sink = ["--sink", sink_url.as_str()];
    let data = tmp.path().join("edge");
    let edge = Edge::start(&data, &sink);
    for b in 0..20 {
        assert!(post_batch(&edge.addr, "car-0", b));
    }
    wait_for_rows(&pg, 20 * PER_BATCH);
    let set = tmp.path().join("set");
    let output = roamkv(&[
        "backup",
        "--server",
        &edge.url(),
        "--to",
        set.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    drop(edge);
    let restored = tmp.path().join("restored");
    let output = roamkv(&[
        "restore",
        "--from",
        set.to_str().expect("utf-8"),
        "--to",
        restored.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let edge = Edge::start(&restored, &sink);
    for b in 20..25 {
        assert!(post_batch(&edge.addr, "car-0", b));
    }
    wait_for_rows(&pg, 25 * PER_BATCH);
    let generation = pg
        .psql(&["-c", "SELECT generation FROM roamkv_sink_cursor"])
        .expect("psql");
    assert_eq!(
        generation.trim(),
        "2",
        "the restored edge's cursor: {generation}"
    );
    drop(edge);
}

fn wait_for_rows(pg: &Cluster, rows: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let count = pg
            .psql(&["-c", "SELECT count(*) FROM roamkv_readings"])
            .unwrap_or_default();
        if count.trim().parse::<i64>().is_ok_and(|n| n >= rows) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the sink did not deliver {rows} rows: {count}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bad_input_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let set = tmp.path().join("set");
    let set_arg = set.to_str().expect("utf-8");
    let not_data = tmp.path().join("not-data");
    std::fs::create_dir_all(&not_data).expect("mkdir");
    for args in [
        vec!["backup", "--to", set_arg],
        vec![
            "backup",
            "--data",
            not_data.to_str().expect("utf-8"),
            "--to",
            set_arg,
        ],
        // Nothing listens on port 9 (discard) here.
        vec!["backup", "--server", "http://127.0.0.1:9", "--to", set_arg],
        vec!["backup", "--server", "not-a-url", "--to", set_arg],
    ] {
        let output = roamkv(&args);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            !set.exists(),
            "{args:?} made {}: {}",
            set.display(),
            text(&output)
        );
    }
    let output = roamkv(&[
        "restore",
        "--from",
        set_arg,
        "--to",
        tmp.path().join("r").to_str().expect("utf-8"),
    ]);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("not a backup set"),
        "{}",
        text(&output)
    );
    assert!(!tmp.path().join("r").exists());
}
