//! A device's life through the tiers: departure before its management time (nothing moves),
//! readings leaving the log after it (sorted, into a window of the lower tier), reads across
//! the log and the lower tier (also while a pass runs), departure of a device with readings in
//! the lower tier, restarts.

mod common;

use common::*;
use roamkv_engine::{DeviceTier, Engine, LowerTierKind, Record};

fn put_readings(engine: &Engine, device: &str, n: i64) {
    for ts in 0..n {
        let v = value(device, "speed", ts, 200);
        engine.put(device, "speed", ts, &v).expect("put");
    }
}

fn all(engine: &Engine, device: &str) -> Vec<roamkv_engine::Reading> {
    engine.scan(device, None, i64::MIN, i64::MAX).expect("scan")
}

#[test]
fn departure_before_management_time_reclaims_without_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_readings(&engine, "car-1", 100);
    let before = engine.stats();
    assert_eq!(before.upper.devices, 1);
    assert_eq!(before.upper.records, 100);

    engine.depart("car-1").expect("depart");
    settle(&engine, &clock);

    let after = engine.stats();
    assert_eq!((after.upper.devices, after.lower.devices), (0, 0));
    assert_eq!(after.aged_records, 0);
    assert_eq!(after.windows, 0);
    assert_eq!(after.reclaimed_bytes_without_write, before.upper.bytes);
    // Only the DEPART record (and the SEGMENT_END of the sealed segment) were written: no
    // rewrite, no reading in the lower tier (only the pass's small catalog batch).
    assert!(
        after.log_bytes_written - before.log_bytes_written < 128,
        "{after:?}"
    );
    assert_eq!(
        after
            .lower_diagnostics
            .ingested_files_by_level
            .iter()
            .sum::<u64>(),
        0
    );
    assert!(all(&engine, "car-1").is_empty());
}

#[test]
fn a_device_still_here_leaves_the_log_sorted_and_stays_readable() {
    for lower in [LowerTierKind::RocksDb, LowerTierKind::LevelDb] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let engine = open_with(dir.path(), &clock, lower);
        // Out-of-order timestamps and two sensors: the run must still come out sorted.
        for ts in (0..50).rev() {
            for sensor in ["rpm", "speed"] {
                engine
                    .put("car-2", sensor, ts, &value("car-2", sensor, ts, 100))
                    .expect("put");
            }
        }
        clock.advance_ms(MANAGEMENT_MS / 2);
        engine.maintain().expect("maintain");
        clock.advance_ms(MANAGEMENT_MS - 1);
        engine.maintain().expect("maintain");
        assert_eq!(
            engine.stats().aged_records,
            0,
            "left the log before its management time ended"
        );

        clock.advance_ms(1);
        engine.maintain().expect("maintain");
        let s = engine.stats();
        assert_eq!(
            (s.aged_records, s.upper.devices, s.lower.devices, s.windows),
            (100, 0, 1, 1),
            "{lower:?}"
        );
        assert_eq!(s.index_bytes, 0);
        assert_eq!(s.upper.records, 0);
        if lower == LowerTierKind::RocksDb {
            assert_eq!(
                s.lower_diagnostics.ingested_files_by_level,
                vec![0, 0, 0, 0, 0, 0, 1],
                "the run lands in the last level"
            );
        }

        assert_eq!(
            engine.get("car-2", "rpm", 7).expect("get"),
            Some(value("car-2", "rpm", 7, 100))
        );
        let window = engine.scan("car-2", Some("speed"), 10, 20).expect("scan");
        assert_eq!(
            window.iter().map(|r| r.ts_ns).collect::<Vec<_>>(),
            (10..20).collect::<Vec<_>>()
        );
        let readings = all(&engine, "car-2");
        assert_eq!(readings.len(), 100);
        assert!(
            readings
                .windows(2)
                .all(|w| (w[0].sensor.as_str(), w[0].ts_ns) < (w[1].sensor.as_str(), w[1].ts_ns))
        );

        // New readings of a settled device go to the log like any other, and read back with
        // the older ones from the lower tier; a rewrite of an old one wins over its run.
        engine.put("car-2", "speed", 1000, b"late").expect("put");
        engine.put("car-2", "speed", 3, b"rewritten").expect("put");
        assert_eq!(engine.stats().lower_bytes_written, s.lower_bytes_written);
        assert_eq!(
            engine.get("car-2", "speed", 1000).expect("get"),
            Some(b"late".to_vec())
        );
        assert_eq!(
            engine.get("car-2", "speed", 3).expect("get"),
            Some(b"rewritten".to_vec())
        );
        assert_eq!(all(&engine, "car-2").len(), 101);
        drop(engine);

        // After a restart the device is still settled and every reading is there.
        let engine = open_with(dir.path(), &clock, lower);
        let s = engine.stats();
        assert_eq!((s.upper.devices, s.lower.devices), (0, 1));
        let readings = all(&engine, "car-2");
        assert_eq!(readings.len(), 101);
        assert_eq!(
            engine.get("car-2", "speed", 3).expect("get"),
            Some(b"rewritten".to_vec())
        );

        // A settled device that departs is gone at once, and its window drops whole.
        engine.depart("car-2").expect("depart");
        assert!(all(&engine, "car-2").is_empty());
        engine.maintain().expect("maintain");
        assert_eq!(
            engine.stats().windows,
            0,
            "{lower:?}: the dead window dropped"
        );
        drop(engine);
        let engine = open_with(dir.path(), &clock, lower);
        assert!(all(&engine, "car-2").is_empty());
        assert_eq!(engine.stats().lower.devices, 0);
        settle(&engine, &clock);
        assert_eq!(engine.stats().lower.devices, 0);
        assert!(all(&engine, "car-2").is_empty());
    }
}

#[test]
fn reads_see_every_write_while_a_pass_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let devices: Vec<String> = (0..20).map(|i| format!("drone-{i}")).collect();
    for d in &devices {
        put_readings(&engine, d, 200);
    }
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    clock.advance_ms(MANAGEMENT_MS);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0;
            for round in 0..30 {
                for d in &devices {
                    let ts = (round * 7) % 200;
                    let got = engine.get(d, "speed", ts).expect("get during the pass");
                    assert_eq!(
                        got,
                        Some(value(d, "speed", ts, 200)),
                        "{d} ts {ts} round {round}"
                    );
                    reads += 1;
                }
            }
            reads
        });
        let writer = s.spawn(|| {
            for ts in 200..260 {
                engine
                    .put("drone-0", "speed", ts, &value("drone-0", "speed", ts, 200))
                    .expect("put");
            }
        });
        engine.maintain().expect("maintain");
        writer.join().expect("writer");
        assert_eq!(reader.join().expect("reader"), 600);
    });
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().lower.devices, 20);
    let readings = engine
        .scan("drone-0", Some("speed"), 0, 1000)
        .expect("scan");
    assert_eq!(
        readings.len(),
        260,
        "readings written during the pass were lost"
    );
}

#[test]
fn a_device_that_returns_after_departing_starts_afresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_readings(&engine, "phone-9", 10);
    engine.depart("phone-9").expect("depart");
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.put("phone-9", "speed", 500, b"back").expect("put");
    assert_eq!(engine.devices()[0].tier, DeviceTier::Upper);
    // Its management time counts from the return, not from its first visit.
    clock.advance_ms(MANAGEMENT_MS / 2 + 1);
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().aged_records, 0);
    assert_eq!(all(&engine, "phone-9").len(), 1);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(all(&engine, "phone-9").len(), 1);
    settle(&engine, &clock);
    let s = engine.stats();
    assert_eq!((s.lower.devices, s.aged_records), (1, 1));
    assert_eq!(engine.devices()[0].tier, DeviceTier::Lower);
    assert_eq!(all(&engine, "phone-9").len(), 1);
}

#[test]
fn batches_are_atomic_across_devices_and_survive_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let records: Vec<Record<'_>> = ["a", "b", "c"]
        .iter()
        .map(|d| Record {
            device: d,
            sensor: "t",
            ts_ns: 1,
            value: b"v",
        })
        .collect();
    engine.put_batch(&records).expect("batch");
    drop(engine);
    let engine = open(dir.path(), &clock);
    for d in ["a", "b", "c"] {
        assert_eq!(engine.get(d, "t", 1).expect("get"), Some(b"v".to_vec()));
    }
    assert_eq!(engine.stats().upper.devices, 3);
}

#[test]
fn management_time_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_readings(&engine, "car-5", 5);
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    drop(engine);
    clock.advance_ms(MANAGEMENT_MS);
    let engine = open(dir.path(), &clock);
    engine.maintain().expect("maintain");
    assert_eq!(
        engine.stats().lower.devices,
        1,
        "the sealing time must come from the log"
    );
    assert_eq!(all(&engine, "car-5").len(), 5);
}

#[test]
fn a_reading_leaves_the_log_when_it_is_due_whatever_its_device_age() {
    // A device present for long writes on: each segment's readings leave one management time
    // after the segment was sealed, so the log holds about one management time of it.
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    for round in 0..6 {
        for ts in 0..20 {
            let ts = round * 100 + ts;
            engine
                .put("pump-1", "flow", ts, &value("pump-1", "flow", ts, 300))
                .expect("put");
        }
        clock.advance_ms(MANAGEMENT_MS / 2);
        engine.maintain().expect("maintain");
    }
    let s = engine.stats();
    assert!(s.windows >= 3, "{s:?}");
    assert!(
        s.upper.records <= 60,
        "at most about 1.5 management times in the log: {s:?}"
    );
    assert_eq!(all(&engine, "pump-1").len(), 120);
    assert_eq!(engine.devices()[0].lower_runs as u64, s.windows);
}
