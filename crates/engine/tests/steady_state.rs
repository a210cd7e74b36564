//! The engine under a stream that never stops: the log stays inside its budget, departed
//! devices give their space back, a device that never leaves does not pin the log, a full
//! budget stalls writers and then refuses writes without poisoning anything, and a pass that
//! fails at any step loses nothing and is retried.

mod common;

use std::time::Instant;

use common::*;
use roamkv_engine::{Durability, Engine, Error, Options, PassStep, Record};

const SEGMENT_BYTES: u64 = 1 << 20;
const BUDGET_BYTES: u64 = 8 * SEGMENT_BYTES;
const VALUE_BYTES: usize = 2000;

fn budget_options(clock: &std::sync::Arc<roamkv_engine::ManualClock>) -> Options {
    Options {
        durability: Durability::None,
        segment_bytes: SEGMENT_BYTES,
        log_bytes_max: Some(BUDGET_BYTES),
        write_stall_ms_max: 200,
        ..options(clock)
    }
}

/// Writes `n` readings of one device (one batch of 16 at a time), timestamps from `first_ts`.
fn write(engine: &Engine, device: &str, first_ts: i64, n: i64) -> Result<(), Error> {
    let values: Vec<Vec<u8>> = (first_ts..first_ts + n)
        .map(|ts| value(device, "speed", ts, VALUE_BYTES))
        .collect();
    for chunk in (first_ts..first_ts + n).collect::<Vec<_>>().chunks(16) {
        let records: Vec<Record<'_>> = chunk
            .iter()
            .map(|&ts| Record {
                device,
                sensor: "speed",
                ts_ns: ts,
                value: &values[(ts - first_ts) as usize],
            })
            .collect();
        engine.put_batch(&records)?;
    }
    Ok(())
}

fn readings(engine: &Engine, device: &str) -> usize {
    engine
        .scan(device, None, i64::MIN, i64::MAX)
        .expect("scan")
        .len()
}

#[test]
fn departed_devices_give_their_space_back_under_continuous_ingest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Engine::open(dir.path(), budget_options(&clock)).expect("open");
    // 300 devices x 100 readings x 2 KB = 60 MB through an 8 MiB log: every device leaves
    // three rounds after it arrived, long before its management time.
    let mut max_live_segments = 0;
    for round in 0..300 {
        write(&engine, &format!("car-{round}"), 0, 100).expect("ingest never fails");
        if round >= 3 {
            engine
                .depart(&format!("car-{}", round - 3))
                .expect("depart");
        }
        clock.advance_ms(100);
        engine.maintain().expect("maintain");
        let stats = engine.stats();
        assert!(
            stats.log_bytes <= BUDGET_BYTES,
            "round {round}: log {} over budget",
            stats.log_bytes
        );
        max_live_segments = max_live_segments.max(stats.live_segments);
    }
    let stats = engine.stats();
    // Four devices' worth (about 800 KB) is live at any time: the departed ones' segments are
    // retired within one segment of their departure.
    assert!(max_live_segments <= 3, "{max_live_segments} live segments");
    assert_eq!(stats.aged_records, 0, "nothing needed moving: {stats:?}");
    assert!(stats.segments_retired >= 55, "{stats:?}");
    assert_eq!(stats.write_stalls, 0);
    for round in 297..300 {
        assert_eq!(readings(&engine, &format!("car-{round}")), 100);
    }
    assert_eq!(readings(&engine, "car-10"), 0);
}

#[test]
fn a_device_that_never_leaves_does_not_pin_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        management_time_ms: 3_600_000, // an hour: it never becomes due in this test
        ..budget_options(&clock)
    };
    let engine = Engine::open(dir.path(), options).expect("open");
    let mut stayer_readings = 0;
    for round in 0..200 {
        write(&engine, "truck-stays", stayer_readings, 2).expect("stayer writes");
        stayer_readings += 2;
        write(&engine, &format!("car-{round}"), 0, 100).expect("ingest never fails");
        engine.depart(&format!("car-{round}")).expect("depart");
        clock.advance_ms(100);
        engine.maintain().expect("maintain");
        let stats = engine.stats();
        assert!(stats.log_bytes <= BUDGET_BYTES, "round {round}: {stats:?}");
    }
    let stats = engine.stats();
    assert!(
        stats.early_passes >= 1,
        "the stayer's readings must have left the log early: {stats:?}"
    );
    assert_eq!(stats.lower.devices, 1);
    assert_eq!(readings(&engine, "truck-stays"), stayer_readings as usize);
    drop(engine);
    let engine = Engine::open(dir.path(), budget_options(&clock)).expect("reopen");
    assert_eq!(readings(&engine, "truck-stays"), stayer_readings as usize);
}

#[test]
fn full_budget_stalls_then_refuses_writes_then_recovers_when_space_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        management_time_ms: 3_600_000,
        ..budget_options(&clock)
    };
    let engine = Engine::open(dir.path(), options.clone()).expect("open");
    // Nobody runs maintenance (background off, no maintain() call): the log fills its budget.
    let mut acked = 0;
    let refused = loop {
        let started = Instant::now();
        match write(&engine, "truck-1", acked, 16) {
            Ok(()) => acked += 16,
            Err(e) => break (e, started.elapsed()),
        }
        assert!(acked < 100_000, "the budget never filled");
    };
    let (error, waited) = refused;
    assert!(matches!(error, Error::NoSpace { .. }), "{error}");
    assert!(error.is_retryable());
    assert!(
        waited.as_millis() >= 200,
        "writers wait write_stall_ms_max before NoSpace ({waited:?})"
    );
    let stats = engine.stats();
    assert!(
        stats.write_stalls >= 1 && stats.no_space_errors >= 1,
        "{stats:?}"
    );
    assert!(stats.log_bytes <= BUDGET_BYTES, "{stats:?}");
    // Reads go on, and the refused batch changed nothing.
    assert_eq!(readings(&engine, "truck-1"), acked as usize);
    // A new device is refused too, and leaves no trace in the mapping table.
    assert!(matches!(
        write(&engine, "car-new", 0, 16),
        Err(Error::NoSpace { .. })
    ));
    assert_eq!(engine.stats().upper.devices, 1);

    // Maintenance moves the device's readings out of the log early; the space comes back and
    // writes resume.
    engine.maintain().expect("maintain");
    write(&engine, "truck-1", acked, 16).expect("writes resume");
    acked += 16;
    write(&engine, "car-new", 0, 16).expect("new devices too");
    assert_eq!(readings(&engine, "truck-1"), acked as usize);
    drop(engine);
    let engine = Engine::open(dir.path(), options).expect("reopen");
    assert_eq!(readings(&engine, "truck-1"), acked as usize);
    assert_eq!(readings(&engine, "car-new"), 16);
}

#[test]
fn writers_stall_while_background_maintenance_makes_room() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        management_time_ms: 3_600_000,
        background_maintenance: true,
        // Maintenance runs only when a stalled writer asks for it.
        maintenance_interval_ms: 3_600_000,
        write_stall_ms_max: 30_000,
        ..budget_options(&clock)
    };
    let engine = Engine::open(dir.path(), options).expect("open");
    // 40 MB of one device that never leaves, through an 8 MiB budget: every write succeeds.
    write(&engine, "truck-1", 0, 20_000).expect("back-pressure, not failure");
    let stats = engine.stats();
    assert!(stats.write_stalls >= 1, "{stats:?}");
    assert!(stats.early_passes >= 1, "{stats:?}");
    assert_eq!(stats.no_space_errors, 0);
    assert!(stats.log_bytes <= BUDGET_BYTES, "{stats:?}");
    assert_eq!(readings(&engine, "truck-1"), 20_000);
}

#[test]
fn a_pass_that_fails_at_any_step_loses_nothing_and_is_retried() {
    // `None`: the catalog batch itself fails (the other steps' failures come after them).
    for step in [
        Some(PassStep::Read),
        Some(PassStep::RunWritten),
        Some(PassStep::Ingested),
        None,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let options = options(&clock);
        let engine = Engine::open(dir.path(), options.clone()).expect("open");
        write(&engine, "car-1", 0, 300).expect("write");
        clock.advance_ms(MANAGEMENT_MS / 2);
        engine.maintain().expect("seal");
        clock.advance_ms(MANAGEMENT_MS + 1);
        match step {
            Some(step) => options.fail_points.fail_next_pass_at(step),
            None => options.fail_points.fail_next_catalog_write(),
        }
        assert!(engine.maintain().is_err(), "{step:?}: the failure surfaces");
        let stats = engine.stats();
        assert_eq!(stats.aged_records, 0, "{step:?}: rolled back: {stats:?}");
        assert_eq!(stats.windows, 0, "{step:?}");
        assert_eq!(stats.pass_failures, u64::from(step.is_none()), "{step:?}");
        assert_eq!(readings(&engine, "car-1"), 300, "{step:?}");
        write(&engine, "car-1", 300, 16).expect("writes go on");

        engine.maintain().expect("the retry succeeds");
        let stats = engine.stats();
        assert_eq!(
            (stats.upper.devices, stats.lower.devices, stats.aged_records),
            (0, 1, 300),
            "{step:?}"
        );
        assert_eq!(readings(&engine, "car-1"), 316, "{step:?}");
        drop(engine);
        let engine = Engine::open(dir.path(), options).expect("reopen");
        assert_eq!(readings(&engine, "car-1"), 316, "{step:?}");
        assert_eq!(engine.stats().lower.devices, 1, "{step:?}");
    }
}
