//! The commit log as a change feed: reading while writing across segment switches, holds that
//! keep segments (aged or not, across restarts), the hold's cap, gap recovery by scanning, and
//! positions from another log or another history refused.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{clock, open, options, settle, value};
use roamkv_engine::{Engine, Error, FeedRecord, LogPos, Options, Record};

/// A PUT as the feed gave it: (device, sensor, ts, value).
type Put = (String, String, i64, Vec<u8>);

/// Reads from `from` until `want` PUTs were seen (or the log has nothing more), returning the
/// PUTs as (device, sensor, ts, value) and the next position.
fn read_puts(engine: &Engine, from: LogPos, max_bytes: usize) -> (Vec<Put>, LogPos) {
    let mut pos = from;
    let mut puts = Vec::new();
    loop {
        let batch = engine.feed().read(&pos, max_bytes).expect("read");
        for r in batch.records {
            if let FeedRecord::Put {
                device,
                sensor,
                ts_ns,
                value,
            } = r
            {
                puts.push((device, sensor, ts_ns, value));
            }
        }
        if batch.next == pos {
            return (puts, pos);
        }
        pos = batch.next;
    }
}

/// Writes `batches` batches of `per_batch` readings of 1 KiB for device `device`, ts from
/// `first_ts`.
fn write(engine: &Engine, device: &str, first_ts: i64, batches: usize, per_batch: usize) {
    for b in 0..batches {
        let values: Vec<(i64, Vec<u8>)> = (0..per_batch)
            .map(|i| {
                let ts = first_ts + (b * per_batch + i) as i64;
                (ts, value(device, "s", ts, 1024))
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

#[test]
fn a_reader_sees_every_batch_in_order_while_writers_cross_segment_switches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Arc::new(open(dir.path(), &clock));
    let start = engine.feed().end();
    let writer = {
        let engine = Arc::clone(&engine);
        // ~6 MiB over 1 MiB segments: at least five switches while the reader reads.
        std::thread::spawn(move || write(&engine, "car-1", 0, 300, 20))
    };
    let mut pos = start;
    let mut seen: Vec<i64> = Vec::new();
    let mut segments = std::collections::BTreeSet::new();
    while seen.len() < 6000 {
        let batch = engine.feed().read(&pos, 64 * 1024).expect("read");
        segments.insert(batch.next.seq);
        for r in &batch.records {
            if let FeedRecord::Put { ts_ns, .. } = r {
                seen.push(*ts_ns);
            }
        }
        pos = batch.next;
    }
    writer.join().expect("writer");
    assert_eq!(
        seen,
        (0..6000).collect::<Vec<i64>>(),
        "every PUT once, in log order"
    );
    assert!(
        segments.len() >= 5,
        "the reader crossed segments: {segments:?}"
    );
    // At the end: nothing more, the position stays.
    let last = engine.feed().read(&pos, 1 << 20).expect("read at end");
    assert!(last.records.is_empty() && last.next == pos);
    // The first record of a device's first batch is its REGISTER.
    let first = engine.feed().read(&start, 1).expect("first");
    assert!(matches!(&first.records[0], FeedRecord::Register { device, .. } if device == "car-1"));
}

#[test]
fn a_hold_keeps_aged_segments_until_the_slot_moves_and_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let start = engine.feed().end();
    engine.feed().hold("sink", &start).expect("hold");
    write(&engine, "car-1", 0, 100, 20); // ~2 MiB: three segments
    settle(&engine, &clock);
    let stats = engine.stats();
    assert!(stats.segments_aged >= 2, "readings left the log: {stats:?}");
    assert_eq!(stats.segments_retired, 0, "held segments do not retire");
    let status = engine.feed().status();
    assert!(status.hold_bytes >= 2 << 20, "{status:?}");
    // The aged segments are still readable from the slot's position, whole.
    let (puts, end) = read_puts(&engine, start, 1 << 20);
    assert_eq!(puts.len(), 2000);
    assert_eq!(puts[1999].3, value("car-1", "s", 1999, 1024));
    engine.close().expect("close");

    // Reopened: the held aged segments are kept (not replayed: the device's readings are
    // each once), the slot is where it was.
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.feed().slot("sink").expect("slot"),
        Some((start, false))
    );
    assert_eq!(
        engine.scan("car-1", None, 0, i64::MAX).expect("scan").len(),
        2000
    );
    let (again, _) = read_puts(&engine, start, 1 << 20);
    assert_eq!(again, puts, "the same records after the restart");
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().segments_retired, 0);
    // The reader confirms the end: the segments behind it retire.
    engine.feed().hold("sink", &end).expect("move");
    engine.maintain().expect("maintain");
    assert!(engine.stats().segments_retired >= 2);
    assert_eq!(engine.feed().status().hold_bytes, 0);
}

#[test]
fn past_its_cap_a_hold_is_released_and_the_reader_finds_a_gap_never_a_stall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Engine::open(
        dir.path(),
        Options {
            feed_hold_bytes_max: Some(2 << 20),
            log_bytes_max: Some(16 << 20),
            write_stall_ms_max: 2_000,
            ..options(&clock)
        },
    )
    .expect("open");
    let start = engine.feed().end();
    engine.feed().hold("sink", &start).expect("hold");
    // Far more than the cap and the budget: every write must succeed.
    for round in 0..6 {
        write(&engine, "car-1", round * 2000, 100, 20);
        settle(&engine, &clock);
    }
    let status = engine.feed().status();
    assert!(status.holds_released >= 1, "{status:?}");
    assert!(status.slots[0].released);
    assert!(status.hold_bytes <= status.hold_bytes_max);
    let stats = engine.stats();
    assert_eq!(stats.no_space_errors, 0);
    assert_eq!(stats.write_stalls, 0, "no writer waited for the hold");
    match engine.feed().read(&start, 1 << 20) {
        Err(Error::FeedGap { oldest_seq, .. }) => assert!(oldest_seq > start.seq),
        other => panic!("expected a gap, got {other:?}"),
    }
    // The release outlives a restart: the slot's segments are gone, and it does not hold the
    // live log again up to the cap.
    drop(engine);
    let engine = Engine::open(
        dir.path(),
        Options {
            feed_hold_bytes_max: Some(2 << 20),
            log_bytes_max: Some(16 << 20),
            ..options(&clock)
        },
    )
    .expect("reopen");
    let status = engine.feed().status();
    assert!(status.slots[0].released, "{status:?}");
    assert_eq!(status.hold_bytes, 0, "{status:?}");
}

#[test]
fn a_hold_for_a_snapshot_outlives_its_cap_until_the_reader_tails_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Engine::open(
        dir.path(),
        Options {
            feed_hold_bytes_max: Some(2 << 20),
            log_bytes_max: Some(64 << 20),
            ..options(&clock)
        },
    )
    .expect("open");
    let start = engine.feed().end();
    engine
        .feed()
        .hold_for_snapshot("sink", &start)
        .expect("hold for a scan");
    // Far past the cap, well inside the budget: a scan of the devices takes its time.
    for round in 0..3 {
        write(&engine, "car-1", round * 2000, 100, 20);
        settle(&engine, &clock);
    }
    let status = engine.feed().status();
    assert_eq!(status.holds_released, 0, "{status:?}");
    assert!(status.hold_bytes > status.hold_bytes_max, "{status:?}");
    engine.feed().read(&start, 1 << 20).expect("no gap");
    // The reader tails again from where it held: the cap applies once more.
    engine.feed().hold("sink", &start).expect("hold");
    write(&engine, "car-1", 9000, 10, 20);
    settle(&engine, &clock);
    let status = engine.feed().status();
    assert!(status.holds_released >= 1, "{status:?}");
    assert_eq!(engine.stats().write_stalls, 0);
}

#[test]
fn after_a_gap_a_reader_recovers_by_scanning_the_devices_then_tails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Engine::open(
        dir.path(),
        Options {
            feed_hold_bytes_max: Some(1 << 20),
            ..options(&clock)
        },
    )
    .expect("open");
    let start = engine.feed().end();
    engine.feed().hold("sink", &start).expect("hold");
    write(&engine, "stays", 0, 100, 20);
    write(&engine, "leaves", 0, 10, 10);
    engine.depart("leaves").expect("depart");
    settle(&engine, &clock);
    settle(&engine, &clock);
    assert!(matches!(
        engine.feed().read(&start, 1 << 20),
        Err(Error::FeedGap { .. })
    ));

    // Recovery: hold the end first, then scan every device present, then tail from the end.
    let resume = engine.feed().end();
    engine.feed().hold("sink", &resume).expect("hold the end");
    let mut exported: BTreeMap<(String, i64), Vec<u8>> = BTreeMap::new();
    for device in engine.devices() {
        for r in engine
            .scan(&device.name, None, i64::MIN, i64::MAX)
            .expect("scan")
        {
            exported.insert((r.device, r.ts_ns), r.value);
        }
    }
    write(&engine, "stays", 2000, 1, 5);
    let (tail, _) = read_puts(&engine, resume, 1 << 20);
    for (device, _, ts, v) in tail {
        exported.insert((device, ts), v);
    }
    assert_eq!(
        exported.len(),
        2005,
        "every reading of the device present, once"
    );
    assert!(exported.keys().all(|(d, _)| d == "stays"));
    assert_eq!(
        exported[&("stays".to_string(), 2004)],
        value("stays", "s", 2004, 1024)
    );
}

#[test]
fn positions_of_a_replaced_or_restored_directory_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let data = dir.path().join("data");
    let copy = dir.path().join("copy");
    let engine = open(&data, &clock);
    write(&engine, "car-1", 0, 5, 5);
    engine.close().expect("close");
    copy_dir(&data, &copy);
    let engine = open(&data, &clock);
    // After a restart too (recovery finds the last record).
    let reopened = engine.feed().end();
    assert!(reopened.prev_len > 0, "{reopened:?}");
    let (_, read_to) = read_puts(&engine, engine.feed().start(), 1 << 20);
    write(&engine, "car-1", 100, 5, 5);
    let (_, later) = read_puts(&engine, read_to, 1 << 20);
    // A position from `end` names the record before it, as one from `read` does.
    let end = engine.feed().end();
    assert!(end.prev_len > 0 && end.prev_crc != 0, "{end:?}");
    assert_eq!((end.seq, end.offset), (later.seq, later.offset));
    engine.close().expect("close");

    // Restored from the copy and written on: the reader's positions are past its end, or name a
    // record that is not there.
    std::fs::remove_dir_all(&data).expect("remove");
    std::fs::rename(&copy, &data).expect("restore");
    let engine = open(&data, &clock);
    assert!(matches!(
        engine.feed().read(&later, 1024),
        Err(Error::FeedDiverged { .. })
    ));
    write(&engine, "car-2", 0, 20, 5);
    for position in [later, end] {
        let refused = engine.feed().read(&position, 1024);
        assert!(
            matches!(refused, Err(Error::FeedDiverged { .. })),
            "{refused:?}"
        );
    }
    engine.close().expect("close");

    // Replaced by a new directory: another log.
    std::fs::remove_dir_all(&data).expect("remove");
    let engine = open(&data, &clock);
    write(&engine, "car-1", 0, 50, 5);
    let refused = engine.feed().read(&read_to, 1024);
    assert!(
        matches!(&refused, Err(Error::FeedDiverged { reason, .. }) if reason.contains("replaced")),
        "{refused:?}"
    );
}

#[test]
fn a_damaged_slot_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let end = engine.feed().end();
    engine.feed().hold("sink", &end).expect("hold");
    engine.close().expect("close");
    let slot = dir.path().join("feed").join("sink.slot");
    let mut bytes = std::fs::read(&slot).expect("read");
    bytes[20] ^= 0xff;
    std::fs::write(&slot, bytes).expect("write");
    match Engine::open(dir.path(), options(&clock)) {
        Err(Error::Corrupt { file, offset, .. }) => {
            assert_eq!((file, offset), (slot, 40));
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        open_ok(dir.path()).feed().hold("no/slashes", &end),
        Err(Error::InvalidArgument(_))
    ));
}

fn open_ok(path: &std::path::Path) -> Engine {
    let _ = std::fs::remove_file(path.join("feed").join("sink.slot"));
    open(path, &clock())
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
