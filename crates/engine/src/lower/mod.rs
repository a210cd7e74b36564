//! The lower tier: an LSM tree that holds settled devices. RocksDB by default; real Google
//! LevelDB to reproduce paper 002's 2Lev-LevelDB. Both run without their own durability on the
//! put path: roamkv's commit log is the journal (DESIGN.md property 3), and `persist()` makes
//! everything written so far durable before the log segments that cover it are retired.

use crate::error::{Error, Result};
use crate::key;

#[cfg(feature = "leveldb")]
pub mod level;
pub mod rocks;

/// Which LSM engine holds settled devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LowerTierKind {
    #[default]
    RocksDb,
    LevelDb,
}

impl LowerTierKind {
    pub fn name(self) -> &'static str {
        match self {
            LowerTierKind::RocksDb => "rocksdb",
            LowerTierKind::LevelDb => "leveldb",
        }
    }
    pub fn from_name(name: &str) -> Option<LowerTierKind> {
        match name {
            "rocksdb" => Some(LowerTierKind::RocksDb),
            "leveldb" => Some(LowerTierKind::LevelDb),
            _ => None,
        }
    }
}

/// A buffered write to the lower tier: applied at once, durable at the next `persist()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LowerOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Every key in [start, end).
    DeleteRange(Vec<u8>, Vec<u8>),
    /// Every reading of the device `lower_id` with ts < `before_ms` (a TRIM record): one range
    /// delete per sensor. Which sensors the device has is read from the tier when the op is
    /// applied, after the ops before it, so that a sensor first written in the same group is
    /// trimmed too (`trim_ranges`).
    TrimBefore {
        lower_id: u64,
        before_ms: i64,
    },
}

/// The first key of each sensor of a device: (sensor, its oldest timestamp). One seek per
/// sensor: from a sensor's first key, `sensor 0x01` is the smallest key above all of its keys
/// (ids hold no NUL) and at or below every later sensor's.
pub(crate) fn oldest_per_sensor(
    lower: &dyn LowerTier,
    lower_id: u64,
) -> Result<Vec<(String, i64)>> {
    let (mut at, end) = key::device_reading_range(lower_id);
    let mut sensors = Vec::new();
    loop {
        let mut first = None;
        lower.scan(&at, &end, &mut |k, _| {
            first = Some(k.to_vec());
            false
        })?;
        let Some(k) = first else {
            return Ok(sensors);
        };
        let (_, sensor, ts_ms) = key::parse_reading_key(&k)
            .ok_or_else(|| Error::Lower(format!("malformed key {k:?} in the lower tier")))?;
        at = key::reading_key(lower_id, sensor, i64::MIN);
        at.truncate(at.len() - 9);
        at.push(1);
        sensors.push((sensor.to_string(), ts_ms));
    }
}

/// The range deletes of a `TrimBefore`: per sensor whose oldest reading is older than the
/// cutoff, [sensor at i64::MIN, sensor at before_ms).
pub(crate) fn trim_ranges(
    lower: &dyn LowerTier,
    lower_id: u64,
    before_ms: i64,
) -> Result<Vec<LowerOp>> {
    Ok(oldest_per_sensor(lower, lower_id)?
        .into_iter()
        .filter(|(_, oldest_ms)| *oldest_ms < before_ms)
        .map(|(sensor, _)| {
            LowerOp::DeleteRange(
                key::reading_key(lower_id, &sensor, i64::MIN),
                key::reading_key(lower_id, &sensor, before_ms),
            )
        })
        .collect())
}

pub trait LowerTier: Send + Sync {
    /// Inserts runs of sorted, unique (key, value) pairs, the runs' key ranges disjoint, in bulk;
    /// atomic and durable on return (RocksDB: one SST file per run, ingested in one call;
    /// LevelDB, which cannot ingest: one synced write batch). Returns the bytes written.
    fn ingest_sorted(&self, runs: &[Vec<(Vec<u8>, Vec<u8>)>]) -> Result<u64>;
    /// Applies the operations in order, without syncing anything.
    fn write(&self, ops: &[LowerOp]) -> Result<()>;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `visit(key, value)` for keys in [start, end) in order until it returns false.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;
    /// The greatest key in [start, end) and its value. The default walks the range forward;
    /// engines with reverse iterators override it with one seek.
    fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut last = None;
        self.scan(start, end, &mut |k, v| {
            last = Some((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(last)
    }
    /// Makes every write so far durable (RocksDB: flush memtables; LevelDB: sync its log).
    fn persist(&self) -> Result<()>;
    /// Bytes the LSM itself wrote to files: ingested runs, flushes, compactions, its own log.
    fn bytes_written(&self) -> u64;
    /// The LSM's estimates of (live keys, live bytes on disk).
    fn estimate(&self) -> (u64, u64);
    /// Reads every key with checksum verification; returns the number of keys.
    fn verify(&self) -> Result<u64>;
    /// What the tier did by itself (flushes, compactions, stalls, ingest levels).
    fn diagnostics(&self) -> crate::stats::LowerDiagnostics {
        crate::stats::LowerDiagnostics::default()
    }
}
