//! A device's life through the tiers: departure before its management time, migration after,
//! reads across tiers (also during a migration), departure of a settled device, restarts.

mod common;

use common::*;
use roamkv_engine::{LowerTierKind, Record};

fn put_readings(engine: &roamkv_engine::Engine, device: &str, n: i64) {
    for ts in 0..n {
        let v = value(device, "speed", ts, 200);
        engine.put(device, "speed", ts, &v).expect("put");
    }
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
    clock.advance_ms(MANAGEMENT_MS * 2);
    engine.maintain().expect("maintain");

    let after = engine.stats();
    assert_eq!(after.upper.devices, 0);
    assert_eq!(after.lower.devices, 0);
    assert_eq!(after.migrations, 0);
    assert_eq!(after.reclaimed_bytes_without_write, before.upper.bytes);
    // Only the DEPART record was written: no rewrite, nothing in the lower tier.
    assert!(
        after.log_bytes_written - before.log_bytes_written < 64,
        "{after:?}"
    );
    assert_eq!(after.lower_bytes_written, 0);
    assert!(
        engine
            .scan("car-1", None, i64::MIN, i64::MAX)
            .expect("scan")
            .is_empty()
    );
}

#[test]
fn device_still_present_migrates_sorted_and_stays_readable() {
    for lower in [LowerTierKind::RocksDb, LowerTierKind::LevelDb] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let engine = open_with(dir.path(), &clock, lower);
        // Out-of-order timestamps and two sensors: the migrated run must still come out sorted.
        for ts in (0..50).rev() {
            for sensor in ["rpm", "speed"] {
                engine
                    .put("car-2", sensor, ts, &value("car-2", sensor, ts, 100))
                    .expect("put");
            }
        }
        clock.advance_ms(MANAGEMENT_MS - 1);
        engine.maintain().expect("maintain");
        assert_eq!(
            engine.stats().migrations,
            0,
            "migrated before its management time ended"
        );

        clock.advance_ms(1);
        engine.maintain().expect("maintain");
        let s = engine.stats();
        assert_eq!(
            (
                s.migrations,
                s.migrated_records,
                s.upper.devices,
                s.lower.devices
            ),
            (1, 100, 0, 1),
            "{lower:?}"
        );
        assert_eq!(s.index_bytes, 0);
        assert!(s.lower_bytes_written > 100 * 100, "{lower:?}: {s:?}");

        assert_eq!(
            engine.get("car-2", "rpm", 7).expect("get"),
            Some(value("car-2", "rpm", 7, 100))
        );
        let window = engine.scan("car-2", Some("speed"), 10, 20).expect("scan");
        assert_eq!(
            window.iter().map(|r| r.ts_ms).collect::<Vec<_>>(),
            (10..20).collect::<Vec<_>>()
        );
        let all = engine
            .scan("car-2", None, i64::MIN, i64::MAX)
            .expect("scan");
        assert_eq!(all.len(), 100);
        assert!(
            all.windows(2)
                .all(|w| (w[0].sensor.as_str(), w[0].ts_ms) < (w[1].sensor.as_str(), w[1].ts_ms))
        );

        // New readings of a settled device go straight to the lower tier, through the log.
        engine.put("car-2", "speed", 1000, b"late").expect("put");
        assert_eq!(
            engine.get("car-2", "speed", 1000).expect("get"),
            Some(b"late".to_vec())
        );
        drop(engine);

        // After a restart the device is still settled and every reading is there.
        let engine = open_with(dir.path(), &clock, lower);
        let s = engine.stats();
        assert_eq!((s.upper.devices, s.lower.devices), (0, 1));
        assert_eq!(
            engine
                .scan("car-2", None, i64::MIN, i64::MAX)
                .expect("scan")
                .len(),
            101
        );

        // A settled device that departs is removed from the lower tier.
        engine.depart("car-2").expect("depart");
        assert!(
            engine
                .scan("car-2", None, i64::MIN, i64::MAX)
                .expect("scan")
                .is_empty()
        );
        drop(engine);
        let engine = open_with(dir.path(), &clock, lower);
        assert!(
            engine
                .scan("car-2", None, i64::MIN, i64::MAX)
                .expect("scan")
                .is_empty()
        );
        assert_eq!(engine.stats().lower.devices, 0);
    }
}

#[test]
fn reads_see_every_write_while_a_migration_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let devices: Vec<String> = (0..20).map(|i| format!("drone-{i}")).collect();
    for d in &devices {
        put_readings(&engine, d, 200);
    }
    clock.advance_ms(MANAGEMENT_MS);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0;
            for round in 0..30 {
                for d in &devices {
                    let ts = (round * 7) % 200;
                    let got = engine.get(d, "speed", ts).expect("get during migration");
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
    let all = engine
        .scan("drone-0", Some("speed"), 0, 1000)
        .expect("scan");
    assert_eq!(
        all.len(),
        260,
        "readings written during the migration were lost"
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
    // Its management time counts from the return, not from its first visit.
    clock.advance_ms(MANAGEMENT_MS / 2 + 1);
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().migrations, 0);
    let readings = engine
        .scan("phone-9", None, i64::MIN, i64::MAX)
        .expect("scan");
    assert_eq!(readings.len(), 1);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine
            .scan("phone-9", None, i64::MIN, i64::MAX)
            .expect("scan")
            .len(),
        1
    );
    clock.advance_ms(MANAGEMENT_MS);
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().lower.devices, 1);
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
            ts_ms: 1,
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
    drop(engine);
    clock.advance_ms(MANAGEMENT_MS);
    let engine = open(dir.path(), &clock);
    engine.maintain().expect("maintain");
    assert_eq!(
        engine.stats().lower.devices,
        1,
        "the registration time must come from the log"
    );
}
