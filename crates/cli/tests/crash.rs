//! Kill -9 a real `roamkv load --ack` at random moments; every acknowledged record must be
//! there after reopening, and `roamkv check` must pass.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
const KILLS: u64 = 24;

fn line(i: u64) -> String {
    // Devices come and go: 40 devices, readings spread over them, values of varying size.
    let device = format!("car-{}", i % 40);
    let sensor = ["speed", "rpm", "fuel"][(i % 3) as usize];
    let value = format!("{i}-{}", "x".repeat((i % 200) as usize));
    format!(
        "{{\"device\":\"{device}\",\"sensor\":\"{sensor}\",\"ts\":{i},\"value\":\"{value}\"}}\n"
    )
}

fn expected_value(i: u64) -> String {
    format!("{i}-{}", "x".repeat((i % 200) as usize))
}

#[test]
fn sigkill_never_loses_an_acknowledged_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut next = 0u64; // first record not yet sent in any run
    let mut acked_total = 0u64;

    for kill in 0..KILLS {
        let mut child = Command::new(ROAMKV)
            .args(["load", "--data"])
            .arg(&data)
            .args([
                "--ack",
                "--segment-mib",
                "1",
                "--management-time-ms",
                "300",
                "--batch",
                "64",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn roamkv load");
        let mut stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let run_start = next;
        let acked_in_run = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = {
            let acked_in_run = acked_in_run.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(stdout).lines() {
                    let Ok(l) = l else { break };
                    if let Some(n) = l.strip_prefix("acked ").and_then(|n| n.parse::<u64>().ok()) {
                        acked_in_run.store(n, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            })
        };
        // Feed records until a random deadline, then SIGKILL the loader mid-stream.
        let deadline = Instant::now() + Duration::from_millis(rng.random_range(40..400));
        while Instant::now() < deadline {
            let chunk: String = (next..next + 50).map(line).collect();
            if stdin.write_all(chunk.as_bytes()).is_err() {
                break;
            }
            next += 50;
        }
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        drop(stdin);
        reader.join().expect("reader");
        let acked = acked_in_run.load(std::sync::atomic::Ordering::SeqCst);
        assert!(acked <= next - run_start, "acked more than was sent");
        // Records are acked in input order, so records [run_start, run_start + acked) are durable.
        // Reopen with the library (as the next `roamkv` process would) and look at every one.
        {
            let options = roamkv_engine::Options {
                segment_bytes: 1 << 20,
                background_maintenance: false,
                ..roamkv_engine::Options::default()
            };
            let engine = roamkv_engine::Engine::open(&data, options).expect("reopen after SIGKILL");
            for i in run_start..run_start + acked {
                let device = format!("car-{}", i % 40);
                let sensor = ["speed", "rpm", "fuel"][(i % 3) as usize];
                let got = engine.get(&device, sensor, i as i64).expect("get");
                assert_eq!(
                    got.as_deref(),
                    Some(expected_value(i).as_bytes()),
                    "kill {kill}: acknowledged record {i} is missing or wrong"
                );
            }
        }
        acked_total += acked;
        let check = Command::new(ROAMKV)
            .args(["check", "--data"])
            .arg(&data)
            .output()
            .expect("roamkv check");
        assert!(
            check.status.success(),
            "kill {kill}: roamkv check failed:\n{}",
            String::from_utf8_lossy(&check.stdout)
        );
        // Unacked records of this run may or may not be there; the next run sends new ones.
        next += 1000;
    }
    eprintln!(
        "{KILLS} kills; {acked_total} acknowledged records verified; {next} record numbers used"
    );
    assert!(
        acked_total > 0,
        "no run acknowledged anything: the test proved nothing"
    );

    let out = Command::new(ROAMKV)
        .args(["stats", "--json", "--data"])
        .arg(&data)
        .output()
        .expect("stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
