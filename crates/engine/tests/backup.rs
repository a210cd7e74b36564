//! Backups of an open engine (`Engine::snapshot`, `backup::*`): a backup holds every reading
//! written before it and nothing after, with readings in the log and in the lower tier, on both
//! lower tiers; its segments stay while maintenance would retire them; a restore makes a
//! directory that opens, passes `check` and is a new history of the log; a second backup copies
//! only what is new; a damaged, truncated or partial backup is refused naming the file; nothing
//! is ever written over; the lower tier's table files are hard-linked into a set on the data
//! directory's file system and copied into one on another, and segments are always copied.

mod common;

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{clock, open_with, settle, value};
use roamkv_engine::backup::{self, BackupSet, Manifest};
use roamkv_engine::{Engine, LowerTierKind, Record};

const PER_BATCH: usize = 10;
const VALUE_BYTES: usize = 1024;

/// Writes batches `from..to` of `device`: batch b holds ts b*PER_BATCH .. (b+1)*PER_BATCH.
fn write(engine: &Engine, device: &str, from: usize, to: usize) {
    for b in from..to {
        let values: Vec<(i64, Vec<u8>)> = (0..PER_BATCH)
            .map(|i| {
                let ts = (b * PER_BATCH + i) as i64;
                (ts, value(device, "s", ts, VALUE_BYTES))
            })
            .collect();
        let records: Vec<Record<'_>> = values
            .iter()
            .map(|(ts, v)| Record {
                device,
                sensor: "s",
                ts_ns: *ts,
                value: v,
            })
            .collect();
        engine.put_batch(&records).expect("put");
    }
}

/// Asserts the device holds exactly batches 0..batches, each value as written.
fn assert_holds(engine: &Engine, device: &str, batches: usize) {
    let readings = engine.scan(device, None, 0, i64::MAX).expect("scan");
    assert_eq!(
        readings.len(),
        batches * PER_BATCH,
        "{device}: {} readings, {batches} batches expected",
        readings.len()
    );
    for (i, r) in readings.iter().enumerate() {
        assert_eq!(r.ts_ns, i as i64);
        assert_eq!(
            r.value,
            value(device, "s", r.ts_ns, VALUE_BYTES),
            "{device} ts {i}"
        );
    }
}

/// Writes, lets readings leave the log, writes more, takes a snapshot and backs it up while
/// writes and maintenance go on after it; returns the manifest and the original's log id.
fn back_up_during_work(
    engine: &Engine,
    set: &BackupSet,
    clock: &roamkv_engine::ManualClock,
) -> (Manifest, u64) {
    write(engine, "a", 0, 30);
    write(engine, "b", 0, 30);
    write(engine, "c", 0, 30);
    settle(engine, clock);
    write(engine, "a", 30, 40);
    write(engine, "b", 30, 40);
    engine.depart("c").expect("depart");
    let snapshot = engine.snapshot(&["server"]).expect("snapshot");
    // After the snapshot: not in the backup. Maintenance retires what it can meanwhile, but
    // not the segments the snapshot holds.
    write(engine, "a", 40, 80);
    settle(engine, clock);
    write(engine, "d", 0, 3);
    let manifest = backup::to_set(&snapshot, set).expect("to_set").manifest;
    drop(snapshot);
    (manifest, engine.feed().status().log_id)
}

#[test]
fn a_restored_backup_holds_what_was_written_before_it_and_nothing_after_on_both_tiers() {
    for lower in [LowerTierKind::RocksDb, LowerTierKind::LevelDb] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let clock = clock();
        let engine = open_with(&data, &clock, lower);
        std::fs::create_dir_all(data.join("server")).expect("mkdir");
        std::fs::write(data.join("server/edge.json"), b"{\"x\":1}").expect("write");
        let set = BackupSet::open_or_create(&tmp.path().join("set")).expect("set");
        let (manifest, log_id) = back_up_during_work(&engine, &set, &clock);
        assert_eq!(manifest.backup, 1);
        assert_eq!(
            manifest.bytes, manifest.bytes_copied,
            "a first backup copies all"
        );
        assert!(
            manifest.files.iter().any(|f| f.name.starts_with("lower/")),
            "{lower:?}: the lower tier is in the backup"
        );
        assert!(std::fs::read_dir(data.join("backup")).is_ok_and(|mut d| d.next().is_none()));
        drop(engine);

        let restored = tmp.path().join("restored");
        let done = backup::restore(&set, None, &restored).expect("restore");
        assert_eq!(done.backup, 1);
        let report = roamkv_engine::check(&restored).expect("check");
        assert!(
            report.problems.is_empty(),
            "{lower:?}: {:?}",
            report.problems
        );
        assert_eq!(
            std::fs::read(restored.join("server/edge.json")).expect("server file"),
            b"{\"x\":1}"
        );
        let engine = open_with(&restored, &clock, lower);
        assert_holds(&engine, "a", 40);
        assert_holds(&engine, "b", 40);
        assert!(
            engine
                .scan("c", None, 0, i64::MAX)
                .expect("scan")
                .is_empty(),
            "c departed"
        );
        assert!(
            engine
                .scan("d", None, 0, i64::MAX)
                .expect("scan")
                .is_empty(),
            "d came after"
        );
        assert_ne!(
            engine.feed().status().log_id,
            log_id,
            "a restore is a new history"
        );
        // It takes writes and maintenance as any directory does.
        write(&engine, "a", 40, 45);
        settle(&engine, &clock);
        assert_holds(&engine, "a", 45);
    }
}

#[test]
fn a_second_backup_copies_only_what_the_set_does_not_hold() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let clock = clock();
    let engine = open_with(&data, &clock, LowerTierKind::RocksDb);
    let set = BackupSet::open_or_create(&tmp.path().join("set")).expect("set");
    let (first, _) = back_up_during_work(&engine, &set, &clock);
    write(&engine, "e", 0, 5);
    let snapshot = engine.snapshot(&[]).expect("snapshot");
    let second = backup::to_set(&snapshot, &set).expect("second").manifest;
    drop(snapshot);
    assert_eq!(second.backup, 2);
    let taken: u64 = second
        .files
        .iter()
        .filter(|f| f.stored_in == 1)
        .map(|f| f.bytes)
        .sum();
    let copied: u64 = second
        .files
        .iter()
        .filter(|f| f.stored_in == 2)
        .map(|f| f.bytes)
        .sum();
    assert_eq!(copied, second.bytes_copied);
    assert_eq!(taken + copied, second.bytes);
    assert!(taken > 0, "nothing taken from backup 1: {second:?}");
    assert!(
        second.bytes_copied < first.bytes_copied,
        "backup 2 copied {} bytes, backup 1 {}",
        second.bytes_copied,
        first.bytes_copied
    );
    // Every copy on disk is in the backup that copied it, and nothing more.
    let stored: u64 = walk_bytes(&set.backup_dir(2).join(backup::FILES_DIR));
    assert_eq!(stored, second.bytes_copied);
    drop(engine);
    let restored = tmp.path().join("restored");
    backup::restore(&set, Some(2), &restored).expect("restore 2");
    let engine = open_with(&restored, &clock, LowerTierKind::RocksDb);
    assert_holds(&engine, "a", 80);
    assert_holds(&engine, "e", 5);
    let verified = backup::verify(&set).expect("verify");
    assert!(verified.iter().all(|v| v.outcome.is_ok()), "{verified:?}");
}

fn walk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| {
            let e = e.expect("entry");
            if e.file_type().expect("type").is_dir() {
                walk_bytes(&e.path())
            } else {
                e.metadata().expect("stat").len()
            }
        })
        .sum()
}

/// A set with one complete backup of a few devices.
fn one_backup(tmp: &Path) -> (BackupSet, Manifest) {
    let clock = clock();
    let engine = open_with(&tmp.join("data"), &clock, LowerTierKind::RocksDb);
    let set = BackupSet::open_or_create(&tmp.join("set")).expect("set");
    let (manifest, _) = back_up_during_work(&engine, &set, &clock);
    (set, manifest)
}

#[test]
fn a_damaged_truncated_or_partial_backup_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (set, manifest) = one_backup(tmp.path());
    let segment = manifest
        .files
        .iter()
        .find(|f| f.kind == "segment")
        .expect("a segment");
    let stored = set.object_path(segment);
    let original = std::fs::read(&stored).expect("read");

    // A byte flipped.
    let mut flipped = original.clone();
    flipped[5000] ^= 0x40;
    std::fs::write(&stored, &flipped).expect("write");
    let target = tmp.path().join("restored");
    let e = backup::restore(&set, None, &target).expect_err("a flipped byte");
    assert!(e.to_string().contains(&stored.display().to_string()), "{e}");
    assert!(e.to_string().contains("crc32c"), "{e}");
    assert!(!target.exists() && !tmp.path().join(".restored.restoring").exists());
    let verified = backup::verify(&set).expect("verify");
    let why = verified[0]
        .outcome
        .as_ref()
        .expect_err("damage found")
        .to_string();
    assert!(why.contains(&stored.display().to_string()), "{why}");

    // Truncated.
    std::fs::write(&stored, &original[..original.len() / 2]).expect("write");
    let e = backup::restore(&set, None, &target).expect_err("a truncated file");
    assert!(e.to_string().contains("truncated"), "{e}");
    std::fs::write(&stored, &original).expect("write");

    // A manifest changed by hand.
    let manifest_path = set.backup_dir(1).join(backup::MANIFEST_FILE);
    let text = std::fs::read_to_string(&manifest_path).expect("manifest");
    std::fs::write(
        &manifest_path,
        text.replacen("\"bytes\": ", "\"bytes\": 1", 1),
    )
    .expect("write");
    let e = backup::restore(&set, Some(1), &target).expect_err("an edited manifest");
    assert!(e.to_string().contains("manifest.json"), "{e}");
    std::fs::write(&manifest_path, text).expect("write");

    // Partial: killed before its manifest.
    std::fs::create_dir_all(set.backup_dir(2).join(backup::FILES_DIR)).expect("mkdir");
    let e = backup::restore(&set, Some(2), &target).expect_err("a partial backup");
    assert!(e.to_string().contains("partial"), "{e}");
    assert!(backup::verify(&set).expect("verify")[1].outcome.is_err());
    // Without a number, the newest complete backup is restored.
    assert_eq!(
        backup::restore(&set, None, &target)
            .expect("restore")
            .backup,
        1
    );
    // The next backup removes the partial one and takes its number.
    assert_eq!(set.begin().expect("begin").number(), 2);
}

#[test]
fn nothing_is_written_over() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (set, _) = one_backup(tmp.path());
    let occupied = tmp.path().join("occupied");
    std::fs::create_dir_all(&occupied).expect("mkdir");
    std::fs::write(occupied.join("keep"), b"mine").expect("write");
    let e = backup::restore(&set, None, &occupied).expect_err("a directory with files");
    assert!(e.to_string().contains("never overwrites"), "{e}");
    assert_eq!(std::fs::read(occupied.join("keep")).expect("kept"), b"mine");
    let e = BackupSet::open_or_create(&occupied).expect_err("not a set");
    assert!(e.to_string().contains("not a backup set"), "{e}");
    assert_eq!(std::fs::read_dir(&occupied).expect("ls").count(), 1);
    // An empty directory is taken.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    backup::restore(&set, None, &empty).expect("restore into an empty directory");
}

#[test]
fn a_backups_hold_outlasts_log_pressure_and_goes_only_near_a_full_budget() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let budget: u64 = 32 << 20;
    let options = roamkv_engine::Options {
        log_bytes_max: Some(budget),
        write_stall_ms_max: 100,
        ..common::options(&clock)
    };
    let engine = Engine::open(tmp.path().join("data"), options).expect("open");
    let held = |engine: &Engine| {
        engine
            .feed()
            .status()
            .slots
            .iter()
            .any(|s| s.name.starts_with("backup-") && !s.released)
    };
    let percent = |engine: &Engine| engine.stats().log_bytes * 100 / budget;
    // ~1.1 MiB a device-batch of 100 readings: fill a third of the budget, then hold it.
    let mut next = 0;
    let mut fill_to = |engine: &Engine, want: u64| {
        while percent(engine) < want {
            write(engine, "a", next, next + 10);
            next += 10;
        }
    };
    fill_to(&engine, 30);
    let snapshot = engine.snapshot(&[]).expect("snapshot");
    settle(&engine, &clock);
    // Past the pressure mark (75 %): a change-feed reader's hold would be released here.
    fill_to(&engine, 80);
    engine.maintain().expect("maintain");
    assert!(
        percent(&engine) < 95,
        "the log is at {} %",
        percent(&engine)
    );
    assert!(
        held(&engine),
        "the hold went under pressure, at {} %",
        percent(&engine)
    );
    // Near a full budget it goes, and the copy says why instead of reading recycled files.
    let mut refused = None;
    for _ in 0..200 {
        if !held(&engine) {
            break;
        }
        if let Err(e) = engine.put("b", "s", next as i64, &[0u8; 64 << 10]) {
            refused = Some(e);
        }
        next += 1;
    }
    assert!(!held(&engine), "still held at {} %", percent(&engine));
    let set = BackupSet::open_or_create(&tmp.path().join("set")).expect("set");
    let e = backup::to_set(&snapshot, &set).expect_err("the hold was released");
    assert!(e.to_string().contains("released the backup's hold"), "{e}");
    drop(snapshot);
    eprintln!("a write refused meanwhile: {refused:?}");
    engine.maintain().expect("maintain");
    engine
        .put("b", "s", -1, b"after")
        .expect("writes go on once the hold is gone");
}

/// Backs up `data` (written, settled into the lower tier, written again) into `set_dir`, then
/// restores the backup and checks every reading; returns what the backup stored and the inodes
/// of the data directory's files at the end of the backup.
fn back_up_settled(
    tmp: &Path,
    lower: LowerTierKind,
    set_dir: &Path,
) -> (backup::Stored, BackupSet, HashSet<u64>) {
    let clock = clock();
    let data = tmp.join(format!("data-{lower:?}"));
    let engine = open_with(&data, &clock, lower);
    write(&engine, "a", 0, 30);
    write(&engine, "b", 0, 30);
    settle(&engine, &clock);
    write(&engine, "a", 30, 40);
    let set = BackupSet::open_or_create(set_dir).expect("set");
    let snapshot = engine.snapshot(&[]).expect("snapshot");
    let stored = backup::to_set(&snapshot, &set).expect("to_set");
    drop(snapshot);
    let mut live = Vec::new();
    walk_files(&data, &mut live);
    let inodes = live
        .iter()
        .map(|p| std::fs::metadata(p).expect("stat").ino())
        .collect();
    drop(engine);
    let restored = tmp.join(format!("restored-{lower:?}"));
    backup::restore(&set, None, &restored).expect("restore");
    let report = roamkv_engine::check(&restored).expect("check");
    assert!(
        report.problems.is_empty(),
        "{lower:?}: {:?}",
        report.problems
    );
    let engine = open_with(&restored, &clock, lower);
    assert_holds(&engine, "a", 40);
    assert_holds(&engine, "b", 30);
    (stored, set, inodes)
}

fn walk_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("ls") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_dir() {
            walk_files(&entry.path(), out);
        } else {
            out.push(entry.path());
        }
    }
}

/// The stored files of `kind` (`table`, `segment`) with their inode and link count.
fn stored_of_kind(set: &BackupSet, manifest: &Manifest, kind: &str) -> Vec<(u64, u64, u64)> {
    manifest
        .files
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| {
            let meta = std::fs::metadata(set.object_path(f)).expect("stat");
            (meta.ino(), meta.nlink(), f.bytes)
        })
        .collect()
}

/// On RocksDB (whose settle flushes table files; LevelDB keeps this little data in its own log,
/// and its `*.ldb` files take the same path).
#[test]
fn table_files_are_hard_linked_into_a_set_on_the_same_file_system_and_restore_right() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let lower = LowerTierKind::RocksDb;
    let (stored, set, live) = back_up_settled(tmp.path(), lower, &tmp.path().join("set"));
    let manifest = &stored.manifest;
    let tables = stored_of_kind(&set, manifest, "table");
    assert!(!tables.is_empty(), "no table file backed up");
    assert_eq!(stored.linked.files, tables.len(), "{stored:?}");
    assert_eq!(stored.linked.bytes, tables.iter().map(|t| t.2).sum::<u64>());
    // The same inode as a file of the data directory: a link, not a copy.
    assert!(
        tables
            .iter()
            .any(|(ino, links, _)| live.contains(ino) && *links >= 2),
        "no stored table file shares an inode with the data directory: {tables:?}"
    );
    // Segments are copied: the log recycles them in place.
    let segments = stored_of_kind(&set, manifest, "segment");
    assert!(!segments.is_empty());
    assert!(
        segments
            .iter()
            .all(|(ino, links, _)| *links == 1 && !live.contains(ino)),
        "a segment was linked: {segments:?}"
    );
    assert_eq!(manifest.bytes, manifest.bytes_copied);
    let verified = backup::verify(&set).expect("verify");
    assert!(verified.iter().all(|v| v.outcome.is_ok()), "{verified:?}");
}

/// A tmpfs mounted for a test, unmounted when it ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_set_on_another_file_system_gets_copies_of_the_table_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let other = tmp.path().join("other-fs");
    std::fs::create_dir_all(&other).expect("mkdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512m", "tmpfs"])
        .arg(&other)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        // Only where mounting is impossible (not root): CI runs as root and mounts.
        eprintln!(
            "SKIPPED: cannot mount a tmpfs at {} (not root?)",
            other.display()
        );
        return;
    }
    let _mounted = Mounted(other.clone());
    let (stored, set, live) =
        back_up_settled(tmp.path(), LowerTierKind::RocksDb, &other.join("set"));
    assert_eq!(stored.linked, backup::Linked::default(), "{stored:?}");
    let tables = stored_of_kind(&set, &stored.manifest, "table");
    assert!(!tables.is_empty());
    assert!(
        tables
            .iter()
            .all(|(ino, links, _)| *links == 1 && !live.contains(ino)),
        "a table file is not a copy: {tables:?}"
    );
    assert_eq!(stored.manifest.bytes, stored.manifest.bytes_copied);
}

#[test]
fn a_paced_backup_reads_at_its_rate_and_says_how_long_it_waited() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open_with(&tmp.path().join("data"), &clock, LowerTierKind::RocksDb);
    write(&engine, "a", 0, 30);
    settle(&engine, &clock);
    write(&engine, "a", 30, 40);
    let set = BackupSet::open_or_create(&tmp.path().join("set")).expect("set");
    let mut snapshot = engine.snapshot(&[]).expect("snapshot");
    let bytes: u64 = snapshot.files().iter().map(|f| f.bytes).sum();
    // Twice the snapshot's bytes a second: half a second at least.
    let pace = std::sync::Arc::new(roamkv_engine::background::Pace::new(bytes * 2));
    snapshot.set_pace(std::sync::Arc::clone(&pace));
    let started = std::time::Instant::now();
    let stored = backup::to_set(&snapshot, &set).expect("to_set");
    let took = started.elapsed();
    drop(snapshot);
    assert_eq!(pace.bytes(), bytes, "every byte read went through the pace");
    assert!(
        took >= std::time::Duration::from_millis(400),
        "{bytes} bytes at {} B/s took {took:?}",
        bytes * 2
    );
    assert!(
        pace.slept() >= std::time::Duration::from_millis(300),
        "{:?}",
        pace.slept()
    );
    assert_eq!(stored.manifest.bytes, bytes);
}
