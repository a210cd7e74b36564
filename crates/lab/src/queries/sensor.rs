//! The same questions asked of roamkv and of SQLite holding the same sensor readings.
//!
//! Data: `devices` x `sensors_per_device` x `readings_per_sensor` readings, one per second, each a
//! `value_bytes` random value. SQLite holds them in `readings (device, sensor, ts, value)` with
//! primary key (device, sensor, ts) (WITHOUT ROWID: the key is the B-tree order, as in roamkv),
//! plus `watch (device)` listing 10 devices for the join. Queries:
//! - point: one reading by (device, sensor, ts);
//! - range: a device/sensor time window of 100 readings;
//! - set: readings whose value's first byte equals k (no index on values: a full scan in both);
//! - multi: first byte = k and second byte < 64;
//! - join: readings of the devices listed in the second table, one sensor, a 10-reading window
//!   (about 100 rows); roamkv has no tables, so its "second table" is the list held by the caller.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rusqlite::{Connection, params};

use super::sqlquery::{TimingUs, sqlite_err};
use crate::LabError;

pub const DESCRIPTION: &str = "Point = one reading by (device, sensor, ts); range = a device/sensor window of 100 \
readings; set = readings whose value starts with byte k (a full scan in both: neither indexes values); multi = \
first byte k and second byte < 64; join = readings of the 10 devices listed in a second table, one sensor, a \
10-reading window (~100 rows). Warm cache, times per query; every store answers the same parameter sequence \
and the row counts are checked to agree.";

pub const WATCHED_DEVICES: usize = 10;
const TS_START_MS: i64 = 1_700_000_000_000;
const TS_STEP_MS: i64 = 1_000;

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SensorSpec {
    pub devices: usize,
    pub sensors_per_device: usize,
    pub readings_per_sensor: usize,
    pub value_bytes: usize,
    pub seed: u64,
}

impl SensorSpec {
    pub fn total_readings(&self) -> usize {
        self.devices * self.sensors_per_device * self.readings_per_sensor
    }
    pub fn device(&self, d: usize) -> String {
        format!("dev-{d:05}")
    }
    pub fn sensor(&self, s: usize) -> String {
        format!("s{s}")
    }
    pub fn ts(&self, i: usize) -> i64 {
        TS_START_MS + i as i64 * TS_STEP_MS
    }
    /// The value of reading i of (device d, sensor s): deterministic by seed.
    pub fn value(&self, d: usize, s: usize, i: usize) -> Vec<u8> {
        let mut rng =
            StdRng::seed_from_u64(self.seed ^ ((d as u64) << 40) ^ ((s as u64) << 32) ^ i as u64);
        let mut v = vec![0u8; self.value_bytes.max(2)];
        rng.fill_bytes(&mut v);
        v
    }
    pub fn watched(&self) -> Vec<String> {
        (0..WATCHED_DEVICES.min(self.devices))
            .map(|i| self.device(i * self.devices / WATCHED_DEVICES.min(self.devices)))
            .collect()
    }
}

/// One query's parameters.
#[derive(Clone, Debug)]
pub enum SensorQuery {
    Point {
        device: String,
        sensor: String,
        ts: i64,
    },
    Range {
        device: String,
        sensor: String,
        from: i64,
        to: i64,
    },
    Set {
        first: u8,
    },
    Multi {
        first: u8,
        second_below: u8,
    },
    Join {
        sensor: String,
        from: i64,
        to: i64,
    },
}

impl SensorQuery {
    pub fn name(&self) -> &'static str {
        match self {
            SensorQuery::Point { .. } => "point",
            SensorQuery::Range { .. } => "range",
            SensorQuery::Set { .. } => "set",
            SensorQuery::Multi { .. } => "multi",
            SensorQuery::Join { .. } => "join",
        }
    }
}

pub const QUERY_NAMES: [&str; 5] = ["point", "range", "set", "multi", "join"];

/// The seeded parameter sequence of one query type.
pub fn params(spec: &SensorSpec, name: &str, repetitions: usize) -> Vec<SensorQuery> {
    let mut rng = StdRng::seed_from_u64(spec.seed ^ name.len() as u64 ^ 0x5E_4509);
    let n = spec.readings_per_sensor;
    (0..repetitions)
        .map(|_| {
            let device = spec.device(rng.random_range(0..spec.devices));
            let sensor = spec.sensor(rng.random_range(0..spec.sensors_per_device));
            match name {
                "point" => SensorQuery::Point {
                    device,
                    sensor,
                    ts: spec.ts(rng.random_range(0..n)),
                },
                "range" => {
                    let start = rng.random_range(0..=n.saturating_sub(100));
                    SensorQuery::Range {
                        device,
                        sensor,
                        from: spec.ts(start),
                        to: spec.ts(start + 100),
                    }
                }
                "set" => SensorQuery::Set {
                    first: rng.random(),
                },
                "multi" => SensorQuery::Multi {
                    first: rng.random(),
                    second_below: 64,
                },
                _ => {
                    let start = rng.random_range(0..=n.saturating_sub(10));
                    SensorQuery::Join {
                        sensor,
                        from: spec.ts(start),
                        to: spec.ts(start + 10),
                    }
                }
            }
        })
        .collect()
}

/// A store that can answer the five questions; returns the number of result rows.
pub trait SensorStore {
    fn name(&self) -> String;
    fn answer(&self, q: &SensorQuery) -> Result<u64, LabError>;
}

/// SQLite holding the readings.
pub struct SqliteSensor {
    conn: Connection,
}

impl SqliteSensor {
    pub fn load(dir: &Path, spec: &SensorSpec) -> Result<SqliteSensor, LabError> {
        let path = dir.join("sensor.db");
        let conn = Connection::open(&path).map_err(sqlite_err)?;
        conn.execute_batch(
            "DROP TABLE IF EXISTS readings; DROP TABLE IF EXISTS watch;
             CREATE TABLE readings (device TEXT NOT NULL, sensor TEXT NOT NULL, ts INTEGER NOT NULL, value BLOB NOT NULL,
                                    PRIMARY KEY (device, sensor, ts)) WITHOUT ROWID;
             CREATE TABLE watch (device TEXT PRIMARY KEY) WITHOUT ROWID;",
        )
        .map_err(sqlite_err)?;
        let tx = conn.unchecked_transaction().map_err(sqlite_err)?;
        {
            let mut ins = tx
                .prepare("INSERT INTO readings VALUES (?1, ?2, ?3, ?4)")
                .map_err(sqlite_err)?;
            for d in 0..spec.devices {
                for s in 0..spec.sensors_per_device {
                    for i in 0..spec.readings_per_sensor {
                        ins.execute(params![
                            spec.device(d),
                            spec.sensor(s),
                            spec.ts(i),
                            spec.value(d, s, i)
                        ])
                        .map_err(sqlite_err)?;
                    }
                }
            }
            let mut w = tx
                .prepare("INSERT INTO watch VALUES (?1)")
                .map_err(sqlite_err)?;
            for d in spec.watched() {
                w.execute(params![d]).map_err(sqlite_err)?;
            }
        }
        tx.commit().map_err(sqlite_err)?;
        Ok(SqliteSensor { conn })
    }
}

fn count(
    mut stmt: rusqlite::CachedStatement<'_>,
    p: impl rusqlite::Params,
) -> Result<u64, rusqlite::Error> {
    let mut rows = stmt.query(p)?;
    let mut n = 0;
    while let Some(row) = rows.next()? {
        // Read the value so SQLite materialises it, as roamkv returns it.
        let v = row.get_ref(0)?;
        n += u64::from(v.as_blob().map(|b| !b.is_empty()).unwrap_or(true));
    }
    Ok(n)
}

impl SensorStore for SqliteSensor {
    fn name(&self) -> String {
        "sqlite".into()
    }
    fn answer(&self, q: &SensorQuery) -> Result<u64, LabError> {
        let c = &self.conn;
        let r = match q {
            SensorQuery::Point { device, sensor, ts } => count(
                c.prepare_cached("SELECT value FROM readings WHERE device = ?1 AND sensor = ?2 AND ts = ?3").map_err(sqlite_err)?,
                params![device, sensor, ts],
            ),
            SensorQuery::Range { device, sensor, from, to } => count(
                c
                    .prepare_cached("SELECT value, ts FROM readings WHERE device = ?1 AND sensor = ?2 AND ts >= ?3 AND ts < ?4")
                    .map_err(sqlite_err)?,
                params![device, sensor, from, to],
            ),
            SensorQuery::Set { first } => count(
                c.prepare_cached("SELECT value, device, sensor, ts FROM readings WHERE substr(value, 1, 1) = ?1").map_err(sqlite_err)?,
                params![vec![*first]],
            ),
            SensorQuery::Multi { first, second_below } => count(
                c
                    .prepare_cached(
                        "SELECT value, device, sensor, ts FROM readings WHERE substr(value, 1, 1) = ?1 AND substr(value, 2, 1) < ?2",
                    )
                    .map_err(sqlite_err)?,
                params![vec![*first], vec![*second_below]],
            ),
            SensorQuery::Join { sensor, from, to } => count(
                c
                    .prepare_cached(
                        // CROSS JOIN fixes the loop order (watch outside, primary-key lookups inside): without
                        // statistics SQLite may otherwise scan readings.
                        "SELECT r.value, r.device, r.ts FROM watch w CROSS JOIN readings r ON r.device = w.device \
                         WHERE r.sensor = ?1 AND r.ts >= ?2 AND r.ts < ?3",
                    )
                    .map_err(sqlite_err)?,
                params![sensor, from, to],
            ),
        };
        r.map_err(sqlite_err)
    }
}

/// One (file system, store, query) measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SensorRun {
    pub fs: String,
    pub store: String,
    pub query: String,
    pub timing_us: TimingUs,
    pub result_rows: u64,
    pub load_s: f64,
}

pub const RUN_COLUMNS: [&str; 7] = [
    "fs",
    "store",
    "query",
    "rows (total)",
    "mean",
    "median",
    "p95",
];

pub fn run_rows(runs: &[SensorRun]) -> Vec<Vec<String>> {
    runs.iter()
        .map(|r| {
            vec![
                r.fs.clone(),
                r.store.clone(),
                r.query.clone(),
                r.result_rows.to_string(),
                format!("{:.1} us", r.timing_us.mean),
                format!("{:.1} us", r.timing_us.median),
                format!("{:.1} us", r.timing_us.p95),
            ]
        })
        .collect()
}

/// Bar-chart data: categories "fs/query", one series per store (median microseconds).
pub fn chart_series(runs: &[SensorRun]) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
    let mut cats: Vec<String> = Vec::new();
    let mut stores: Vec<String> = Vec::new();
    for r in runs {
        let c = format!("{}/{}", r.fs, r.query);
        if !cats.contains(&c) {
            cats.push(c);
        }
        if !stores.contains(&r.store) {
            stores.push(r.store.clone());
        }
    }
    let series = stores
        .iter()
        .map(|s| {
            let v = cats
                .iter()
                .map(|c| {
                    runs.iter()
                        .find(|r| &r.store == s && &format!("{}/{}", r.fs, r.query) == c)
                        .map(|r| r.timing_us.median)
                        .unwrap_or(0.0)
                })
                .collect();
            (s.clone(), v)
        })
        .collect();
    (cats, series)
}

/// Times every query type on one store; the result row counts are returned for cross-checking.
pub fn measure(
    store: &dyn SensorStore,
    fs: &str,
    spec: &SensorSpec,
    repetitions: usize,
    load_s: f64,
) -> Result<Vec<SensorRun>, LabError> {
    let mut out = Vec::new();
    for name in QUERY_NAMES {
        // Full scans are 1000x the work of a point query: fewer repetitions keep the run short.
        let reps = if matches!(name, "set" | "multi") {
            repetitions.div_ceil(10).max(3)
        } else {
            repetitions
        };
        let qs = params(spec, name, reps + 1);
        store.answer(&qs[0])?; // untimed warm-up
        let mut times: Vec<Duration> = Vec::with_capacity(reps);
        let mut rows = 0;
        for q in &qs[1..] {
            let t = Instant::now();
            rows += store.answer(q)?;
            times.push(t.elapsed());
        }
        out.push(SensorRun {
            fs: fs.into(),
            store: store.name(),
            query: name.into(),
            timing_us: TimingUs::of(&times),
            result_rows: rows,
            load_s,
        });
    }
    Ok(out)
}

/// Every store must have returned the same total rows per query (same data, same parameters).
pub fn check_agreement(runs: &[SensorRun]) -> Result<(), LabError> {
    for r in runs {
        if let Some(other) = runs
            .iter()
            .find(|o| o.fs == r.fs && o.query == r.query && o.result_rows != r.result_rows)
        {
            return Err(LabError::Unsupported(format!(
                "stores disagree on {} ({}): {} returned {} rows, {} returned {}",
                r.query, r.fs, r.store, r.result_rows, other.store, other.result_rows
            )));
        }
    }
    Ok(())
}
