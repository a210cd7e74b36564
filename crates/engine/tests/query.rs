//! The read-side queries (device listing, latest readings, paged scans, device-granular
//! retention) give the same answers as `scan` in both tiers and on both lower-tier engines.

mod common;

use common::*;
use roamkv_engine::{DeviceTier, Engine, LowerTierKind, ReadView, Reading, Record, ScanCursor};

const SENSORS: [&str; 3] = ["alt", "speed", "temp"];

/// car-1 gets 3 sensors x 50 readings (ts 0, 2, 4, ...); car-2 one sensor, ts 1000..1010.
fn fill(engine: &Engine) {
    for sensor in SENSORS {
        for i in 0..50i64 {
            let ts = i * 2;
            engine
                .put("car-1", sensor, ts, &value("car-1", sensor, ts, 40))
                .expect("put");
        }
    }
    for ts in 1000..1010 {
        engine
            .put("car-2", "speed", ts, &value("car-2", "speed", ts, 40))
            .expect("put");
    }
}

/// Pages through a window with `limit` readings per page, following the cursors.
fn all_pages(
    engine: &Engine,
    device: &str,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    limit: usize,
) -> Vec<Reading> {
    let mut out = Vec::new();
    let mut after: Option<ScanCursor> = None;
    loop {
        let page = engine
            .scan_page(device, sensor, from_ms, to_ms, after.as_ref(), limit)
            .expect("scan_page");
        assert!(page.readings.len() <= limit);
        out.extend(page.readings);
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

fn check_queries(engine: &Engine) {
    for (sensor, from, to) in [
        (None, i64::MIN, i64::MAX),
        (Some("speed"), i64::MIN, i64::MAX),
        (None, 10, 41),
        (Some("alt"), 7, 8),
        (Some("nope"), i64::MIN, i64::MAX),
    ] {
        let expected = engine.scan("car-1", sensor, from, to).expect("scan");
        for limit in [1, 7, 50, 1000] {
            assert_eq!(
                all_pages(engine, "car-1", sensor, from, to, limit),
                expected,
                "sensor {sensor:?} window {from}..{to} limit {limit}"
            );
        }
    }

    let latest = engine.latest("car-1", None).expect("latest");
    let latest: Vec<(String, i64)> = latest.into_iter().map(|r| (r.sensor, r.ts_ns)).collect();
    let expected: Vec<(String, i64)> = SENSORS.iter().map(|s| (s.to_string(), 98)).collect();
    assert_eq!(latest, expected);
    let one = engine.latest("car-2", Some("speed")).expect("latest");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].ts_ns, 1009);
    assert_eq!(one[0].value, value("car-2", "speed", 1009, 40));
    assert!(
        engine
            .latest("car-2", Some("alt"))
            .expect("latest")
            .is_empty()
    );
    assert!(engine.latest("ghost", None).expect("latest").is_empty());
}

#[test]
fn queries_match_scan_in_the_upper_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    fill(&engine);
    let devices = engine.devices();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0].name, "car-1");
    assert_eq!(devices[0].tier, DeviceTier::Upper);
    assert_eq!((devices[0].log_readings, devices[0].lower_runs), (150, 0));
    assert_eq!(devices[0].registered_at_ms, START_MS);
    assert_eq!(devices[1].log_readings, 10);
    check_queries(&engine);
}

#[test]
fn queries_match_scan_in_the_lower_tier_on_both_engines() {
    for lower in [LowerTierKind::RocksDb, LowerTierKind::LevelDb] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let engine = open_with(dir.path(), &clock, lower);
        fill(&engine);
        settle(&engine, &clock);
        let devices = engine.devices();
        assert!(
            devices
                .iter()
                .all(|d| d.tier == DeviceTier::Lower && d.log_readings == 0 && d.lower_runs == 1),
            "{lower:?}: {devices:?}"
        );
        check_queries(&engine);
        // And after a restart (the mapping table is rebuilt from the lower tier).
        drop(engine);
        let engine = open_with(dir.path(), &clock, lower);
        assert_eq!(engine.devices().len(), 2);
        check_queries(&engine);
    }
}

#[test]
fn retention_departs_only_devices_whose_every_reading_is_older() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    fill(&engine);
    // car-1's newest reading is at 98, car-2's at 1009.
    assert!(!engine.depart_if_older_than("car-1", 98).expect("age"));
    assert!(engine.depart_if_older_than("car-1", 99).expect("age"));
    assert!(!engine.depart_if_older_than("car-2", 99).expect("age"));
    assert!(!engine.depart_if_older_than("ghost", 99).expect("age"));
    let names: Vec<String> = engine.devices().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["car-2".to_string()]);
    assert!(
        engine
            .scan("car-1", None, i64::MIN, i64::MAX)
            .expect("scan")
            .is_empty()
    );
    // Durable: the departure is in the log.
    drop(engine);
    let engine = open(dir.path(), &clock);
    let names: Vec<String> = engine.devices().into_iter().map(|d| d.name).collect();
    assert_eq!(names, vec!["car-2".to_string()]);
}

#[test]
fn bad_page_arguments_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    fill(&engine);
    assert!(engine.scan_page("car-1", None, 0, 10, None, 0).is_err());
    assert!(
        engine
            .scan_page(
                "car-1",
                None,
                0,
                10,
                None,
                roamkv_engine::SCAN_PAGE_READINGS_MAX + 1
            )
            .is_err()
    );
    assert!(engine.scan_page("", None, 0, 10, None, 5).is_err());
    assert!(engine.latest("car\0", None).is_err());
    // A cursor past the window's end gives an empty last page.
    let cursor = ScanCursor {
        sensor: "zzz".into(),
        ts_ns: 0,
    };
    let page = engine
        .scan_page("car-1", None, i64::MIN, i64::MAX, Some(&cursor), 5)
        .expect("page");
    assert!(page.readings.is_empty() && page.next.is_none());
}

/// Every page of a device in a view, following the cursors.
fn view_pages(engine: &Engine, view: &ReadView, device: &str, limit: usize) -> Vec<Reading> {
    let mut out = Vec::new();
    let mut after: Option<ScanCursor> = None;
    loop {
        let page = engine
            .scan_page_in(
                view,
                device,
                None,
                i64::MIN,
                i64::MAX,
                after.as_ref(),
                limit,
            )
            .expect("scan_page_in");
        out.extend(page.readings);
        match page.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

#[test]
fn a_read_view_leaves_out_later_writes_and_follows_readings_that_leave_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    fill(&engine);
    let before: Vec<Reading> = ["car-1", "car-2"]
        .iter()
        .flat_map(|d| engine.scan(d, None, i64::MIN, i64::MAX).expect("scan"))
        .collect();
    let view = engine.read_view().expect("view");
    let names: Vec<&str> = view.devices().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["car-1", "car-2"]);
    // Written after the view: new timestamps inside and after its range, a new sensor, a new
    // device. None of them is in the view.
    for ts in [1, 3, 5, 500] {
        engine.put("car-1", "speed", ts, b"later").expect("put");
    }
    engine.put("car-1", "zzz", 7, b"later").expect("put");
    engine.put("car-3", "speed", 7, b"later").expect("put");
    let read = |limit| -> Vec<Reading> {
        ["car-1", "car-2"]
            .iter()
            .flat_map(|d| view_pages(&engine, &view, d, limit))
            .collect()
    };
    assert!(engine.view_is_exact(&view));
    for limit in [1, 7, 1000] {
        assert_eq!(read(limit), before, "page size {limit}");
    }
    // Half-way through car-1, its readings leave the log: the rest of its pages find them in
    // the lower tier, none twice, none lost.
    let mut first = engine
        .scan_page_in(&view, "car-1", None, i64::MIN, i64::MAX, None, 60)
        .expect("first page");
    let cursor = first.next.take().expect("more pages");
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    // The view's segment is still in the log: the view is exact.
    assert!(engine.view_is_exact(&view));
    settle(&engine, &clock);
    let mut got = first.readings;
    let mut after = Some(cursor);
    while let Some(cursor) = after {
        let page = engine
            .scan_page_in(&view, "car-1", None, i64::MIN, i64::MAX, Some(&cursor), 13)
            .expect("page");
        got.extend(page.readings);
        after = page.next;
    }
    let car1: Vec<Reading> = before
        .iter()
        .filter(|r| r.device == "car-1")
        .cloned()
        .collect();
    // The writes after the view left the log with the rest: the lower tier now holds readings
    // written after it, and the view says so.
    assert!(!engine.view_is_exact(&view));
    let later: Vec<&Reading> = got.iter().filter(|r| r.value == b"later").collect();
    assert_eq!(got.len(), car1.len() + later.len(), "{later:?}");
    let kept: Vec<Reading> = got
        .iter()
        .filter(|r| r.value != b"later")
        .cloned()
        .collect();
    assert_eq!(kept, car1);
}

/// A device in several windows (one per pass), with keys rewritten in later windows and a trim:
/// every page size gives what a model of the writes holds, in order, once each.
#[test]
fn pages_over_many_windows_match_a_model_of_the_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Engine::open(
        dir.path(),
        roamkv_engine::Options {
            windows_per_device_max: 16,
            ..options(&clock)
        },
    )
    .expect("open");
    let mut model = std::collections::BTreeMap::new();
    for round in 0..5i64 {
        for sensor in ["a", "b", "c"] {
            // Each round rewrites half of the last round's keys and adds new ones.
            for ts in (round * 20)..(round * 20 + 40) {
                let value = format!("{sensor}{ts}-r{round}").into_bytes();
                engine.put("car-w", sensor, ts, &value).expect("put");
                model.insert((sensor.to_string(), ts), value);
            }
        }
        settle(&engine, &clock);
    }
    assert!(engine.trim_before("car-w", 10).expect("trim"));
    model.retain(|(_, ts), _| *ts >= 10);
    let runs = engine.device("car-w").expect("here").lower_runs;
    assert!(runs >= 3, "the device is in {runs} runs");
    let expected: Vec<(String, i64, Vec<u8>)> =
        model.into_iter().map(|((s, ts), v)| (s, ts, v)).collect();
    for limit in [1, 2, 3, 7, 64, 1000] {
        let got: Vec<(String, i64, Vec<u8>)> =
            all_pages(&engine, "car-w", None, i64::MIN, i64::MAX, limit)
                .into_iter()
                .map(|r| (r.sensor, r.ts_ns, r.value))
                .collect();
        assert_eq!(got, expected, "pages of {limit}");
    }
    let b_only: Vec<_> = expected
        .iter()
        .filter(|(s, _, _)| s == "b")
        .cloned()
        .collect();
    let got: Vec<_> = all_pages(&engine, "car-w", Some("b"), i64::MIN, i64::MAX, 5)
        .into_iter()
        .map(|r| (r.sensor, r.ts_ns, r.value))
        .collect();
    assert_eq!(got, b_only);
}

/// Scans of readings still in the log, where each batch is a few PUTS records of many readings
/// (and the read path reads each record once for all the readings it chooses from it, chunk by
/// chunk): every page of every window holds what a model of the writes holds, the later of two
/// writes of one (sensor, ts) in a batch included.
#[test]
fn scans_of_batches_in_the_log_match_a_model_of_the_writes() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let mut model: BTreeMap<(String, i64), Vec<u8>> = BTreeMap::new();
    for batch in 0..6i64 {
        let mut writes: Vec<(&str, i64, Vec<u8>)> = Vec::new();
        for i in 0..400i64 {
            let sensor = SENSORS[(i % 3) as usize];
            // Each batch rewrites a few readings of the one before, and one reading twice.
            let ts = batch * 380 + i / 3 * 3 + (i % 3);
            writes.push((sensor, ts, value("bus-1", sensor, ts * 7 + batch, 24)));
        }
        writes.push(("speed", batch * 380 + 1, b"twice, the later".to_vec()));
        let records: Vec<Record<'_>> = writes
            .iter()
            .map(|(sensor, ts_ns, value)| Record {
                device: "bus-1",
                sensor,
                ts_ns: *ts_ns,
                value,
            })
            .collect();
        engine.put_batch(&records).expect("put_batch");
        for (sensor, ts, value) in writes {
            model.insert((sensor.to_string(), ts), value);
        }
    }
    assert_eq!(engine.devices()[0].tier, DeviceTier::Upper);
    let expected = |sensor: Option<&str>, from: i64, to: i64| -> Vec<(String, i64, Vec<u8>)> {
        let mut readings: Vec<_> = model
            .iter()
            .filter(|((s, ts), _)| sensor.is_none_or(|x| x == s) && (from..to).contains(ts))
            .map(|((s, ts), v)| (s.clone(), *ts, v.clone()))
            .collect();
        readings.sort();
        readings
    };
    for (sensor, from, to) in [(None, i64::MIN, i64::MAX), (Some("temp"), 500, 1700)] {
        for limit in [1_000, 10_000] {
            let got: Vec<_> = all_pages(&engine, "bus-1", sensor, from, to, limit)
                .into_iter()
                .map(|r| (r.sensor, r.ts_ns, r.value))
                .collect();
            assert_eq!(
                got,
                expected(sensor, from, to),
                "{sensor:?} {from}..{to} limit {limit}"
            );
        }
    }
}
