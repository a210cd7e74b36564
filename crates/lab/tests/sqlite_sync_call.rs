//! The fsync/fdatasync switch of the SQLite VFS shim is real: counted in the shim, and seen by the
//! kernel (strace of a child process running the same workload).

use std::path::Path;
use std::process::Command;

use roamkv_lab::sqlite::config::{JournalMode, Op, SyncCall, Synchronous};
use roamkv_lab::sqlite::vfs::SyncCounts;
use roamkv_lab::sqlite::workload::{self, DbConfig, StreamSpec};

const CHILD_CALL_ENV: &str = "ROAMKV_SYNC_CHILD_CALL";
const CHILD_DIR_ENV: &str = "ROAMKV_SYNC_CHILD_DIR";
const INSERTS: usize = 5;

/// Five autocommit inserts in DELETE mode, synchronous FULL: each one syncs journal and database.
fn five_inserts(dir: &Path, call: SyncCall) {
    let config = DbConfig {
        journal_mode: JournalMode::Delete,
        synchronous: Synchronous::Full,
        sync_call: call,
    };
    let conn = workload::open(&dir.join("sync.db"), config).expect("open database");
    let spec = StreamSpec {
        op: Op::Insert,
        transactions: INSERTS,
        rows_per_tx: 1,
        record_bytes: 100,
        seed: 1,
    };
    workload::run_stream(&conn, &spec).expect("run inserts");
}

// One test does both modes in sequence: the counters are process-wide, so no other test in this
// binary may run SQLite concurrently with it.
#[test]
fn shim_counts_the_call_it_makes_in_each_mode() {
    let dir = tempfile::tempdir().expect("tempdir");

    let before = SyncCounts::read();
    five_inserts(dir.path(), SyncCall::Fsync);
    let fsync_mode = SyncCounts::read().delta(&before);
    // DELETE mode + FULL: at least journal sync + database sync per insert.
    assert!(
        fsync_mode.fsync_calls >= 2 * INSERTS as u64,
        "fsync mode: {fsync_mode:?}"
    );
    assert_eq!(
        fsync_mode.delegated_syncs, 0,
        "fsync mode must not delegate: {fsync_mode:?}"
    );

    let before = SyncCounts::read();
    five_inserts(&dir.path().join("."), SyncCall::Fdatasync);
    let fdatasync_mode = SyncCounts::read().delta(&before);
    assert_eq!(
        fdatasync_mode.fsync_calls, 0,
        "fdatasync mode: {fdatasync_mode:?}"
    );
    assert!(
        fdatasync_mode.delegated_syncs >= 2 * INSERTS as u64,
        "fdatasync mode: {fdatasync_mode:?}"
    );
}

/// Runs in a child under strace (ignored when run directly).
#[test]
#[ignore = "child process of kernel_sees_the_selected_sync_call"]
fn sync_child() {
    let (Ok(call), Ok(dir)) = (std::env::var(CHILD_CALL_ENV), std::env::var(CHILD_DIR_ENV)) else {
        return;
    };
    let call: SyncCall = call.parse().expect("child sync call");
    five_inserts(Path::new(&dir), call);
}

fn strace_counts(call: SyncCall) -> Option<(usize, usize)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("strace.log");
    let exe = std::env::current_exe().expect("test binary path");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&log)
        .arg(&exe)
        .args(["sync_child", "--exact", "--ignored", "--test-threads=1"])
        .env(CHILD_CALL_ENV, call.name())
        .env(CHILD_DIR_ENV, dir.path())
        .output();
    let output = match status {
        Ok(o) => o,
        Err(e) => {
            roamkv_testbed::prerequisite::unmet(
                "kernel_sees_the_selected_sync_call",
                &format!("cannot run strace ({e}); apt-get install strace"),
            );
            return None;
        }
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("PTRACE")
            || stderr.contains("ptrace")
            || stderr.contains("Operation not permitted")
        {
            roamkv_testbed::prerequisite::unmet(
                "kernel_sees_the_selected_sync_call",
                &format!("ptrace not permitted here ({})", stderr.trim()),
            );
            return None;
        }
        panic!(
            "child under strace failed ({}); stderr:\n{stderr}\nlog:\n{text}",
            output.status
        );
    }
    let fsyncs = text
        .lines()
        .filter(|l| l.contains(" fsync(") || l.starts_with("fsync("))
        .count();
    let fdatasyncs = text.lines().filter(|l| l.contains("fdatasync(")).count();
    Some((fsyncs, fdatasyncs))
}

#[test]
fn kernel_sees_the_selected_sync_call() {
    let Some((fsyncs, fdatasyncs)) = strace_counts(SyncCall::Fsync) else {
        return;
    };
    assert!(
        fsyncs >= 2 * INSERTS,
        "fsync mode: strace saw {fsyncs} fsync, {fdatasyncs} fdatasync"
    );
    assert_eq!(
        fdatasyncs, 0,
        "fsync mode: strace saw {fdatasyncs} fdatasync calls"
    );

    let Some((fsyncs, fdatasyncs)) = strace_counts(SyncCall::Fdatasync) else {
        return;
    };
    // This repository builds SQLite with -DHAVE_FDATASYNC=1 (.cargo/config.toml); without it
    // SQLite's unix VFS would call fsync here and this assertion would say so.
    assert!(
        fdatasyncs >= 2 * INSERTS,
        "fdatasync mode: strace saw {fsyncs} fsync, {fdatasyncs} fdatasync"
    );
    assert_eq!(fsyncs, 0, "fdatasync mode: strace saw {fsyncs} fsync calls");
}
