//! Power cuts against a model. Random puts, departures, maintenance (migrations, retirement,
//! recycling) and reads run on an engine whose commit log lives in the fault-injecting storage
//! (tests/common/fault_storage.rs); at random moments — between operations, or in the middle of
//! a write, an fdatasync, a rename or a directory sync — the power is cut: everything not made
//! durable may be lost, page by page, or torn. The engine is abandoned as a dead process (its
//! lower tier loses its memtable) and reopened, and the recovered state is compared with the
//! model:
//! - `sync`: every acknowledged write is there, nothing that was never written is, and the one
//!   operation in flight at the cut is there wholly or not at all (a batch is atomic).
//! - `none`: nothing is promised durable, but each device's readings are its readings after some
//!   prefix of its own operations (no hole, nothing invented, departures not undone).
//!
//! Seeded and deterministic; the number of seeds is small enough for CI (a few seconds) and
//! `ROAMKV_POWER_CUT_SEEDS` runs more.

mod common;

use std::collections::BTreeMap;

use common::fault_storage::{FaultFs, Op};
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roamkv_engine::{Durability, Engine, ManualClock, Options, Record};
use std::sync::Arc;

const DEVICES: [&str; 5] = ["car-1", "car-2", "drone-a", "phone-x", "phone-y"];
const SENSORS: [&str; 2] = ["alt", "speed"];

/// One device's readings: (sensor, ts) -> value.
type DeviceState = BTreeMap<(String, i64), Vec<u8>>;
type Model = BTreeMap<String, DeviceState>;

enum Step {
    Put(Vec<(String, String, i64, Vec<u8>)>),
    Depart(String),
}

fn apply(model: &mut Model, step: &Step) {
    match step {
        Step::Put(records) => {
            for (d, s, ts, v) in records {
                model
                    .entry(d.clone())
                    .or_default()
                    .insert((s.clone(), *ts), v.clone());
            }
        }
        Step::Depart(d) => {
            model.remove(d);
        }
    }
}

fn devices_of(step: &Step) -> Vec<String> {
    match step {
        Step::Put(records) => records.iter().map(|r| r.0.clone()).collect(),
        Step::Depart(d) => vec![d.clone()],
    }
}

fn recovered(engine: &Engine) -> Model {
    let mut model = Model::new();
    for device in DEVICES {
        let readings = engine
            .scan(device, None, i64::MIN, i64::MAX)
            .unwrap_or_else(|e| panic!("scan {device} after recovery: {e}"));
        if !readings.is_empty() {
            model.insert(
                device.to_string(),
                readings
                    .into_iter()
                    .map(|r| ((r.sensor, r.ts_ns), r.value))
                    .collect(),
            );
        }
    }
    model
}

fn open(dir: &std::path::Path, fs: &FaultFs, clock: &Arc<ManualClock>, d: Durability) -> Engine {
    Engine::open(
        dir,
        Options {
            durability: d,
            storage: fs.storage(),
            log_bytes_max: Some(16 << 20),
            ..options(clock)
        },
    )
    .unwrap_or_else(|e| panic!("reopen after a power cut: {e}"))
}

fn random_step(rng: &mut StdRng) -> Step {
    if rng.random_range(0..8) == 0 {
        return Step::Depart(DEVICES[rng.random_range(0..DEVICES.len())].to_string());
    }
    let n = rng.random_range(1..5);
    Step::Put(
        (0..n)
            .map(|_| {
                let len = rng.random_range(0..5000);
                (
                    DEVICES[rng.random_range(0..DEVICES.len())].to_string(),
                    SENSORS[rng.random_range(0..SENSORS.len())].to_string(),
                    rng.random_range(0..40),
                    (0..len).map(|_| rng.random()).collect(),
                )
            })
            .collect(),
    )
}

fn run_step(engine: &Engine, step: &Step) -> roamkv_engine::Result<()> {
    match step {
        Step::Put(records) => {
            let batch: Vec<Record<'_>> = records
                .iter()
                .map(|(d, s, ts, v)| Record {
                    device: d,
                    sensor: s,
                    ts_ns: *ts,
                    value: v,
                })
                .collect();
            engine.put_batch(&batch)
        }
        Step::Depart(d) => engine.depart(d),
    }
}

/// What one seed did.
#[derive(Default, Debug)]
struct Tally {
    steps: u64,
    cuts: u64,
    cuts_mid_operation: u64,
    in_flight_kept: u64,
}

fn run(seed: u64, durability: Durability, steps: usize) -> Tally {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::new(1 << 30);
    let clock = clock();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut engine = Some(open(dir.path(), &fs, &clock, durability));
    let mut model = Model::new();
    // Per device, its states since the last recovery (none mode: any of them may come back).
    let mut histories: BTreeMap<String, Vec<Option<DeviceState>>> = BTreeMap::new();
    let mut tally = Tally::default();
    for step_no in 0..steps {
        let e = engine.as_ref().expect("open");
        let generation = fs.generation();
        let mut in_flight = None;
        match rng.random_range(0..100) {
            0..70 => {
                let step = random_step(&mut rng);
                let before: Vec<(String, Option<DeviceState>)> = devices_of(&step)
                    .into_iter()
                    .map(|d| (d.clone(), model.get(&d).cloned()))
                    .collect();
                for (d, state) in before {
                    histories.entry(d).or_insert_with(|| vec![state]);
                }
                match run_step(e, &step) {
                    Ok(()) => {
                        apply(&mut model, &step);
                        for d in devices_of(&step) {
                            let now = model.get(&d).cloned();
                            histories.entry(d).or_default().push(now);
                        }
                    }
                    Err(_) => in_flight = Some(step),
                }
            }
            70..80 => {
                clock.advance_ms(rng.random_range(1..3) * MANAGEMENT_MS / 2);
                let _ = e.maintain();
            }
            80..90 => {
                let op = [Op::Write, Op::Sync, Op::Rename, Op::SyncDir][rng.random_range(0..4)];
                fs.cut_at(op, rng.random_range(1..4), rng.random());
            }
            90..95 => {
                fs.power_cut(&mut rng);
            }
            _ => {
                // A read while running: the engine agrees with the model (unless it died).
                let device = DEVICES[rng.random_range(0..DEVICES.len())];
                if let Ok(readings) = e.scan(device, None, i64::MIN, i64::MAX)
                    && fs.generation() == generation
                    && durability == Durability::Sync
                {
                    let got: DeviceState = readings
                        .into_iter()
                        .map(|r| ((r.sensor, r.ts_ns), r.value))
                        .collect();
                    let want = model.get(device).cloned().unwrap_or_default();
                    assert_eq!(
                        got, want,
                        "seed {seed} step {step_no}: live read of {device}"
                    );
                }
            }
        }
        tally.steps += 1;
        if fs.generation() == generation {
            continue;
        }
        // The power went: the process dies with it.
        tally.cuts += 1;
        tally.cuts_mid_operation += u64::from(in_flight.is_some());
        engine.take().expect("open").abandon();
        let e = open(dir.path(), &fs, &clock, durability);
        let got = recovered(&e);
        if durability == Durability::Sync {
            let mut with_in_flight = model.clone();
            if let Some(step) = &in_flight {
                apply(&mut with_in_flight, step);
            }
            if got == with_in_flight && in_flight.is_some() && got != model {
                tally.in_flight_kept += 1;
                model = with_in_flight;
            } else {
                assert!(
                    got == model,
                    "seed {seed} step {step_no}: recovered state is neither the acknowledged \
                     one nor that plus the operation in flight\n got: {:?}\nwant: {:?}",
                    summary(&got),
                    summary(&model)
                );
            }
        } else {
            if let Some(step) = &in_flight {
                let mut with = model.clone();
                apply(&mut with, step);
                for d in devices_of(step) {
                    histories
                        .entry(d.clone())
                        .or_default()
                        .push(with.get(&d).cloned());
                }
            }
            for device in DEVICES {
                let came_back = got.get(device).cloned();
                let history = histories
                    .get(device)
                    .cloned()
                    .unwrap_or_else(|| vec![model.get(device).cloned()]);
                assert!(
                    history.contains(&came_back),
                    "seed {seed} step {step_no}: {device} came back in a state it never had: {:?}",
                    came_back.as_ref().map(|s| s.len())
                );
            }
            model = got;
        }
        histories.clear();
        engine = Some(e);
    }
    fs.disarm();
    if let Some(e) = engine.take() {
        e.close().expect("close");
    }
    tally
}

fn summary(model: &Model) -> Vec<(String, usize)> {
    model.iter().map(|(d, s)| (d.clone(), s.len())).collect()
}

fn seeds() -> u64 {
    std::env::var("ROAMKV_POWER_CUT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

#[test]
fn sync_mode_keeps_every_acknowledged_write_through_power_cuts() {
    let mut total = Tally::default();
    for seed in 0..seeds() {
        let t = run(seed, Durability::Sync, 300);
        total.steps += t.steps;
        total.cuts += t.cuts;
        total.cuts_mid_operation += t.cuts_mid_operation;
        total.in_flight_kept += t.in_flight_kept;
    }
    println!("sync: {total:?}");
    // The test must have exercised what it claims to.
    assert!(total.cuts >= 20, "{total:?}");
    assert!(total.cuts_mid_operation >= 5, "{total:?}");
}

#[test]
fn none_mode_recovers_each_device_to_a_state_it_had() {
    let mut total = Tally::default();
    for seed in 100..100 + seeds() {
        let t = run(seed, Durability::None, 300);
        total.steps += t.steps;
        total.cuts += t.cuts;
        total.cuts_mid_operation += t.cuts_mid_operation;
    }
    println!("none: {total:?}");
    assert!(total.cuts >= 20, "{total:?}");
}
