//! The lower tier: where readings go when they leave the log. An LSM tree (RocksDB by default;
//! real Google LevelDB to reproduce paper 002's 2Lev-LevelDB) holding three key spaces
//! (`keys.rs`):
//!
//! - **runs**: one immutable sorted run per *window* (the readings one pass moved out of one log
//!   segment). Written only by ingestion, never by a memtable; each lands in the last level
//!   without overlap, is never compacted, and is dropped as a whole file once no live device
//!   has readings in it.
//! - **settled**: the readings of long-lived devices, consolidated out of their windows (a read
//!   then touches a bounded number of runs). An ordinary LSM range, compacted as LSMs are.
//! - **catalog**: which devices have readings where, and the pass's bookkeeping. Written once per
//!   pass as one synced batch, with the settled space's range deletes of departures and trims.
//!
//! Nothing on the write path touches the lower tier: every reading is written once to the
//! commit log; the lower tier gets bulk runs and per-pass batches from maintenance only.
//!
//! It may not touch the log or the state: what it is told to write or drop comes from the rooms
//! above (maintenance, recovery, queries).

use std::path::Path;

use crate::model::error::{Error, Result};
use crate::model::ids::{LowerId, WindowId};
use crate::stats::LowerDiagnostics;

pub mod blocks;
pub mod keys;
#[cfg(feature = "leveldb")]
pub mod level;
pub(crate) mod open;
pub mod rocks;

use keys::Place;

/// Whether a run's keys strictly ascend: what a window run must be (docs/ENGINE.md,
/// "Invariants"). RocksDB's SST writer refuses anything else; the LevelDB tier checks with this.
pub(crate) fn strictly_sorted(run: &[(Vec<u8>, Vec<u8>)]) -> bool {
    run.windows(2).all(|pair| pair[0].0 < pair[1].0)
}

/// The lower tier's key spaces (keys.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    Windows,
    Settled,
    Catalog,
    /// The runs and settled spaces of a format 2 directory (a key per reading), read only by
    /// its upgrade to blocks (blocks/upgrade.rs) and emptied by it.
    LegacyWindows,
    LegacySettled,
}

/// How a tier lays out its runs and settled spaces: where `Space::Windows` and
/// `Space::Settled` are (RocksDB: which column families; LevelDB: which tag bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Format 2: a key per reading (the column families `runs` and `settled`). Opened so only
    /// read-only, to read a directory that has not been upgraded.
    Readings,
    /// Format 3: blocks of readings (`window_blocks` and `settled_blocks`); the format 2
    /// families, where a directory still has them, are the legacy spaces.
    Blocks,
}

/// One operation of a catalog batch (`LowerTier::write_catalog`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatalogOp {
    Put(Space, Vec<u8>, Vec<u8>),
    Delete(Space, Vec<u8>),
    /// Every key in [start, end).
    DeleteRange(Space, Vec<u8>, Vec<u8>),
}

impl CatalogOp {
    /// What forgets a departed device in the lower tier: its catalog entries and its settled
    /// range (its windows drop whole when no live device reads them).
    pub fn forget_device(lower_id: LowerId) -> [CatalogOp; 2] {
        let (start, end) = keys::device_catalog_range(lower_id);
        let (s_start, s_end) = Place::Settled.range(lower_id, None);
        [
            CatalogOp::DeleteRange(Space::Catalog, start, end),
            CatalogOp::DeleteRange(Space::Settled, s_start, s_end),
        ]
    }
}

/// A sorted run written to a file of the lower tier's format but not yet part of it
/// (`LowerTier::prepare_run`, then `ingest` or `discard`).
pub struct PreparedRun {
    pub space: Space,
    /// Bytes the run's file takes (what ingesting it writes, with the file's index and filters).
    pub file_bytes: u64,
    /// Its first key (where it lands is found by it).
    pub first_key: Option<Vec<u8>>,
    pub(crate) body: PreparedBody,
}

pub(crate) enum PreparedBody {
    /// An SST file (RocksDB), moved into the DB by ingestion.
    File(std::path::PathBuf),
    /// The entries themselves (LevelDB cannot ingest: it writes them as one synced batch).
    #[cfg_attr(not(feature = "leveldb"), allow(dead_code))]
    Entries(Vec<(Vec<u8>, Vec<u8>)>),
}

/// A window file as the lower tier holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowFile {
    pub win: WindowId,
    pub bytes: u64,
    /// The level it sits in (RocksDB); ingested runs must sit in the last level.
    pub level: Option<u32>,
}

pub trait LowerTier: Send + Sync {
    /// Writes a run of strictly ascending (key, value) pairs for `space` to a file of the tier's
    /// format; nothing is visible until `ingest`.
    fn prepare_run(&self, space: Space, run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<PreparedRun>;
    /// Makes a prepared run part of the tier, atomically and durably. A run of the runs space
    /// must land without overlapping anything: an error otherwise, never a silent placement
    /// that compaction would rewrite later.
    fn ingest(&self, run: PreparedRun) -> Result<()>;
    /// Removes a prepared run that will not be ingested.
    fn discard(&self, run: PreparedRun);
    /// Applies the operations in order, atomically and durably (synced before it returns).
    fn write_catalog(&self, ops: &[CatalogOp]) -> Result<()>;
    /// Drops the files of these windows whole. Their readings must be dead: nothing reads them.
    fn drop_windows(&self, wins: &[WindowId]) -> Result<()>;
    /// Takes off disk what a durable delete of these [start, end) ranges of `space` left there:
    /// files lying wholly in a range are dropped, and the files overlapping one are rewritten
    /// without the deleted keys (what that writes counts in `bytes_written`).
    fn reclaim(&self, space: Space, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<()>;
    /// Bytes of the settled space's files, and of them what the LSM estimates is live.
    fn settled_bytes(&self) -> (u64, u64);
    /// Every window file the tier holds, ascending by window.
    fn window_files(&self) -> Result<Vec<WindowFile>>;
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Calls `visit(key, value)` for keys of `space` in [start, end) in order until it returns
    /// false.
    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()>;
    /// The greatest key of `space` in [start, end) and its value.
    fn last_in(&self, space: Space, start: &[u8], end: &[u8])
    -> Result<Option<(Vec<u8>, Vec<u8>)>>;
    /// Bytes the LSM itself wrote to files: ingested runs, catalog batches, flushes,
    /// compactions, its own log.
    fn bytes_written(&self) -> u64;
    /// (live keys, live bytes on disk), as the LSM estimates them.
    fn estimate(&self) -> (u64, u64);
    /// Reads every key with checksum verification; returns the number of keys.
    fn verify(&self) -> Result<u64>;
    /// What the tier did by itself (flushes, compactions, stalls, ingest levels).
    fn diagnostics(&self) -> LowerDiagnostics;
    /// Whether the tier has the space at all (a RocksDB tier of format 3 made new has no legacy
    /// families).
    fn has_space(&self, _space: Space) -> bool {
        true
    }
    /// Writes a consistent copy of the tier into `to` (an existing, empty directory on the
    /// data directory's file system), laid out as under `DIR/lower/`: hard links where the
    /// files never change. Called under the maintenance lock (nothing of roamkv's writes to the
    /// tier meanwhile; the tier's own compactions may run).
    fn checkpoint(&self, to: &Path) -> Result<()>;
}

pub(crate) fn space_of(place: Place) -> Space {
    match place {
        Place::Window(_) => Space::Windows,
        Place::Settled => Space::Settled,
    }
}

pub(crate) fn malformed(k: &[u8]) -> Error {
    Error::Lower(format!("malformed key {k:?} in the lower tier"))
}

/// The first key of each sensor of a device in one place: (sensor, its oldest timestamp). One
/// seek per sensor: from a sensor's first key, `sensor 0x01` is the smallest key above all of
/// its keys (ids hold no NUL) and at or below every later sensor's.
pub(crate) fn oldest_per_sensor(
    lower: &dyn LowerTier,
    place: Place,
    lower_id: LowerId,
) -> Result<Vec<(String, i64)>> {
    let (mut at, end) = place.range(lower_id, None);
    let mut sensors = Vec::new();
    loop {
        let mut first = None;
        lower.scan(space_of(place), &at, &end, &mut |k, _| {
            first = Some(k.to_vec());
            false
        })?;
        let Some(k) = first else {
            return Ok(sensors);
        };
        let (_, sensor, ts_ns) = place.parse(&k).ok_or_else(|| malformed(&k))?;
        at = keys::after_sensor(place, lower_id, sensor);
        sensors.push((sensor.to_string(), ts_ns));
    }
}
