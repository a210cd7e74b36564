//! docs/PROPERTIES.md property 4 at the system-call level: once the log is warm, a commit is one
//! pwrite (pwritev: the writers' buffers as they are) into the preallocated segment and one
//! fdatasync of it — no file growth, creation, rename,
//! fallocate or fsync on the commit path. (docs/LAB.md measures the same at the block layer.)

use std::process::{Command, Stdio};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

fn lines(from: u64, to: u64) -> String {
    (from..to)
        .map(|i| {
            format!(
                "{{\"device\":\"car-{}\",\"sensor\":\"s\",\"ts\":{i},\"value\":\"{}\"}}\n",
                i % 3,
                "x".repeat(100)
            )
        })
        .collect()
}

fn load(data: &std::path::Path, input: &str, extra: &[&str], strace_out: Option<&std::path::Path>) {
    let mut command = match strace_out {
        Some(out) => {
            let mut c = Command::new("strace");
            c.args(["-f", "-qq", "-e", "trace=pwrite64,pwritev,pwritev2,write,fdatasync,fsync,ftruncate,fallocate,rename,renameat,renameat2,openat"])
                .arg("-o")
                .arg(out)
                .arg(ROAMKV);
            c
        }
        None => Command::new(ROAMKV),
    };
    command
        .args(["load", "--segment-mib", "4", "--data"])
        .arg(data)
        .args(extra);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.as_bytes())
        .expect("feed");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "load failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A positional write, plain or vectored.
fn is_pwrite(line: &str) -> bool {
    ["pwrite64(", "pwritev(", "pwritev2("]
        .iter()
        .any(|call| line.starts_with(call))
}

#[test]
fn a_warm_commit_is_one_pwrite_and_one_fdatasync() {
    if !roamkv_testbed::prerequisite::tool_runs("strace", "-V") {
        roamkv_testbed::prerequisite::unmet(
            "a_warm_commit_is_one_pwrite_and_one_fdatasync",
            "strace is not installed (scripts/install-deps installs it)",
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    load(&data, &lines(0, 2000), &[], None);
    let trace = dir.path().join("strace.txt");
    let commits = 10;
    load(
        &data,
        &lines(2000, 2000 + commits),
        &["--batch", "1"],
        Some(&trace),
    );

    let text = std::fs::read_to_string(&trace).expect("strace output");
    // The segment's file descriptor: the one openat returned for a .seg file.
    let all: Vec<&str> = text.lines().collect();
    let opened_at = all
        .iter()
        .position(|l| l.contains(".seg\"") && l.contains("openat"))
        .expect("the segment was opened");
    let segment_fd = all[opened_at]
        .rsplit("= ")
        .next()
        .and_then(|fd| fd.trim().parse::<i32>().ok())
        .expect("openat returned a descriptor");
    // Descriptor numbers are reused: count only what happens after the segment was opened, and
    // from the first commit on (open fdatasyncs what it recovered once, before any commit).
    let on_segment: Vec<&str> = all[opened_at + 1..]
        .iter()
        .copied()
        .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest.trim_start()))
        .filter(|l| {
            l.contains(&format!("({segment_fd},")) || l.contains(&format!("({segment_fd})"))
        })
        .skip_while(|l| !is_pwrite(l))
        .collect();
    let pwrites = on_segment.iter().filter(|l| is_pwrite(l)).count();
    let fdatasyncs = on_segment
        .iter()
        .filter(|l| l.starts_with("fdatasync("))
        .count();
    let others: Vec<&&str> = on_segment
        .iter()
        .filter(|l| !is_pwrite(l) && !l.starts_with("fdatasync("))
        .collect();
    assert_eq!(pwrites, commits as usize, "{on_segment:#?}");
    assert_eq!(fdatasyncs, commits as usize, "{on_segment:#?}");
    assert!(
        others.is_empty(),
        "other calls on the segment's commit path: {others:#?}"
    );
    // And nothing on the whole process grew, created or renamed a log file.
    assert!(
        !text
            .lines()
            .any(|l| l.contains(".seg") && (l.contains("rename") || l.contains("O_CREAT"))),
        "a segment was created or renamed during warm commits:\n{text}"
    );
}
