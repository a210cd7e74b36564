//! Maintenance costs what changed, not how many devices exist: a pass over a segment that three
//! devices wrote visits the same number of mapping-table entries whether 10 or 1,000,000
//! devices are registered. Counted (`PassTimes::devices_visited`), not timed: the count is
//! deterministic, and a full scan of the table would show as a million visits (or, made any
//! other way, as a walk of the mapping table: `Stats::mapping_table_scans`).

mod common;

use common::*;
use roamkv_engine::{Durability, Engine, Options, Record};

const DEVICES_MANY: usize = 1_000_000;

/// Three devices write a segment of their own, which is then aged out by one pass: returns the
/// devices that pass visited.
fn visits_of_one_pass(engine: &Engine, clock: &roamkv_engine::ManualClock, round: i64) -> u64 {
    let before = engine.stats();
    for device in ["car-1", "car-2", "car-3"] {
        for ts in 0..100 {
            let ts = round * 1_000 + ts;
            engine
                .put(device, "speed", ts, &value(device, "speed", ts, 40))
                .expect("put");
        }
    }
    settle(engine, clock);
    let after = engine.stats();
    assert_eq!(
        after.segments_aged - before.segments_aged,
        1,
        "one segment (the three devices') left the log"
    );
    assert_eq!(after.upper.records, 0, "every reading left the log");
    assert_eq!(
        after.mapping_table_scans, before.mapping_table_scans,
        "maintenance walked the whole mapping table"
    );
    after.passes.devices_visited - before.passes.devices_visited
}

/// `count` devices, one reading each, in batches; then their segments leave the log.
fn register(engine: &Engine, clock: &roamkv_engine::ManualClock, count: usize) {
    let names: Vec<String> = (0..count).map(|i| format!("sensor-box-{i:07}")).collect();
    for chunk in names.chunks(10_000) {
        let records: Vec<Record> = chunk
            .iter()
            .map(|name| Record::at_ms(name, "t", 1, b"21.5"))
            .collect();
        engine.put_batch(&records).expect("put_batch");
    }
    settle(engine, clock);
    assert_eq!(engine.stats().upper.records, 0);
}

#[test]
fn a_pass_costs_what_its_segment_holds_not_how_many_devices_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        durability: Durability::None,
        segment_bytes: 64 << 20,
        ..options(&clock)
    };
    let engine = Engine::open(dir.path(), options).expect("open");
    register(&engine, &clock, 10);
    // The first round registers the three (their REGISTER records are in the segment too).
    visits_of_one_pass(&engine, &clock, 1);
    let few = visits_of_one_pass(&engine, &clock, 2);
    assert!(
        (3..=6).contains(&few),
        "a pass over three devices' segment visits each of them once or twice: {few}"
    );

    register(&engine, &clock, DEVICES_MANY);
    assert!(engine.stats().devices >= DEVICES_MANY as u64);
    let many = visits_of_one_pass(&engine, &clock, 3);
    assert_eq!(
        many, few,
        "with {DEVICES_MANY} devices registered a pass visited {many} devices, with 10 it \
         visited {few}"
    );
}
