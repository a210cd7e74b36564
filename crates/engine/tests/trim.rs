//! `Engine::trim_before`: a device's readings older than a cutoff go, wherever they are (the log,
//! windows, the settled space), while a pass moves them, and across a kill -9 (the TRIM record
//! is replayed).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use common::*;
use roamkv_engine::{Engine, Error, LowerTierKind, PassStep};

fn put_range(engine: &Engine, device: &str, sensors: &[&str], from: i64, to: i64) {
    for sensor in sensors {
        for ts in from..to {
            engine
                .put(device, sensor, ts, &value(device, sensor, ts, 40))
                .expect("put");
        }
    }
}

/// Every (sensor, ts) of the device, checked against the values `put_range` writes.
fn keys(engine: &Engine, device: &str) -> Vec<(String, i64)> {
    engine
        .scan(device, None, i64::MIN, i64::MAX)
        .expect("scan")
        .into_iter()
        .map(|r| {
            assert_eq!(
                r.value,
                value(device, &r.sensor, r.ts_ns, 40),
                "value of {r:?}"
            );
            (r.sensor, r.ts_ns)
        })
        .collect()
}

fn expected(sensors: &[&str], ranges: &[(i64, i64)]) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for sensor in sensors {
        for (from, to) in ranges {
            out.extend((*from..*to).map(|ts| (sensor.to_string(), ts)));
        }
    }
    out.sort();
    out
}

#[test]
fn trim_in_the_upper_tier_keeps_newer_and_later_readings_and_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_range(&engine, "car-1", &["alt", "speed"], 0, 100);
    put_range(&engine, "car-2", &["speed"], 0, 100);
    let index_before = engine.stats().index_bytes;
    assert!(engine.trim_before("car-1", 60).expect("trim"));
    assert!(
        engine.stats().index_bytes < index_before,
        "index memory returns"
    );
    // A reading older than the cutoff written after the trim is a new reading: it stays.
    put_range(&engine, "car-1", &["speed"], 10, 11);
    let want = {
        let mut w = expected(&["alt", "speed"], &[(60, 100)]);
        w.push(("speed".into(), 10));
        w.sort();
        w
    };
    assert_eq!(keys(&engine, "car-1"), want);
    assert_eq!(
        keys(&engine, "car-2").len(),
        100,
        "other devices are untouched"
    );
    assert!(
        !engine.trim_before("car-1", 10).expect("trim"),
        "nothing older than 10: nothing is written"
    );
    assert!(
        !engine
            .trim_before("nobody", 10)
            .expect("trim of an unknown device")
    );
    assert_eq!(engine.stats().trims, 1);
    assert_eq!(engine.devices()[0].log_readings, 81);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(keys(&engine, "car-1"), want, "after reopen");
    // Its readings then leave the log without the trimmed ones.
    settle(&engine, &clock);
    assert_eq!(engine.stats().lower.devices, 2);
    assert_eq!(keys(&engine, "car-1"), want, "after settling");
    drop(engine);
    assert_eq!(
        keys(&open(dir.path(), &clock), "car-1"),
        want,
        "settled, reopened"
    );
}

#[test]
fn trim_of_a_settled_device_deletes_each_sensors_older_readings_on_both_lower_tiers() {
    for lower in [LowerTierKind::RocksDb, LowerTierKind::LevelDb] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let engine = open_with(dir.path(), &clock, lower);
        let sensors = ["a", "a\u{1}", "b", "speed"];
        put_range(&engine, "truck", &sensors, -20, 80);
        put_range(&engine, "other", &["a"], 0, 10);
        settle(&engine, &clock);
        assert_eq!(engine.stats().lower.devices, 2, "{lower:?}");
        // A sensor first written in the same group as the trim is trimmed too: it is older.
        put_range(&engine, "truck", &["late"], 0, 5);
        assert!(engine.trim_before("truck", 30).expect("trim"), "{lower:?}");
        put_range(&engine, "truck", &["b"], 0, 1);
        let mut want = expected(&sensors, &[(30, 80)]);
        want.push(("b".into(), 0));
        want.sort();
        assert_eq!(keys(&engine, "truck"), want, "{lower:?}");
        assert_eq!(keys(&engine, "other").len(), 10, "{lower:?}");
        let latest: Vec<i64> = engine
            .latest("truck", None)
            .expect("latest")
            .iter()
            .map(|r| r.ts_ns)
            .collect();
        assert_eq!(latest, [79, 79, 79, 79], "{lower:?}");
        assert!(!engine.trim_before("truck", 0).expect("trim"), "{lower:?}");
        drop(engine);
        let engine = open_with(dir.path(), &clock, lower);
        assert_eq!(keys(&engine, "truck"), want, "{lower:?} after reopen");
    }
}

#[test]
fn trim_during_a_pass_reaches_the_ingested_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = options(&clock);
    let engine = Engine::open(dir.path(), options.clone()).expect("open");
    put_range(&engine, "drone", &["alt", "speed"], 0, 300);
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    clock.advance_ms(MANAGEMENT_MS);
    let (at_ingest, wait_at_ingest) = mpsc::channel();
    let (go, wait_for_go) = mpsc::channel::<()>();
    options
        .fail_points
        .run_at_next_pass_step(PassStep::Ingested, move || {
            at_ingest.send(()).expect("signal");
            wait_for_go.recv().expect("go");
        });
    let want = {
        let mut w = expected(&["alt", "speed"], &[(100, 300)]);
        w.extend([("alt".to_string(), 50), ("speed".to_string(), 400)]);
        w.sort();
        w
    };
    std::thread::scope(|s| {
        let migration = s.spawn(|| engine.maintain());
        wait_at_ingest
            .recv()
            .expect("the pass reached its ingestion");
        assert!(
            engine
                .trim_before("drone", 100)
                .expect("trim while the pass runs")
        );
        put_range(&engine, "drone", &["alt"], 50, 51);
        put_range(&engine, "drone", &["speed"], 400, 401);
        assert_eq!(keys(&engine, "drone"), want, "while the pass runs");
        go.send(()).expect("go");
        migration.join().expect("thread").expect("maintain");
    });
    assert_eq!(engine.stats().lower.devices, 1);
    assert_eq!(keys(&engine, "drone"), want, "settled");
    drop(engine);
    let engine = Engine::open(dir.path(), options).expect("reopen");
    assert_eq!(keys(&engine, "drone"), want, "reopened");
}

#[test]
fn a_trim_while_a_pass_is_rolled_back_stays_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = options(&clock);
    let engine = std::sync::Arc::new(Engine::open(dir.path(), options.clone()).expect("open"));
    put_range(&engine, "drone", &["alt"], 0, 100);
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    clock.advance_ms(MANAGEMENT_MS);
    let (at_ingest, wait_at_ingest) = mpsc::channel();
    let (go, wait_for_go) = mpsc::channel::<()>();
    options
        .fail_points
        .run_at_next_pass_step(PassStep::Read, move || {
            at_ingest.send(()).expect("signal");
            wait_for_go.recv().expect("go");
        });
    let migrating = std::sync::Arc::clone(&engine);
    let migration = std::thread::spawn(move || migrating.maintain());
    wait_at_ingest.recv().expect("reached");
    assert!(engine.trim_before("drone", 40).expect("trim"));
    options.fail_points.fail_next_pass_at(PassStep::Ingested);
    go.send(()).expect("go");
    assert!(migration.join().expect("thread").is_err(), "rolled back");
    assert_eq!(engine.stats().windows, 0);
    assert_eq!(keys(&engine, "drone"), expected(&["alt"], &[(40, 100)]));
    engine.maintain().expect("the retry moves its readings");
    assert_eq!(engine.stats().lower.devices, 1);
    assert_eq!(keys(&engine, "drone"), expected(&["alt"], &[(40, 100)]));
}

#[test]
fn a_trim_does_not_reach_a_later_incarnation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_range(&engine, "phone", &["gps"], 0, 50);
    assert!(engine.trim_before("phone", 25).expect("trim"));
    engine.depart("phone").expect("depart");
    put_range(&engine, "phone", &["gps"], 0, 10);
    assert_eq!(keys(&engine, "phone"), expected(&["gps"], &[(0, 10)]));
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(keys(&engine, "phone"), expected(&["gps"], &[(0, 10)]));
}

#[test]
fn bad_trim_arguments_are_errors_that_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    put_range(&engine, "car", &["s"], 0, 10);
    assert!(matches!(
        engine.trim_before("", 5),
        Err(Error::EmptyId { .. })
    ));
    assert!(matches!(
        engine.trim_before("a\0b", 5),
        Err(Error::IdContainsNul { .. })
    ));
    assert!(matches!(
        engine.trim_before(&"x".repeat(256), 5),
        Err(Error::IdTooLong { .. })
    ));
    assert_eq!(engine.stats().trims, 0);
    assert_eq!(keys(&engine, "car").len(), 10);
}

const CHILD_DIR: &str = "ROAMKV_TRIM_CHILD_DIR";

/// The child of `trims_survive_kill_9` (does nothing unless started by it): writes, settles,
/// trims in every tier, says so, and waits to be killed.
#[test]
fn child_trims_then_waits_to_be_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let clock = clock();
    let engine = open(std::path::Path::new(&dir), &clock);
    put_range(&engine, "settled", &["a", "b"], 0, 100);
    put_range(&engine, "trimmed-then-settled", &["a"], 0, 100);
    assert!(
        engine
            .trim_before("trimmed-then-settled", 50)
            .expect("trim")
    );
    settle(&engine, &clock);
    put_range(&engine, "upper", &["a"], 0, 100);
    assert!(engine.trim_before("upper", 70).expect("trim"));
    // Readings in a window, hidden by a trim that only the TRIM record in the log knows.
    assert!(engine.trim_before("settled", 30).expect("trim"));
    println!("trimmed");
    std::thread::sleep(std::time::Duration::from_secs(120));
}

#[test]
fn trims_survive_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_trims_then_waits_to_be_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("stdout");
    let trimmed = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("trimmed"));
    child.kill().expect("kill -9");
    child.wait().expect("wait");
    assert!(trimmed, "the child did not get to its trims");
    let clock = clock();
    clock.advance_ms(MANAGEMENT_MS);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        keys(&engine, "settled"),
        expected(&["a", "b"], &[(30, 100)])
    );
    assert_eq!(
        keys(&engine, "trimmed-then-settled"),
        expected(&["a"], &[(50, 100)])
    );
    assert_eq!(keys(&engine, "upper"), expected(&["a"], &[(70, 100)]));
}
