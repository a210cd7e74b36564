//! Renames of log segments are durable before anything depends on them, at the system-call
//! level: a segment retired out of the log is followed by an fsync of the log directory before
//! the next retirement, and a segment taken for reuse is renamed and the directory fsync'd
//! before its header is rewritten. Without these, a power cut could leave a retired segment
//! back in the log (a gap in the live log) or a live name over a reused file.

use std::process::{Command, Stdio};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

/// Readings of many devices: with a management time of 0 each settles at once, so segments
/// retire and are recycled while the load runs.
fn lines(n: u64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"device\":\"car-{}\",\"sensor\":\"s\",\"ts\":{i},\"value\":\"{}\"}}\n",
                i % 50,
                "x".repeat(900)
            )
        })
        .collect()
}

/// One process's calls, in order: (call name, the line).
fn calls_by_pid(trace: &str) -> std::collections::HashMap<String, Vec<(String, String)>> {
    let mut by_pid: std::collections::HashMap<String, Vec<(String, String)>> = Default::default();
    for line in trace.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(name) = rest.split('(').next() else {
            continue;
        };
        by_pid
            .entry(pid.to_string())
            .or_default()
            .push((name.to_string(), rest.to_string()));
    }
    by_pid
}

/// The last quoted path of a rename line (its target).
fn rename_target(line: &str) -> &str {
    line.rsplit('"').nth(1).unwrap_or("")
}

#[test]
fn segment_renames_are_made_durable_before_they_matter() {
    if !roamkv_testbed::prerequisite::tool_runs("strace", "-V") {
        roamkv_testbed::prerequisite::unmet(
            "segment_renames_are_made_durable_before_they_matter",
            "strace is not installed (scripts/install-deps installs it)",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("strace.txt");
    let mut child = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=rename,renameat,renameat2,fsync,pwrite64",
        ])
        .arg("-o")
        .arg(&trace)
        .arg(ROAMKV)
        .args([
            "load",
            "--segment-mib",
            "1",
            "--management-time-ms",
            "0",
            "--durability",
            "none",
            "--data",
        ])
        .arg(dir.path().join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn strace");
    let input = lines(40_000);
    let mut stdin = child.stdin.take().expect("stdin");
    // Feed in slices with pauses, so that maintenance runs (and retires) during the load.
    for chunk in input.as_bytes().chunks(2 << 20) {
        std::io::Write::write_all(&mut stdin, chunk).expect("feed");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let text = std::fs::read_to_string(&trace).expect("strace output");
    let (mut retired, mut recycled) = (0, 0);
    for calls in calls_by_pid(&text).values() {
        for (i, (name, line)) in calls.iter().enumerate() {
            if !name.starts_with("rename") {
                continue;
            }
            let target = rename_target(line);
            let before = |stop: &str| {
                calls[i + 1..]
                    .iter()
                    .take_while(|(n, _)| !n.starts_with(stop))
                    .any(|(n, _)| n == "fsync")
            };
            if target.ends_with(".seg.retired") {
                retired += 1;
                assert!(
                    before("rename"),
                    "retirement not made durable before the next rename: {line}"
                );
            } else if target.ends_with(".seg.recycling") {
                recycled += 1;
                assert!(
                    before("pwrite64"),
                    "reuse rename not made durable before the header write: {line}"
                );
            }
        }
    }
    assert!(
        retired >= 2 && recycled >= 1,
        "the load must retire and recycle segments for this test to mean anything ({retired} retired, {recycled} recycled)"
    );
}
