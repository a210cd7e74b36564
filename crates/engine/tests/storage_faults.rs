//! Storage faults, injected through the storage seam (tests/common/fault_storage.rs): EIO on a
//! write or an fdatasync, ENOSPC while making a segment, short writes, a panic inside a group
//! commit, and the power-cut orderings the commit log relies on.

mod common;

use std::sync::Arc;

use common::fault_storage::{FaultFs, Op};
use common::*;
use roamkv_engine::{Durability, Engine, Error, ManualClock, Options};

fn open_on(dir: &std::path::Path, fs: &FaultFs, clock: &Arc<ManualClock>, d: Durability) -> Engine {
    Engine::open(
        dir,
        Options {
            durability: d,
            storage: fs.storage(),
            ..options(clock)
        },
    )
    .expect("open")
}

#[test]
fn eio_on_a_log_write_poisons_the_engine_naming_file_and_operation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fs, clock) = (FaultFs::new(1 << 30), clock());
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    engine.put("car", "speed", 1, b"before").expect("put");
    fs.fail_nth(Op::Write, 1, libc::EIO);
    let err = engine.put("car", "speed", 2, b"fails").expect_err("EIO");
    let text = err.to_string();
    assert!(text.contains("writing") && text.contains(".seg"), "{text}");
    // Every later write fails too, even though the storage works again: the file's state is
    // unknown, nothing is retried into success.
    let later = engine
        .put("car", "speed", 3, b"later")
        .expect_err("poisoned");
    assert!(matches!(later, Error::Poisoned(_)), "{later}");
    // Reads go on.
    assert_eq!(
        engine.get("car", "speed", 1).expect("get"),
        Some(b"before".to_vec())
    );
    engine.abandon();
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    assert_eq!(
        engine.get("car", "speed", 1).expect("get"),
        Some(b"before".to_vec())
    );
    assert_eq!(engine.get("car", "speed", 3).expect("get"), None);
}

#[test]
fn a_failed_fdatasync_is_never_retried_as_success() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fs, clock) = (FaultFs::new(1 << 30), clock());
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    engine.put("car", "speed", 1, b"durable").expect("put");
    // The kernel drops the pages it could not write; a second fdatasync would "succeed".
    fs.fail_nth(Op::Sync, 1, libc::EIO);
    let err = engine
        .put("car", "speed", 2, b"lost")
        .expect_err("fdatasync fails");
    assert!(err.to_string().contains("fdatasync"), "{err}");
    let later = engine
        .put("car", "speed", 3, b"after")
        .expect_err("poisoned");
    assert!(matches!(later, Error::Poisoned(_)), "{later}");
    engine.abandon();
    fs.power_cut(&mut rand::SeedableRng::seed_from_u64(1));
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    assert_eq!(
        engine.get("car", "speed", 1).expect("get"),
        Some(b"durable".to_vec())
    );
    for ts in [2, 3] {
        assert_eq!(
            engine.get("car", "speed", ts).expect("get"),
            None,
            "ts {ts}"
        );
    }
}

#[test]
fn enospc_while_making_a_segment_is_no_space_not_poison() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fs, clock) = (FaultFs::new(1 << 30), clock());
    let engine = Engine::open(
        dir.path(),
        Options {
            storage: fs.storage(),
            write_stall_ms_max: 50,
            ..options(&clock)
        },
    )
    .expect("open");
    // The first segment exists; leave room for nothing more.
    fs.set_capacity(fs.used_bytes() + 4096);
    let value = vec![7u8; 4000];
    let mut no_space = None;
    for ts in 0..400 {
        if let Err(e) = engine.put("car", "cam", ts, &value) {
            no_space = Some((ts, e));
            break;
        }
    }
    let (stopped_at, err) = no_space.expect("the file system fills");
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert!(err.is_retryable());
    // Not poisoned: reads work, and writes resume once there is space.
    assert!(engine.get("car", "cam", 0).expect("get").is_some());
    fs.set_capacity(1 << 30);
    engine
        .put("car", "cam", stopped_at, &value)
        .expect("space came back");
    engine.close().expect("close");
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    assert_eq!(
        engine
            .scan("car", Some("cam"), 0, i64::MAX)
            .expect("scan")
            .len() as i64,
        stopped_at + 1
    );
}

#[test]
fn short_writes_are_completed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fs, clock) = (FaultFs::new(1 << 30), clock());
    fs.set_short_writes(true);
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    for ts in 0..200 {
        engine
            .put("car", "s", ts, &value("car", "s", ts, 3000))
            .expect("put");
    }
    engine.close().expect("close");
    fs.power_cut(&mut rand::SeedableRng::seed_from_u64(2));
    let engine = open_on(dir.path(), &fs, &clock, Durability::Sync);
    for ts in 0..200 {
        assert_eq!(
            engine.get("car", "s", ts).expect("get"),
            Some(value("car", "s", ts, 3000))
        );
    }
}

#[test]
fn a_panic_inside_a_group_commit_poisons_instead_of_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let opts = options(&clock);
    let fail_points = Arc::clone(&opts.fail_points);
    let engine = Engine::open(dir.path(), opts).expect("open");
    engine.put("car", "s", 1, b"ok").expect("put");
    fail_points.panic_in_next_group_commit();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = engine.put("car", "s", 2, b"boom");
    }));
    assert!(panicked.is_err());
    // Before the fix this write waited forever for a leader that had died.
    let err = engine.put("car", "s", 3, b"after").expect_err("poisoned");
    assert!(matches!(err, Error::Poisoned(_)), "{err}");
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.get("car", "s", 1).expect("get"),
        Some(b"ok".to_vec())
    );
}

/// In `none` mode nothing is fdatasync'd per commit, not even when the log moves to the next
/// segment: a power cut may keep the new segment's pages and lose the old one's. Recovery then
/// cuts the log at the first hole, across segments: what comes back is a prefix of what was
/// written (no hole), and the later segment's records, never durable, are gone.
#[test]
fn a_power_cut_that_keeps_a_later_segment_cuts_at_the_earlier_hole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (fs, clock) = (FaultFs::new(1 << 30), clock());
    let engine = open_on(dir.path(), &fs, &clock, Durability::None);
    let value = vec![3u8; 3000];
    let mut ts = 0;
    while engine.stats().live_segments < 2 {
        engine.put("car", "s", ts, &value).expect("put");
        ts += 1;
    }
    engine.put("car", "s", ts, &value).expect("put");
    engine.abandon();
    // Keep segment 2's unsynced pages, lose segment 1's.
    fs.power_cut_keeping("00000000000000000002.seg");
    let engine = open_on(dir.path(), &fs, &clock, Durability::None);
    let got = engine.scan("car", Some("s"), 0, i64::MAX).expect("scan");
    let times: Vec<i64> = got.iter().map(|r| r.ts_ns).collect();
    assert_eq!(
        times,
        (0..times.len() as i64).collect::<Vec<_>>(),
        "no hole"
    );
    assert!(
        (times.len() as i64) < ts,
        "segment 1 lost its unsynced pages"
    );
    let cut = engine.stats().recovery_cut.expect("the cut is reported");
    assert!(cut.contains("00000000000000000001.seg"), "{cut}");
    // The log goes on from the cut: new writes survive a reopen.
    engine.put("car", "s", 1_000_000, b"after").expect("put");
    drop(engine);
    let engine = open_on(dir.path(), &fs, &clock, Durability::None);
    assert_eq!(
        engine.get("car", "s", 1_000_000).expect("get"),
        Some(b"after".to_vec())
    );
}
