//! A crash right after each step of a pass: the pass is stopped there by a fail point, the engine
//! is abandoned as a killed process would be (nothing more synced or closed), and the data
//! directory is reopened. Every acknowledged reading must be there, departed devices must stay
//! gone, and maintenance must go on (the segment is taken again, or was taken).

mod common;

use common::*;
use roamkv_engine::{Durability, Engine, Options, PassStep};

const STEPS: [PassStep; 7] = [
    PassStep::Read,
    PassStep::RunWritten,
    PassStep::Ingested,
    PassStep::Cataloged,
    PassStep::Committed,
    PassStep::Retired,
    PassStep::WindowsDropped,
];

fn write(engine: &Engine, device: &str, from: i64, to: i64) {
    for ts in from..to {
        for sensor in ["a", "b"] {
            engine
                .put(device, sensor, ts, &value(device, sensor, ts, 300))
                .expect("put");
        }
    }
}

/// Every reading of the device, checked against the values `write` puts; returns (count, the
/// timestamps' range).
fn check(engine: &Engine, device: &str) -> usize {
    let readings = engine.scan(device, None, i64::MIN, i64::MAX).expect("scan");
    for r in &readings {
        assert_eq!(r.value, value(device, &r.sensor, r.ts_ns, 300), "{r:?}");
    }
    readings.len()
}

fn run(step: PassStep, durability: Durability) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        durability,
        ..options(&clock)
    };
    let engine = Engine::open(dir.path(), options.clone()).expect("open");
    // "leaves" has a window of its own that its departure kills (so the pass has a window to
    // drop); "stays" has readings in a window already and more in the segment being taken.
    write(&engine, "leaves", 0, 50);
    settle(&engine, &clock);
    write(&engine, "stays", 0, 50);
    settle(&engine, &clock);
    assert_eq!(engine.stats().windows, 2);
    write(&engine, "stays", 50, 100);
    write(&engine, "new", 0, 50);
    clock.advance_ms(MANAGEMENT_MS / 2);
    engine.maintain().expect("seal");
    clock.advance_ms(MANAGEMENT_MS);
    // Its window dies now; the armed round drops it after its pass.
    engine.depart("leaves").expect("depart");

    options.fail_points.fail_next_pass_at(step);
    let failed = engine.maintain();
    assert!(failed.is_err(), "{step:?}: the fail point fired");
    engine.abandon();

    let label = format!("{step:?} ({durability:?})");
    let engine = Engine::open(dir.path(), options.clone())
        .unwrap_or_else(|e| panic!("{label}: reopen: {e}"));
    assert_eq!(check(&engine, "stays"), 200, "{label}");
    assert_eq!(check(&engine, "new"), 100, "{label}");
    assert_eq!(
        check(&engine, "leaves"),
        0,
        "{label}: a departure came back"
    );
    engine.maintain().expect("maintenance goes on");
    let s = engine.stats();
    assert_eq!(
        s.upper.records, 0,
        "{label}: every reading left the log: {s:?}"
    );
    assert_eq!(
        s.windows, 2,
        "{label}: the window only \"leaves\" read is dropped, the others stay: {s:?}"
    );
    assert_eq!(
        s.lower_diagnostics.ingested_files_by_level[..6]
            .iter()
            .sum::<u64>(),
        0,
        "{label}: every run in the last level"
    );
    assert_eq!(check(&engine, "stays"), 200, "{label}");
    assert_eq!(check(&engine, "new"), 100, "{label}");
    drop(engine);
    let engine = Engine::open(dir.path(), options).expect("reopen again");
    assert_eq!(check(&engine, "stays"), 200, "{label}");
    assert_eq!(check(&engine, "new"), 100, "{label}");
    assert_eq!(check(&engine, "leaves"), 0, "{label}");
    let report = roamkv_engine::check(dir.path());
    drop(engine);
    assert!(
        report.is_err(),
        "the directory is open: check is refused by its lock"
    );
    let report = roamkv_engine::check(dir.path()).expect("check");
    assert!(report.problems.is_empty(), "{label}: {:?}", report.problems);
}

#[test]
fn a_crash_after_any_step_of_a_pass_loses_nothing_in_sync_mode() {
    for step in STEPS {
        run(step, Durability::Sync);
    }
}

#[test]
fn a_crash_after_any_step_of_a_pass_loses_nothing_in_none_mode() {
    // A killed process (not a power cut) keeps what reached the OS in every mode.
    for step in STEPS {
        run(step, Durability::None);
    }
}
