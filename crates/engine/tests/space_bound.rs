//! The lower tier's space stays bounded however fast devices come and go (issue 29): the
//! mobility mix of the bench (most devices leave within their management time, the rest stay
//! 1.2-2 management times, a few trucks stay for long), at an ingest rate at which each device
//! gets a window with nearly every segment, on a simulated clock. Checked after every simulated
//! second: window files within their space bound, the settled space no larger than what the
//! trucks still here wrote, and, once every truck has left, no settled bytes at all.
//!
//! Before the fix the bench's stayers were consolidated into the settled space by their count
//! of windows, seconds before they left, and what they left there was never reclaimed: the
//! lower tier grew without end.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roamkv_engine::limits::WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX;
use roamkv_engine::{Durability, Engine, Options, Record, Stats};

const VALUE_BYTES: usize = 1000;
const DEVICES_AT_ONCE: usize = 128;
const TRUCKS: usize = 4;
/// The dead bytes windows may hold before their space bound applies, lowered from the
/// engine's 64 MiB so that a small store is held to it.
const DEAD_BYTES_MIN: u64 = 1 << 20;
const STEP_MS: u64 = 50;
/// Readings written per step: 8 MB/s of 1 MiB segments, eight segments a second.
const READINGS_PER_STEP: usize = 400;
const BATCH: usize = 16;

struct Device {
    name: String,
    leaves_at_ms: u64,
    next_ts: i64,
    written_bytes: u64,
    gone: bool,
}

/// Lifetimes as the bench's workload draws them: 90 % leave within the management time, the
/// rest stay 1.2-2 of it; a truck stays 6-8 (past the settle age, so it reaches the settled
/// space).
fn lifetime_ms(rng: &mut StdRng, truck: bool) -> u64 {
    let m = MANAGEMENT_MS as f64;
    let factor = if truck {
        rng.random_range(6.0..8.0)
    } else if rng.random::<f64>() < 0.9 {
        rng.random_range(0.1..1.0)
    } else {
        rng.random_range(1.2..2.0)
    };
    (m * factor) as u64
}

fn window_bound_holds(s: &Stats) -> bool {
    s.window_file_bytes * 100 <= s.window_live_bytes * WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX
        || s.window_file_bytes.saturating_sub(s.window_live_bytes) <= DEAD_BYTES_MIN
}

#[test]
fn the_lower_tier_reclaims_as_fast_as_devices_leave() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        durability: Durability::None,
        window_dead_bytes_min: DEAD_BYTES_MIN,
        ..options(&clock)
    };
    let engine = Engine::open(dir.path(), options).expect("open");
    let mut rng = StdRng::seed_from_u64(29);
    let mut started = 0usize;
    let mut new_device = |now_ms: u64, rng: &mut StdRng, truck: bool| {
        started += 1;
        Device {
            name: format!("{}-{started}", if truck { "truck" } else { "car" }),
            leaves_at_ms: now_ms + lifetime_ms(rng, truck),
            next_ts: 0,
            written_bytes: 0,
            gone: false,
        }
    };
    let mut now_ms = START_MS;
    let mut cars: Vec<Device> = (0..DEVICES_AT_ONCE)
        .map(|_| {
            let mut car = new_device(now_ms, &mut rng, false);
            // Staggered, so that the first devices do not all leave at once.
            car.leaves_at_ms = now_ms + rng.random_range(0..MANAGEMENT_MS);
            car
        })
        .collect();
    let mut trucks: Vec<Device> = (0..TRUCKS)
        .map(|_| new_device(now_ms, &mut rng, true))
        .collect();
    let value = vec![0x5a; VALUE_BYTES];
    let steps = 20 * MANAGEMENT_MS / STEP_MS;
    let mut checks = 0;
    for step in 0..steps {
        for _ in 0..READINGS_PER_STEP / BATCH {
            let truck = rng.random_range(0..trucks.len());
            let device = if rng.random_range(0..DEVICES_AT_ONCE) < TRUCKS && !trucks[truck].gone {
                &mut trucks[truck]
            } else {
                &mut cars[rng.random_range(0..DEVICES_AT_ONCE)]
            };
            let records: Vec<Record> = (0..BATCH as i64)
                .map(|k| Record {
                    device: &device.name,
                    sensor: "gps",
                    ts_ns: device.next_ts + k,
                    value: &value,
                })
                .collect();
            engine.put_batch(&records).expect("put");
            device.next_ts += BATCH as i64;
            device.written_bytes += (BATCH * VALUE_BYTES) as u64;
        }
        clock.advance_ms(STEP_MS);
        now_ms += STEP_MS;
        for car in cars.iter_mut().filter(|c| now_ms >= c.leaves_at_ms) {
            engine.depart(&car.name).expect("depart");
            *car = new_device(now_ms, &mut rng, false);
        }
        for truck in trucks
            .iter_mut()
            .filter(|t| now_ms >= t.leaves_at_ms && !t.gone)
        {
            engine.depart(&truck.name).expect("depart truck");
            truck.gone = true;
        }
        engine.maintain().expect("maintain");
        if step % (1000 / STEP_MS) != 0 {
            continue;
        }
        let s = engine.stats();
        let t_s = (now_ms - START_MS) / 1000;
        assert!(
            window_bound_holds(&s),
            "{t_s} s: window files {} B for {} live B (bound {} % past {} dead B)",
            s.window_file_bytes,
            s.window_live_bytes,
            WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX,
            DEAD_BYTES_MIN
        );
        // A departure's space returns when its record's segment leaves the log: within 1.5
        // management times (sealed at half of one, due one later).
        let trucks_wrote: u64 = trucks
            .iter()
            .filter(|t| !t.gone || now_ms < t.leaves_at_ms + 2 * MANAGEMENT_MS)
            .map(|t| t.written_bytes)
            .sum();
        assert!(
            s.settled_file_bytes <= trucks_wrote + trucks_wrote / 2 + DEAD_BYTES_MIN,
            "{t_s} s: the settled space holds {} B, while the trucks here (or gone less than two \
             management times ago) wrote {} B (consolidated into it: {} B)",
            s.settled_file_bytes,
            trucks_wrote,
            s.consolidated_to_settled_bytes
        );
        checks += 1;
    }
    assert!(
        trucks.iter().all(|t| t.gone),
        "every truck left within the run"
    );
    let s = engine.stats();
    assert!(
        s.consolidated_to_settled_bytes > 0 && s.settled_reclaims > 0,
        "the trucks went through the settled space and left it: {s:?}"
    );
    assert_eq!(
        s.settled_file_bytes, 0,
        "the settled space is empty once every truck left"
    );
    assert!(s.windows_dropped > 0 && s.consolidations > 0, "{s:?}");
    assert!(checks >= 19 * MANAGEMENT_MS / 1000, "{checks} checks");
}
