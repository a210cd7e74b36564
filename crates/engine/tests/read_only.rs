//! `Options::read_only`: an existing directory opened without writing to it. Its readings are
//! all there (log and lower tier), a torn tail is read around rather than cut, every write is
//! refused, a directory open for writing is refused, and nothing in the directory changes: no
//! file made, removed, grown or touched (the tools that only read, `roamkv stats --data` ...).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use common::*;
use roamkv_engine::limits::SEGMENT_HEADER_BYTES;
use roamkv_engine::{Engine, Error, LowerTierKind, Options};

/// Every entry below `root`: kind, size, mode and mtime.
fn listing(root: &Path) -> BTreeMap<String, (u32, u64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("ls") {
            let path = entry.expect("entry").path();
            let m = std::fs::symlink_metadata(&path).expect("stat");
            let size = if m.is_dir() { 0 } else { m.size() };
            let name = path
                .strip_prefix(root)
                .expect("below")
                .display()
                .to_string();
            out.insert(name, (m.mode(), size, m.mtime(), m.mtime_nsec()));
            if m.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

fn read_only(clock: &std::sync::Arc<roamkv_engine::ManualClock>) -> Options {
    Options {
        read_only: true,
        ..options(clock)
    }
}

/// car-1 settled into the lower tier, car-2 in the log; closed.
fn populated(dir: &Path, lower: LowerTierKind) {
    let clock = clock();
    let engine = open_with(dir, &clock, lower);
    for ts in 0..20 {
        engine
            .put("car-1", "speed", ts, &value("car-1", "speed", ts, 50))
            .expect("put");
    }
    settle(&engine, &clock);
    for ts in 0..20 {
        engine
            .put("car-2", "speed", ts, &value("car-2", "speed", ts, 50))
            .expect("put");
    }
    engine.close().expect("close");
}

#[test]
fn a_read_only_open_reads_everything_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    populated(dir.path(), LowerTierKind::RocksDb);
    let before = listing(dir.path());
    let clock = clock();
    let engine = Engine::open(dir.path(), read_only(&clock)).expect("open read-only");
    let car_1 = engine.devices().into_iter().find(|d| d.name == "car-1");
    assert!(
        car_1.is_some_and(|d| d.lower_runs > 0),
        "car-1 is not in the lower tier"
    );
    for device in ["car-1", "car-2"] {
        let readings = engine.scan(device, None, i64::MIN, i64::MAX).expect("scan");
        assert_eq!(readings.len(), 20, "{device}");
        assert_eq!(engine.latest(device, None).expect("latest")[0].ts_ns, 19);
    }
    let _ = engine.stats();
    assert!(matches!(
        engine.put("car-3", "speed", 1, b"x"),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(engine.depart("car-1"), Err(Error::ReadOnly(_))));
    assert!(matches!(
        engine.trim_before("car-1", 5),
        Err(Error::ReadOnly(_))
    ));
    assert!(matches!(engine.maintain(), Err(Error::ReadOnly(_))));
    assert!(matches!(engine.snapshot(&[]), Err(Error::ReadOnly(_))));
    // A second reader shares the directory; a writer is refused while they read.
    let second = Engine::open(dir.path(), read_only(&clock)).expect("a second reader");
    assert!(matches!(
        Engine::open(dir.path(), options(&clock)),
        Err(Error::Locked { .. })
    ));
    drop(second);
    engine.close().expect("close");
    assert_eq!(
        before,
        listing(dir.path()),
        "the read-only open changed the directory"
    );
    let report = roamkv_engine::check(dir.path()).expect("check");
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(before, listing(dir.path()), "check changed the directory");
}

#[test]
fn a_directory_open_for_writing_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    populated(dir.path(), LowerTierKind::RocksDb);
    let clock = clock();
    let writer = open(dir.path(), &clock);
    assert!(matches!(
        Engine::open(dir.path(), read_only(&clock)),
        Err(Error::Locked { .. })
    ));
    drop(writer);
}

#[test]
fn a_torn_tail_is_read_around_and_left_for_the_next_writer_to_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    populated(dir.path(), LowerTierKind::RocksDb);
    // The last segment holding records (spares after it are empty past their header).
    let header = SEGMENT_HEADER_BYTES as usize;
    let (segment, end) = segment_files(dir.path())
        .into_iter()
        .rev()
        .find_map(|path| {
            let data = std::fs::read(&path).expect("read");
            let end = data[header..].iter().rposition(|&b| b != 0)? + header + 1;
            Some((path, end as u64))
        })
        .expect("a segment with records");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open");
    file.write_all_at(&[0u8; 30], end - 30).expect("tear");
    drop(file);
    let before = listing(dir.path());
    let torn = std::fs::read(&segment).expect("read");

    let clock = clock();
    let engine = Engine::open(dir.path(), read_only(&clock)).expect("open read-only");
    let readings = engine
        .scan("car-2", None, i64::MIN, i64::MAX)
        .expect("scan");
    assert_eq!(readings.len(), 19, "all but the torn reading");
    engine.close().expect("close");
    assert_eq!(before, listing(dir.path()));
    assert_eq!(
        torn,
        std::fs::read(&segment).expect("read"),
        "the segment was written"
    );

    let engine = open(dir.path(), &clock);
    assert!(engine.stats().recovery_cut.is_some(), "the writer cuts it");
}

#[test]
fn a_leveldb_directory_cannot_be_opened_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    populated(dir.path(), LowerTierKind::LevelDb);
    let before = listing(dir.path());
    match Engine::open(dir.path(), read_only(&clock())) {
        Err(Error::ReadOnly(why)) => assert!(why.contains("LevelDB"), "{why}"),
        other => panic!("expected ReadOnly, got {:?}", other.map(|_| ())),
    }
    assert_eq!(before, listing(dir.path()));
}
