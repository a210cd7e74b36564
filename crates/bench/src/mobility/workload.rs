//! The TPCx-IoT mobility workload (paper 002's benchmark), one generator per writer thread.
//!
//! Modelled on the public TPCx-IoT kit: a key is a device (the kit's client: one substation or
//! vehicle) + a sensor (160 sensor names per device, picked uniformly) + a timestamp (per device,
//! advancing 100 ms per reading); values are random bytes (1000 by default); 99.995 % of
//! operations are puts and 0.005 % queries, a query being the kit's pair: the last 5 s of one
//! sensor, and a random 5 s window of the previous 30 minutes.
//!
//! The mobility paper 002 adds: devices arrive over time, and each leaves *before* its
//! management time ends with probability `depart_probability` (default 0.9). A device that
//! stays lives 1.2-2x the management time (so its readings leave the log for the lower tier) and then leaves too, so the mix of
//! arriving, leaving and settled devices is steady over a long run. A departure is a `depart`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub const SENSORS_PER_DEVICE: u32 = 160;
pub const READING_INTERVAL_MS: i64 = 100;
/// The kit's query windows.
pub const QUERY_WINDOW_MS: i64 = 5_000;
pub const QUERY_HISTORY_MS: i64 = 30 * 60 * 1000;
/// Timestamps start here (2023-11-14), as a real sensor stream's would.
pub const TS_BASE_MS: i64 = 1_700_000_000_000;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkloadConfig {
    pub value_bytes: usize,
    /// Devices each writer thread keeps active at once (a slot is refilled when a device leaves).
    pub devices_per_thread: usize,
    pub depart_probability: f64,
    pub management_time_ms: u64,
    /// Fraction of operations that are queries (the kit: 0.00005).
    pub query_fraction: f64,
    /// Readings per put batch.
    pub batch_records: usize,
    pub seed: u64,
    /// The queries' windows: the latest `query_window_ms` of one sensor, and a random window
    /// of that length in the `query_history_ms` before it (the kit: 5 s and 30 min).
    #[serde(default = "default_query_window_ms")]
    pub query_window_ms: i64,
    #[serde(default = "default_query_history_ms")]
    pub query_history_ms: i64,
}

fn default_query_window_ms() -> i64 {
    QUERY_WINDOW_MS
}

fn default_query_history_ms() -> i64 {
    QUERY_HISTORY_MS
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            value_bytes: 1000,
            devices_per_thread: 32,
            depart_probability: 0.9,
            management_time_ms: 4_000,
            query_fraction: 0.000_05,
            batch_records: 16,
            seed: 2022,
            query_window_ms: QUERY_WINDOW_MS,
            query_history_ms: QUERY_HISTORY_MS,
        }
    }
}

/// One operation for the engine under test.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Readings to write as one batch: (device slot, sensor, ts); values come from `value_for`.
    Put(Vec<(usize, u32, i64)>),
    /// The kit's query: one device and sensor, [from, to).
    Query {
        slot: usize,
        sensor: u32,
        from_ms: i64,
        to_ms: i64,
    },
    /// The device in this slot leaves; a new one takes the slot.
    Depart { slot: usize },
}

#[derive(Debug, Clone)]
struct Device {
    name: String,
    next_ts_ms: i64,
    /// Wall-clock (or simulated) time at which it leaves.
    leaves_at_ms: u64,
    stays: bool,
}

/// Generates one writer thread's operations. `now_ms` is supplied by the caller (wall clock in
/// the benchmark, a counter in tests), so lifetimes are in the same time as management time.
pub struct Generator {
    config: WorkloadConfig,
    rng: StdRng,
    thread: usize,
    devices: Vec<Device>,
    next_device: u64,
    pub devices_started: u64,
    pub devices_staying: u64,
}

impl Generator {
    pub fn new(config: &WorkloadConfig, thread: usize, now_ms: u64) -> Generator {
        let rng = StdRng::seed_from_u64(
            config.seed ^ (thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let mut g = Generator {
            config: config.clone(),
            rng,
            thread,
            devices: Vec::new(),
            next_device: 0,
            devices_started: 0,
            devices_staying: 0,
        };
        for _ in 0..config.devices_per_thread {
            // Stagger the first devices' lifetimes so that they do not all leave at once.
            let device = g.new_device(now_ms);
            g.devices.push(device);
        }
        g
    }

    fn new_device(&mut self, now_ms: u64) -> Device {
        let stays = self.rng.random::<f64>() >= self.config.depart_probability;
        let m = self.config.management_time_ms as f64;
        let lifetime = if stays {
            self.rng.random_range(1.2 * m..2.0 * m)
        } else {
            self.rng.random_range(0.1 * m..0.9 * m)
        };
        self.next_device += 1;
        self.devices_started += 1;
        self.devices_staying += stays as u64;
        Device {
            name: format!("t{}-dev{}", self.thread, self.next_device),
            next_ts_ms: TS_BASE_MS,
            leaves_at_ms: now_ms + lifetime as u64,
            stays,
        }
    }

    /// Device slots (devices active at once) of this generator.
    pub fn slots(&self) -> usize {
        self.devices.len()
    }

    pub fn device_name(&self, slot: usize) -> &str {
        &self.devices[slot].name
    }

    pub fn slot_stays(&self, slot: usize) -> bool {
        self.devices[slot].stays
    }

    /// The next operation at time `now_ms`.
    pub fn next(&mut self, now_ms: u64) -> Op {
        if let Some(slot) = self.devices.iter().position(|d| now_ms >= d.leaves_at_ms) {
            return Op::Depart { slot };
        }
        if self.rng.random::<f64>() < self.config.query_fraction * self.config.batch_records as f64
        {
            let slot = self.rng.random_range(0..self.devices.len());
            let sensor = self.rng.random_range(0..SENSORS_PER_DEVICE);
            let latest = self.devices[slot].next_ts_ms;
            // Alternate the kit's two query kinds.
            let window = self.config.query_window_ms;
            let (from_ms, to_ms) = if self.rng.random_bool(0.5) {
                (latest - window, latest)
            } else {
                let back = self
                    .rng
                    .random_range(0..self.config.query_history_ms.max(1));
                (latest - back - window, latest - back)
            };
            return Op::Query {
                slot,
                sensor,
                from_ms,
                to_ms,
            };
        }
        let mut batch = Vec::with_capacity(self.config.batch_records);
        for _ in 0..self.config.batch_records {
            let slot = self.rng.random_range(0..self.devices.len());
            let sensor = self.rng.random_range(0..SENSORS_PER_DEVICE);
            let device = &mut self.devices[slot];
            let ts = device.next_ts_ms;
            device.next_ts_ms += READING_INTERVAL_MS;
            batch.push((slot, sensor, ts));
        }
        Op::Put(batch)
    }

    /// Replaces the device in `slot` (after its departure was executed).
    pub fn replace(&mut self, slot: usize, now_ms: u64) {
        self.devices[slot] = self.new_device(now_ms);
    }
}

pub fn sensor_name(sensor: u32) -> String {
    format!("s{sensor:03}")
}

/// Incompressible values, reproducible from the key: a window into a fixed random pool. The
/// benchmark checks values read back against this.
pub struct ValuePool {
    pool: Vec<u8>,
    value_bytes: usize,
}

impl ValuePool {
    pub fn new(value_bytes: usize, seed: u64) -> ValuePool {
        let mut rng = StdRng::seed_from_u64(seed);
        let pool = (0..(1 << 20) + value_bytes).map(|_| rng.random()).collect();
        ValuePool { pool, value_bytes }
    }

    pub fn value_for(&self, device: &str, sensor: u32, ts_ms: i64) -> &[u8] {
        // FNV-1a over the key picks the window.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in device
            .bytes()
            .chain(sensor.to_le_bytes())
            .chain(ts_ms.to_le_bytes())
        {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
        let start = (h % (1 << 20)) as usize;
        &self.pool[start..start + self.value_bytes]
    }
}

/// What the user handed the engine for one reading: the key's parts and the value (the same
/// definition roamkv's own stats use).
pub fn user_bytes(device: &str, sensor: &str, value_bytes: usize) -> u64 {
    (device.len() + sensor.len() + 8 + value_bytes) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: &WorkloadConfig, ops: usize) -> (Generator, Vec<Op>) {
        let mut g = Generator::new(config, 0, 0);
        let mut out = Vec::new();
        for i in 0..ops {
            let now = i as u64; // one simulated ms per operation
            let op = g.next(now);
            if let Op::Depart { slot } = op {
                g.replace(slot, now);
            }
            out.push(op);
        }
        (g, out)
    }

    #[test]
    fn sensors_are_uniform_and_timestamps_advance_100_ms_per_device() {
        let config = WorkloadConfig {
            management_time_ms: 1_000_000,
            query_fraction: 0.0,
            ..WorkloadConfig::default()
        };
        let (g, ops) = run(&config, 20_000);
        let mut per_sensor = vec![0u32; SENSORS_PER_DEVICE as usize];
        let mut last_ts: std::collections::HashMap<usize, i64> = Default::default();
        for op in &ops {
            if let Op::Put(batch) = op {
                for &(slot, sensor, ts) in batch {
                    per_sensor[sensor as usize] += 1;
                    if let Some(prev) = last_ts.insert(slot, ts) {
                        assert_eq!(ts - prev, READING_INTERVAL_MS, "{}", g.device_name(slot));
                    }
                }
            }
        }
        let total: u32 = per_sensor.iter().sum();
        let expected = total as f64 / SENSORS_PER_DEVICE as f64;
        // 320k readings over 160 sensors: each within 10 % of 2000.
        for (s, n) in per_sensor.iter().enumerate() {
            assert!(
                (*n as f64 - expected).abs() < expected * 0.1,
                "sensor {s}: {n} vs {expected}"
            );
        }
    }

    #[test]
    fn departure_probability_and_lifetimes_follow_the_config() {
        let config = WorkloadConfig {
            management_time_ms: 100,
            query_fraction: 0.0,
            ..WorkloadConfig::default()
        };
        let (g, ops) = run(&config, 400_000);
        let departures = ops
            .iter()
            .filter(|op| matches!(op, Op::Depart { .. }))
            .count() as u64;
        assert!(departures > 2000, "{departures}");
        let stay_ratio = g.devices_staying as f64 / g.devices_started as f64;
        assert!(
            (stay_ratio - 0.1).abs() < 0.02,
            "{stay_ratio} of devices stayed, expected 0.1"
        );

        let none_leave = WorkloadConfig {
            depart_probability: 0.0,
            ..config
        };
        let (g, _) = run(&none_leave, 50_000);
        assert_eq!(
            g.devices_staying, g.devices_started,
            "depart probability 0: every device stays"
        );
    }

    #[test]
    fn queries_are_rare_and_use_the_kits_windows() {
        let config = WorkloadConfig {
            management_time_ms: 1_000_000,
            query_fraction: 0.001,
            ..WorkloadConfig::default()
        };
        let (_, ops) = run(&config, 100_000);
        let queries: Vec<&Op> = ops
            .iter()
            .filter(|op| matches!(op, Op::Query { .. }))
            .collect();
        let puts: usize = ops
            .iter()
            .map(|op| if let Op::Put(b) = op { b.len() } else { 0 })
            .sum();
        let fraction = queries.len() as f64 / (queries.len() + puts) as f64;
        assert!((fraction - 0.001).abs() < 0.0004, "{fraction}");
        for q in queries {
            if let Op::Query { from_ms, to_ms, .. } = q {
                assert_eq!(to_ms - from_ms, QUERY_WINDOW_MS);
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_operations() {
        let config = WorkloadConfig::default();
        assert_eq!(run(&config, 2000).1, run(&config, 2000).1);
        let other = WorkloadConfig {
            seed: 7,
            ..config.clone()
        };
        assert_ne!(run(&config, 2000).1, run(&other, 2000).1);
    }

    #[test]
    fn values_are_reproducible_and_incompressible_enough() {
        let pool = ValuePool::new(1000, 1);
        assert_eq!(pool.value_for("d", 1, 5), pool.value_for("d", 1, 5));
        assert_ne!(pool.value_for("d", 1, 5), pool.value_for("d", 1, 6));
        let distinct: std::collections::HashSet<u8> =
            pool.value_for("d", 2, 9).iter().copied().collect();
        assert!(distinct.len() > 200);
        assert_eq!(user_bytes("dev", "s001", 1000), 3 + 4 + 8 + 1000);
    }
}
