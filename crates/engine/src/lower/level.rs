//! Google LevelDB as the lower tier (paper 002's 2Lev-LevelDB), through roamkv-leveldb.
//!
//! LevelDB differs from RocksDB in three ways that cost writes, and the stats show them:
//! it has no WAL switch (every write also goes to its own log, unsynced until `persist`), no
//! SST ingestion (a migration is one synced write batch), and no range delete (a departing
//! settled device is deleted key by key).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use roamkv_leveldb::{Db, Options, WriteBatch};

use super::{LowerOp, LowerTier};
use crate::error::{Error, Result};

pub struct LevelLower {
    db: Db,
    /// Bytes handed to LevelDB's log: key + value + 8 bytes of batch framing per op (approximate:
    /// LevelDB does not report its log bytes).
    log_bytes: AtomicU64,
}

fn lower_err(e: roamkv_leveldb::Error) -> Error {
    Error::Lower(e.to_string())
}

/// Key used for the synced write that makes LevelDB's log durable.
const PERSIST_MARKER_KEY: &[u8] = b"\x03persist";

impl LevelLower {
    pub fn open(dir: &Path, memory_bytes: u64) -> Result<LevelLower> {
        let options = Options {
            write_buffer_bytes: (memory_bytes / 4).max(1 << 20) as usize,
            block_cache_bytes: (memory_bytes / 2).max(1 << 20) as usize,
            ..Options::default()
        };
        let db = Db::open(&dir.join("leveldb"), &options).map_err(lower_err)?;
        Ok(LevelLower {
            db,
            log_bytes: AtomicU64::new(0),
        })
    }

    fn count(&self, key: &[u8], value: &[u8]) {
        self.log_bytes
            .fetch_add((key.len() + value.len() + 8) as u64, Ordering::Relaxed);
    }

    /// Sum of the "Write(MB)" column of leveldb.stats: flushes and compactions.
    fn table_bytes_written(&self) -> u64 {
        let Some(stats) = self.db.property("leveldb.stats") else {
            return 0;
        };
        let mb: f64 = stats
            .lines()
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                // Level Files Size(MB) Time(sec) Read(MB) Write(MB)
                (cols.len() == 6 && cols[0].parse::<u32>().is_ok())
                    .then(|| cols[5].parse::<f64>().ok())?
            })
            .sum();
        (mb * 1_048_576.0) as u64
    }
}

impl LowerTier for LevelLower {
    fn ingest_sorted(&self, runs: &[Vec<(Vec<u8>, Vec<u8>)>]) -> Result<u64> {
        let mut batch = WriteBatch::new();
        let mut bytes = 0u64;
        for (key, value) in runs.iter().flatten() {
            batch.put(key, value);
            self.count(key, value);
            bytes += (key.len() + value.len() + 8) as u64;
        }
        self.db.write(&batch, true).map_err(lower_err)?;
        Ok(bytes)
    }

    fn write(&self, ops: &[LowerOp]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                LowerOp::Put(k, v) => {
                    batch.put(k, v);
                    self.count(k, v);
                }
                LowerOp::Delete(k) => {
                    batch.delete(k);
                    self.count(k, &[]);
                }
                LowerOp::DeleteRange(start, end) => {
                    // The range is emulated by iterating the DB, which does not see the puts
                    // queued in `batch` yet: write those first, or they would survive.
                    self.db.write(&batch, false).map_err(lower_err)?;
                    batch.clear();
                    let mut it = self.db.iter();
                    it.seek(start);
                    while it.valid() && it.key() < end.as_slice() {
                        batch.delete(it.key());
                        self.count(it.key(), &[]);
                        it.next();
                    }
                    it.status().map_err(lower_err)?;
                }
                LowerOp::TrimBefore {
                    lower_id,
                    before_ms,
                } => {
                    // The sensors are read from the DB: what is queued before must be in it.
                    self.db.write(&batch, false).map_err(lower_err)?;
                    batch.clear();
                    self.write(&super::trim_ranges(self, *lower_id, *before_ms)?)?;
                }
            }
        }
        self.db.write(&batch, false).map_err(lower_err)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(key).map_err(lower_err)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut it = self.db.iter();
        it.seek(start);
        while it.valid() && it.key() < end {
            if !visit(it.key(), it.value()) {
                break;
            }
            it.next();
        }
        it.status().map_err(lower_err)
    }

    fn persist(&self) -> Result<()> {
        // A synced write makes LevelDB's whole log durable, with everything before it.
        self.count(PERSIST_MARKER_KEY, &[]);
        self.db
            .put(PERSIST_MARKER_KEY, &[], true)
            .map_err(lower_err)
    }

    fn bytes_written(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed) + self.table_bytes_written()
    }

    fn estimate(&self) -> (u64, u64) {
        // LevelDB offers no key-count estimate; report the bytes of its table files.
        let mb: f64 = self
            .db
            .property("leveldb.stats")
            .map(|stats| {
                stats
                    .lines()
                    .filter_map(|line| {
                        let cols: Vec<&str> = line.split_whitespace().collect();
                        (cols.len() == 6 && cols[0].parse::<u32>().is_ok())
                            .then(|| cols[2].parse::<f64>().ok())?
                    })
                    .sum()
            })
            .unwrap_or(0.0);
        (0, (mb * 1_048_576.0) as u64)
    }

    fn verify(&self) -> Result<u64> {
        let mut it = self.db.iter();
        it.seek_to_first();
        let mut keys = 0;
        while it.valid() {
            keys += 1;
            it.next();
        }
        it.status().map_err(lower_err)?;
        Ok(keys)
    }
}
