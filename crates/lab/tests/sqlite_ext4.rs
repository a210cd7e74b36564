//! Short traced runs on a real ext4 on a loop device: WAL mode issues fewer block writes per
//! insert than DELETE mode (paper 004's Fig. 4), and the split names the journal file's writes.
//! Needs root, loop devices and tracefs: fails without them, or skips with ROAMKV_ALLOW_SKIP=1.

use roamkv_lab::sqlite::config::{JournalMode, Op, SyncCall, Synchronous};
use roamkv_lab::sqlite::measure::{self, RunSpec};
use roamkv_testbed::fixture::{Fixture, FsSpec};

/// The tests here measure I/O and read process-wide sync counters: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh ext4 fixture, or None (after `prerequisite::unmet`, which fails the test unless
/// skipping was asked for) when this machine cannot make one.
fn ext4_or_skip(test: &str) -> Option<Fixture> {
    let unmet = |reason: &str| {
        roamkv_testbed::prerequisite::unmet(test, reason);
        None
    };
    if let Err(e) = roamkv_testbed::prerequisite::require_root() {
        return unmet(&format!("needs root (loop devices, mount, tracefs): {e}"));
    }
    if !roamkv_lab::trace::tracefs_available() {
        return unmet("tracefs with block events is unavailable");
    }
    match Fixture::create(FsSpec::Ext4, 320 << 20) {
        Ok(fx) => Some(fx),
        Err(e) => unmet(&format!("cannot create an ext4 fixture: {e}")),
    }
}

fn spec(journal_mode: JournalMode, sync_call: SyncCall) -> RunSpec {
    RunSpec {
        journal_mode,
        synchronous: Synchronous::Full,
        sync_call,
        op: Op::Insert,
        transactions: 40,
        rows_per_tx: 1,
        record_bytes: 100,
        threads: 1,
        seed: 5,
    }
}

#[test]
fn wal_issues_fewer_block_writes_per_insert_than_delete_on_ext4() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(fx) = ext4_or_skip("wal_issues_fewer_block_writes_per_insert_than_delete_on_ext4")
    else {
        return;
    };
    let delete =
        measure::run_one(&fx, &spec(JournalMode::Delete, SyncCall::Fsync)).expect("delete run");
    let wal = measure::run_one(&fx, &spec(JournalMode::Wal, SyncCall::Fsync)).expect("wal run");
    println!(
        "ext4 insert, FULL, fsync: DELETE {:.2} writes/tx ({:.0} tx/s), WAL {:.2} writes/tx ({:.0} tx/s)",
        delete.block_writes_per_tx, delete.tx_per_sec, wal.block_writes_per_tx, wal.tx_per_sec
    );
    println!(
        "DELETE immediate {:?}\nDELETE deferred {:?}",
        delete.immediate, delete.deferred
    );
    assert_eq!(delete.transactions, 40);
    assert!(
        delete.block_writes_per_tx > 0.0,
        "the tracer saw no writes: {delete:?}"
    );
    assert!(
        wal.block_writes_per_tx < delete.block_writes_per_tx,
        "WAL {:.2} writes/tx should be below DELETE {:.2}",
        wal.block_writes_per_tx,
        delete.block_writes_per_tx
    );
    // DELETE mode writes its rollback journal every transaction; WAL appends to the -wal file.
    assert!(
        delete.immediate.journal.writes >= 40,
        "DELETE journal writes: {:?}",
        delete.immediate
    );
    assert!(
        wal.immediate.journal.writes >= 40,
        "WAL log writes: {:?}",
        wal.immediate
    );
    // ext4 commits its own journal for every fsync that changed metadata.
    assert!(
        delete.immediate.fs_journal.writes > 0,
        "jbd2 writes: {:?}",
        delete.immediate
    );
    assert!(
        delete.sync_calls.fsync_calls >= 80 && delete.sync_calls.delegated_syncs == 0,
        "{:?}",
        delete.sync_calls
    );
}

#[test]
fn synchronous_off_leaves_the_writes_to_the_deferred_write_back() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(fx) = ext4_or_skip("synchronous_off_leaves_the_writes_to_the_deferred_write_back")
    else {
        return;
    };
    let run = measure::run_one(
        &fx,
        &RunSpec {
            synchronous: Synchronous::Off,
            ..spec(JournalMode::Delete, SyncCall::Fdatasync)
        },
    )
    .expect("synchronous=off run");
    println!(
        "ext4 insert, synchronous OFF: {:.2} writes/tx while running, {:.2} including syncfs",
        run.block_writes_per_tx, run.block_writes_per_tx_after_syncfs
    );
    assert_eq!(
        run.sync_calls.delegated_syncs + run.sync_calls.fsync_calls,
        0,
        "OFF never syncs"
    );
    assert!(
        run.block_writes_per_tx < 0.5,
        "nothing should reach the device before syncfs: {:?}",
        run.immediate
    );
    assert!(
        run.deferred.db.writes > 0,
        "syncfs writes the database back: {:?}",
        run.deferred
    );
    assert!(run.block_writes_per_tx_after_syncfs > run.block_writes_per_tx);
}
