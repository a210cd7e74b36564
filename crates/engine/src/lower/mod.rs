//! The lower tier: an LSM tree that holds settled devices. RocksDB by default; real Google
//! LevelDB to reproduce paper 002's 2Lev-LevelDB. Both run without their own durability on the
//! put path: roamkv's commit log is the journal (DESIGN.md property 3), and `persist()` makes
//! everything written so far durable before the log segments that cover it are retired.

use crate::error::Result;

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
}
