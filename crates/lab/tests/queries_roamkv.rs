//! roamkv and SQLite answer the same sensor questions with the same row counts, in both of
//! roamkv's tiers. Needs the crate feature `engine` (the CLI build and the workspace tests have it).
#![cfg(feature = "engine")]

use roamkv_lab::queries::roamkv_store::RoamkvSensor;
use roamkv_lab::queries::sensor::{self, SensorSpec, SensorStore};

#[test]
fn roamkv_and_sqlite_return_the_same_rows_in_both_tiers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SensorSpec {
        devices: 12,
        sensors_per_device: 4,
        readings_per_sensor: 150,
        value_bytes: 16,
        seed: 8,
    };
    let sqlite = sensor::SqliteSensor::load(dir.path(), &spec).expect("sqlite");
    let mut roamkv = RoamkvSensor::load(&dir.path().join("roamkv"), &spec).expect("roamkv");
    for migrated in [false, true] {
        if migrated {
            roamkv.migrate_all().expect("migrate");
        }
        for name in sensor::QUERY_NAMES {
            for q in sensor::params(&spec, name, 6) {
                let a = sqlite.answer(&q).expect("sqlite answer");
                let b = roamkv.answer(&q).expect("roamkv answer");
                assert_eq!(a, b, "{name} ({}) {q:?}", roamkv.name());
            }
        }
    }
    roamkv.engine.close().expect("close");
    let dir = tempfile::tempdir().expect("second tempdir");
    let runs = roamkv_lab::queries::compare::compare(dir.path(), "plain", &spec, 3, &|| Ok(()))
        .expect("compare");
    let stores: std::collections::BTreeSet<&str> = runs.iter().map(|r| r.store.as_str()).collect();
    assert_eq!(
        stores.len(),
        3,
        "sqlite + roamkv upper + roamkv lower: {stores:?}"
    );
}
