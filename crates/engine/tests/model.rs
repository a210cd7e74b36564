//! Random puts, gets, scans, departures, trims, clock jumps, maintenance and restarts, checked against
//! a BTreeMap model. Seeded and bounded: deterministic operation sequences.

mod common;

use std::collections::BTreeMap;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roamkv_engine::{LowerTierKind, Record};

type Model = BTreeMap<(String, String, i64), Vec<u8>>;

const DEVICES: [&str; 6] = ["car-1", "car-2", "drone-a", "drone-b", "phone-x", "phone-y"];
const SENSORS: [&str; 3] = ["alt", "speed", "temp"];

fn model_scan(
    model: &Model,
    device: &str,
    sensor: Option<&str>,
    from: i64,
    to: i64,
) -> Vec<(String, i64, Vec<u8>)> {
    model
        .iter()
        .filter(|((d, s, ts), _)| {
            d == device && sensor.is_none_or(|x| x == s) && (from..to).contains(ts)
        })
        .map(|((_, s, ts), v)| (s.clone(), *ts, v.clone()))
        .collect()
}

fn run(seed: u64, lower: LowerTierKind, operations: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let mut rng = StdRng::seed_from_u64(seed);
    let options = roamkv_engine::Options {
        lower_tier: lower,
        // Few windows per device: consolidation into the settled space runs in the model too.
        windows_per_device_max: 3,
        ..options(&clock)
    };
    let reopen = || roamkv_engine::Engine::open(dir.path(), options.clone()).expect("open");
    let mut engine = Some(reopen());
    let mut model = Model::new();
    let mut restarts = 0;
    let mut moved = 0;
    let mut consolidations = 0;
    for step in 0..operations {
        let e = engine.as_ref().expect("open");
        let device = DEVICES[rng.random_range(0..DEVICES.len())];
        let sensor = SENSORS[rng.random_range(0..SENSORS.len())];
        match rng.random_range(0..100) {
            0..45 => {
                let n = rng.random_range(1..6);
                let batch: Vec<(String, i64, Vec<u8>)> = (0..n)
                    .map(|_| {
                        let len = rng.random_range(0..300);
                        (
                            DEVICES[rng.random_range(0..DEVICES.len())].to_string(),
                            rng.random_range(0..60),
                            (0..len).map(|_| rng.random()).collect(),
                        )
                    })
                    .collect();
                let records: Vec<Record<'_>> = batch
                    .iter()
                    .map(|(d, ts, v)| Record {
                        device: d,
                        sensor,
                        ts_ns: *ts,
                        value: v,
                    })
                    .collect();
                e.put_batch(&records).expect("put");
                for (d, ts, v) in batch {
                    model.insert((d, sensor.to_string(), ts), v);
                }
            }
            45..60 => {
                let ts = rng.random_range(0..60);
                let want = model
                    .get(&(device.to_string(), sensor.to_string(), ts))
                    .cloned();
                assert_eq!(
                    e.get(device, sensor, ts).expect("get"),
                    want,
                    "seed {seed} step {step}: get {device}/{sensor}/{ts}"
                );
            }
            60..72 => {
                let from = rng.random_range(-5..60);
                let to = from + rng.random_range(0..40);
                let sensor = rng.random_bool(0.5).then_some(sensor);
                let got: Vec<(String, i64, Vec<u8>)> = e
                    .scan(device, sensor, from, to)
                    .expect("scan")
                    .into_iter()
                    .map(|r| (r.sensor, r.ts_ns, r.value))
                    .collect();
                assert_eq!(
                    got,
                    model_scan(&model, device, sensor, from, to),
                    "seed {seed} step {step}: scan {device} {sensor:?} [{from},{to})"
                );
            }
            72..76 => {
                e.depart(device).expect("depart");
                model.retain(|(d, _, _), _| d != device);
            }
            76..78 => {
                let before = rng.random_range(0..60);
                e.trim_before(device, before).expect("trim");
                model.retain(|(d, _, ts), _| d != device || *ts >= before);
            }
            78..90 => clock.advance_ms(rng.random_range(0..MANAGEMENT_MS / 2)),
            90..96 => e.maintain().expect("maintain"),
            _ => {
                let s = e.stats();
                moved += s.aged_records;
                consolidations += s.consolidations;
                drop(engine.take());
                engine = Some(reopen());
                restarts += 1;
            }
        }
    }
    // Everything, at the end, after one more restart.
    drop(engine.take());
    let e = reopen();
    for device in DEVICES {
        let got: Vec<(String, i64, Vec<u8>)> = e
            .scan(device, None, i64::MIN, i64::MAX)
            .expect("scan")
            .into_iter()
            .map(|r| (r.sensor, r.ts_ns, r.value))
            .collect();
        assert_eq!(
            got,
            model_scan(&model, device, None, i64::MIN, i64::MAX),
            "seed {seed}: final {device}"
        );
    }
    assert!(
        restarts > 0 && moved > 0,
        "seed {seed}: the run exercised too little ({restarts} restarts, {moved} readings moved)"
    );
    eprintln!(
        "seed {seed} {lower:?}: {restarts} restarts, {moved} readings moved, {consolidations} consolidations"
    );
}

/// Seeds per test: 3 in the test suite; set ROAMKV_MODEL_SEEDS for a longer soak.
fn seeds() -> u64 {
    std::env::var("ROAMKV_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

#[test]
fn model_rocksdb_lower_tier() {
    for seed in 1..=seeds() {
        run(seed, LowerTierKind::RocksDb, 600);
    }
}

#[test]
fn model_leveldb_lower_tier() {
    for seed in 100..100 + seeds().div_ceil(3) {
        run(seed, LowerTierKind::LevelDb, 600);
    }
}
