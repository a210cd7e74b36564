//! The classifier replayed on block traces recorded on this project's machine
//! (`roamkv lab trace --capture FILE ...`, kernel 6.18, loop device with direct I/O).
//! Each fixture holds the raw tracefs lines and the layout (journal extents, file extents).
use roamkv_lab::trace::{Capture, Kind, Trace};

fn replay(name: &str) -> Trace {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture files are committed with the crate");
    let capture: Capture = serde_json::from_str(&text).expect("fixture is a serialised Capture");
    capture.classify()
}

/// `dd if=/dev/zero of=f bs=4k count=1 conv=fdatasync` on a fresh ext4 (data=ordered):
/// the data block, then jbd2's descriptor+metadata blocks and its commit block, with flushes.
#[test]
fn ext4_fdatasync_of_a_new_file_is_data_plus_three_journal_writes() {
    let t = replay("trace-ext4-dd-4k-fdatasync.json");
    assert_eq!(t.summary.by_kind.data.writes, 1);
    assert_eq!(t.summary.by_kind.data.bytes, 4096);
    assert_eq!(t.summary.by_file.get("f").map(|c| c.writes), Some(1));
    assert_eq!(t.summary.by_kind.fs_journal.writes, 3);
    assert_eq!(t.summary.by_kind.metadata.writes, 0);
    assert_eq!(t.summary.flushes, 2);
    // The data write comes first (ordered mode), the journal commit after it.
    let first_write = t.requests.iter().find(|r| r.op == "W").expect("has writes");
    assert_eq!(first_write.kind, Kind::Data);
    assert!(
        t.requests
            .iter()
            .filter(|r| r.kind == Kind::FsJournal)
            .all(|r| r.time_us > first_write.time_us)
    );
}

/// The same on XFS: one small log write (a few KiB), no separate metadata write.
#[test]
fn xfs_fdatasync_is_data_plus_one_small_log_write() {
    let t = replay("trace-xfs-dd-4k-fdatasync.json");
    assert_eq!(t.summary.by_kind.data.writes, 1);
    assert_eq!(t.summary.by_kind.fs_journal.writes, 1);
    assert!(
        t.summary.by_kind.fs_journal.bytes <= 4096,
        "{:?}",
        t.summary.by_kind.fs_journal
    );
    assert_eq!(t.summary.by_kind.metadata.writes, 0);
    assert!(t.summary.flushes >= 1);
}

/// The same on btrfs: no journal, but copy-on-write tree blocks (metadata is DUP, so in pairs)
/// and a superblock write; FIEMAP's logical address is mapped through the chunk tree.
#[test]
fn btrfs_fdatasync_writes_tree_blocks_and_a_superblock() {
    let t = replay("trace-btrfs-dd-4k-fdatasync.json");
    assert_eq!(t.summary.by_kind.data.writes, 1);
    assert_eq!(t.summary.by_file.get("f").map(|c| c.bytes), Some(4096));
    assert_eq!(t.summary.by_kind.fs_journal.writes, 0);
    assert!(
        t.summary.by_kind.metadata.writes >= 3,
        "{:?}",
        t.summary.by_kind.metadata
    );
    // The btrfs superblock lives at 64 KiB = sector 128.
    assert!(
        t.requests
            .iter()
            .any(|r| r.kind == Kind::Metadata && r.lba == 128)
    );
}

/// A rollback-journal-like sequence: write+fsync `db-journal`, overwrite one block of `db` with
/// fdatasync, delete `db-journal`. The deleted file's write is still named.
#[test]
fn writes_to_a_file_deleted_during_the_trace_are_still_named() {
    let t = replay("trace-ext4-deleted-journal.json");
    let journal = t
        .summary
        .by_file
        .get("db-journal (deleted)")
        .copied()
        .unwrap_or_default();
    assert_eq!(journal.bytes, 16384, "{:?}", t.summary.by_file);
    assert_eq!(t.summary.by_file.get("db").map(|c| c.writes), Some(1));
    // The overwrite needs no journal commit with fdatasync: only the first fsync commits.
    let db_write = t
        .requests
        .iter()
        .find(|r| r.file.as_deref() == Some("db"))
        .expect("db written");
    assert!(
        !t.requests
            .iter()
            .any(|r| r.kind == Kind::FsJournal && r.time_us > db_write.time_us)
    );
}

/// Events before the trace start (leaked writeback) are dropped, not counted.
#[test]
fn events_before_start_are_ignored() {
    let path = format!(
        "{}/tests/fixtures/trace-ext4-dd-4k-fdatasync.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture present");
    let mut capture: Capture = serde_json::from_str(&text).expect("valid fixture");
    let full = capture.classify().requests.len();
    capture.start_ns = u64::MAX / 2;
    assert_eq!(capture.classify().requests.len(), 0);
    assert!(full > 0);
}
