//! The engines under test, behind one trait, each configured explicitly and at equal durability
//! and memory budget. The configuration each one gets is returned by `describe` and saved with
//! the results.
//!
//! Durability `sync`: every acknowledged batch is fdatasync'd (each engine may group commits):
//! roamkv `Durability::Sync`; RocksDB `WriteOptions::sync` (fdatasync, use_fsync off); LevelDB
//! `sync = true`; SQLite WAL with `synchronous=FULL` (built with HAVE_FDATASYNC, so fdatasync).
//! Durability `none`: nothing is synced on the write path (db_bench's default): roamkv
//! `Durability::None`, RocksDB/LevelDB `sync = false` with their WAL/log on, SQLite
//! `synchronous=OFF`.

use std::path::Path;
use std::sync::Arc;

use std::sync::Mutex;

use roamkv_engine::{
    Durability as RoamDurability, Engine, LowerTierKind, Options as RoamOptions, Record, ms_to_ns,
};

use crate::error::{BenchError, Result};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    Roamkv,
    RoamkvLeveldb,
    Rocksdb,
    Leveldb,
    Sqlite,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Roamkv => "roamkv",
            EngineKind::RoamkvLeveldb => "roamkv-leveldb",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Leveldb => "leveldb",
            EngineKind::Sqlite => "sqlite",
        }
    }
    pub fn all() -> [EngineKind; 5] {
        [
            EngineKind::Roamkv,
            EngineKind::RoamkvLeveldb,
            EngineKind::Rocksdb,
            EngineKind::Leveldb,
            EngineKind::Sqlite,
        ]
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    Sync,
    None,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::None => "none",
        }
    }
}

/// Everything an engine is opened with; saved with the results.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EngineConfig {
    pub kind: EngineKind,
    pub durability: Durability,
    /// The engine's own caches and buffers (the cgroup limit, page cache included, is separate).
    pub engine_memory_bytes: u64,
    pub management_time_ms: u64,
    /// roamkv's move rule (docs/ENGINE.md): false = `AtManagementTime`, true = `Lazy`.
    #[serde(default)]
    pub lazy_move_rule: bool,
    /// roamkv applies committed groups to its index after its writers return
    /// (`IndexApply::AfterAck`) instead of before.
    #[serde(default)]
    pub index_after_ack: bool,
}

/// One reading to write.
pub struct Put<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    pub ts_ms: i64,
    pub value: &'a [u8],
}

pub trait BenchEngine: Send + Sync {
    fn put_batch(&self, batch: &[Put<'_>]) -> Result<()>;
    /// Number of readings of device/sensor with from <= ts < to.
    fn query(&self, device: &str, sensor: &str, from_ms: i64, to_ms: i64) -> Result<usize>;
    fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>>;
    fn depart(&self, device: &str) -> Result<()>;
    /// Orderly close (what an application does on shutdown).
    fn close(self: Box<Self>) -> Result<()>;
    /// A full manual compaction, where the engine has one (`bench footprint`'s settled size).
    fn compact(&self) -> Result<()> {
        Ok(())
    }
    /// The engine's own view of itself for the long-run time series (cheap; called every
    /// second from another thread).
    fn sample(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
}

/// The settings each engine gets from the shared budget, as text for the report.
pub fn describe(config: &EngineConfig) -> String {
    let m = config.engine_memory_bytes;
    let sync = config.durability == Durability::Sync;
    match config.kind {
        EngineKind::Roamkv | EngineKind::RoamkvLeveldb => format!(
            "durability {}; management time {} ms; move rule {}; index applied {} the acknowledgement; segments 64 MiB; index cap {} MiB; lower tier {} with {} MiB (memtables + block cache), its WAL off",
            if sync { "sync" } else { "none" },
            config.management_time_ms,
            if config.lazy_move_rule {
                "lazy"
            } else {
                "at management time"
            },
            if config.index_after_ack {
                "after"
            } else {
                "before"
            },
            (m / 2) >> 20,
            if config.kind == EngineKind::Roamkv {
                "RocksDB"
            } else {
                "LevelDB (log always on)"
            },
            (m / 2) >> 20
        ),
        EngineKind::Rocksdb => format!(
            "WAL on; WriteOptions.sync={sync}; write buffer {} MiB x2; block cache {} MiB; bloom 10 bits; no compression; 2 background jobs",
            (m / 4) >> 20,
            (m / 2) >> 20
        ),
        EngineKind::Leveldb => format!(
            "WriteOptions.sync={sync}; write buffer {} MiB; block cache {} MiB; bloom 10 bits; no compression; max file 2 MiB",
            (m / 4) >> 20,
            (m / 2) >> 20
        ),
        EngineKind::Sqlite => format!(
            "journal_mode=WAL; synchronous={}; cache {} MiB; table (device, sensor, ts) PRIMARY KEY WITHOUT ROWID; one connection, writers serialised",
            if sync { "FULL" } else { "OFF" },
            m >> 20
        ),
    }
}

pub fn open(config: &EngineConfig, dir: &Path) -> Result<Box<dyn BenchEngine>> {
    let m = config.engine_memory_bytes;
    let sync = config.durability == Durability::Sync;
    let engine: Box<dyn BenchEngine> = match config.kind {
        EngineKind::Roamkv | EngineKind::RoamkvLeveldb => {
            let options = RoamOptions {
                durability: if sync {
                    RoamDurability::Sync
                } else {
                    RoamDurability::None
                },
                management_time_ms: config.management_time_ms,
                move_rule: if config.lazy_move_rule {
                    roamkv_engine::MoveRule::Lazy
                } else {
                    roamkv_engine::MoveRule::AtManagementTime
                },
                index_bytes_max: (m / 2).max(1 << 20),
                index_apply: if config.index_after_ack {
                    roamkv_engine::IndexApply::AfterAck
                } else {
                    roamkv_engine::IndexApply::BeforeAck
                },
                lower_memory_bytes: m / 2,
                lower_tier: if config.kind == EngineKind::Roamkv {
                    LowerTierKind::RocksDb
                } else {
                    LowerTierKind::LevelDb
                },
                ..RoamOptions::default()
            };
            Box::new(RoamkvEngine(Engine::open(dir, options)?))
        }
        EngineKind::Rocksdb => Box::new(RocksEngine::open(dir, m, sync)?),
        EngineKind::Leveldb => Box::new(LevelEngine::open(dir, m, sync)?),
        EngineKind::Sqlite => Box::new(SqliteEngine::open(dir, m, sync)?),
    };
    Ok(engine)
}

struct RoamkvEngine(Engine);

impl BenchEngine for RoamkvEngine {
    fn put_batch(&self, batch: &[Put<'_>]) -> Result<()> {
        let records: Vec<Record<'_>> = batch
            .iter()
            .map(|p| Record::at_ms(p.device, p.sensor, p.ts_ms, p.value))
            .collect();
        Ok(self.0.put_batch(&records)?)
    }
    fn query(&self, device: &str, sensor: &str, from_ms: i64, to_ms: i64) -> Result<usize> {
        Ok(self
            .0
            .scan(device, Some(sensor), ms_to_ns(from_ms), ms_to_ns(to_ms))?
            .len())
    }
    fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(device, sensor, ms_to_ns(ts_ms))?)
    }
    fn depart(&self, device: &str) -> Result<()> {
        Ok(self.0.depart(device)?)
    }
    fn sample(&self) -> serde_json::Value {
        let s = self.0.stats();
        // The lower tier's space, apart (one `json!` of every field overflows its macro's
        // recursion limit).
        let lower = serde_json::json!({
            "consolidated_bytes": s.consolidated_bytes,
            "consolidated_to_settled_bytes": s.consolidated_to_settled_bytes,
            "windows_dropped_bytes": s.windows_dropped_bytes,
            "settled_file_bytes": s.settled_file_bytes,
            "lower_live_bytes": s.lower_live_bytes,
            "lower_dead_bytes": s.lower_dead_bytes,
        });
        let mut sample = serde_json::json!({
            "upper_bytes": s.upper.bytes,
            "lower_bytes": s.lower.bytes,
            "log_bytes": s.log_bytes,
            "log_bytes_max": s.log_bytes_max,
            "live_segments": s.live_segments,
            "overdue_bytes": s.overdue_bytes,
            "overdue_segments": s.overdue_segments,
            "windows": s.windows,
            "window_file_bytes": s.window_file_bytes,
            "window_live_bytes": s.window_live_bytes,
            "moved_bytes": s.moved_bytes,
            "consolidations": s.consolidations,
            "index_bytes": s.index_bytes,
            "index_bytes_max": s.index_bytes_max,
            "segments_aged": s.segments_aged,
            "early_passes": s.early_passes,
            "write_stalls": s.write_stalls,
            "write_stall_ms": s.write_stall_ms,
            "no_space_errors": s.no_space_errors,
            "pending_bytes": s.pending_bytes,
            "last_maintenance_error": s.last_maintenance_error,
            "maintenance_read_bytes": s.maintenance_read_bytes,
            "lower_flush_write_bytes": s.lower_diagnostics.flush_write_bytes,
            "lower_compaction_read_bytes": s.lower_diagnostics.compaction_read_bytes,
            "lower_compaction_write_bytes": s.lower_diagnostics.compaction_write_bytes,
            "lower_write_stall_us": s.lower_diagnostics.write_stall_us,
            "ingested_files_by_level": s.lower_diagnostics.ingested_files_by_level,
            "lock_holds": s.state_lock.holds,
            "lock_hold_ns_total": s.state_lock.total_ns,
            "lock_hold_ns_max": s.state_lock.max_ns,
            "lock_buckets": s.state_lock.buckets,
            "lock_long_holds": s.state_lock.long_holds,
            "passes": s.passes.passes,
            "pass_us_total": s.passes.total_us,
            "pass_us_max": s.passes.max_us,
            "pass_snapshot_us": s.passes.snapshot_us,
            "pass_read_us": s.passes.read_us,
            "pass_write_us": s.passes.write_us,
            "pass_catalog_us": s.passes.catalog_us,
            "pass_commit_us": s.passes.commit_us,
            "pass_retire_us": s.passes.retire_us,
        });
        if let (Some(all), serde_json::Value::Object(lower)) = (sample.as_object_mut(), lower) {
            all.extend(lower);
        }
        // The write path's counters (beside the macro's: its recursion limit is reached above).
        if let Some(all) = sample.as_object_mut() {
            all.insert("group_commits".into(), s.group_commits.into());
            all.insert("fdatasyncs".into(), s.fdatasyncs.into());
            all.insert("log_head_reads".into(), s.log_head_reads.into());
        }
        sample
    }
    fn close(self: Box<Self>) -> Result<()> {
        let stats = self.0.stats();
        eprintln!(
            "roamkv: {} segments left the log, {} departures, engine WA {:.3}, index {:.1} MiB",
            stats.segments_aged,
            stats.departures,
            stats.write_amplification(),
            stats.index_bytes as f64 / 1048576.0
        );
        Ok(self.0.close()?)
    }
}

/// Baseline key: device 0x00 sensor 0x00 ts(BE, sign flipped): byte order = logical order, and
/// a device's readings are one range (for RocksDB's DeleteRange and LevelDB's iteration).
fn baseline_key(device: &str, sensor: &str, ts_ms: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + sensor.len() + 10);
    key.extend_from_slice(device.as_bytes());
    key.push(0);
    key.extend_from_slice(sensor.as_bytes());
    key.push(0);
    key.extend_from_slice(&roamkv_engine::keys::encode_ts(ts_ms));
    key
}

fn device_range(device: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = device.as_bytes().to_vec();
    start.push(0);
    let mut end = device.as_bytes().to_vec();
    end.push(1);
    (start, end)
}

struct RocksEngine {
    db: rocksdb::DB,
    /// Kept for its statistics (flush and compaction bytes).
    options: rocksdb::Options,
    sync: bool,
}

impl RocksEngine {
    fn open(dir: &Path, memory_bytes: u64, sync: bool) -> Result<RocksEngine> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        options.set_compression_type(rocksdb::DBCompressionType::None);
        options.set_max_background_jobs(2);
        options.set_bytes_per_sync(1 << 20);
        options.set_write_buffer_size((memory_bytes / 4) as usize);
        options.set_max_write_buffer_number(2);
        options.set_target_file_size_base(memory_bytes / 4);
        let cache = rocksdb::Cache::new_lru_cache((memory_bytes / 2) as usize);
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
        options.enable_statistics();
        let db = rocksdb::DB::open(&options, dir)?;
        Ok(RocksEngine { db, options, sync })
    }
    fn write_options(&self) -> rocksdb::WriteOptions {
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(self.sync);
        wo
    }
}

impl BenchEngine for RocksEngine {
    fn compact(&self) -> Result<()> {
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(())
    }
    fn sample(&self) -> serde_json::Value {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten();
        serde_json::json!({
            "live_sst_bytes": property("rocksdb.live-sst-files-size"),
            "pending_compaction_bytes": property("rocksdb.estimate-pending-compaction-bytes"),
            "memtable_bytes": property("rocksdb.cur-size-all-mem-tables"),
            "lower_flush_write_bytes": self.options.get_ticker_count(rocksdb::statistics::Ticker::FlushWriteBytes),
            "lower_compaction_read_bytes": self.options.get_ticker_count(rocksdb::statistics::Ticker::CompactReadBytes),
            "lower_compaction_write_bytes": self.options.get_ticker_count(rocksdb::statistics::Ticker::CompactWriteBytes),
            "lower_write_stall_us": self.options.get_ticker_count(rocksdb::statistics::Ticker::StallMicros),
        })
    }
    fn put_batch(&self, batch: &[Put<'_>]) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        for p in batch {
            wb.put(baseline_key(p.device, p.sensor, p.ts_ms), p.value);
        }
        Ok(self.db.write_opt(wb, &self.write_options())?)
    }
    fn query(&self, device: &str, sensor: &str, from_ms: i64, to_ms: i64) -> Result<usize> {
        let mut read = rocksdb::ReadOptions::default();
        read.set_iterate_upper_bound(baseline_key(device, sensor, to_ms));
        let start = baseline_key(device, sensor, from_ms);
        let mut n = 0;
        for item in self.db.iterator_opt(
            rocksdb::IteratorMode::From(&start, rocksdb::Direction::Forward),
            read,
        ) {
            item?;
            n += 1;
        }
        Ok(n)
    }
    fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(baseline_key(device, sensor, ts_ms))?)
    }
    fn depart(&self, device: &str) -> Result<()> {
        let (start, end) = device_range(device);
        let mut wb = rocksdb::WriteBatch::default();
        wb.delete_range(start, end);
        Ok(self.db.write_opt(wb, &self.write_options())?)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct LevelEngine {
    db: roamkv_leveldb::Db,
    sync: bool,
}

impl LevelEngine {
    fn open(dir: &Path, memory_bytes: u64, sync: bool) -> Result<LevelEngine> {
        let options = roamkv_leveldb::Options {
            write_buffer_bytes: (memory_bytes / 4) as usize,
            block_cache_bytes: (memory_bytes / 2) as usize,
            ..roamkv_leveldb::Options::default()
        };
        Ok(LevelEngine {
            db: roamkv_leveldb::Db::open(dir, &options)?,
            sync,
        })
    }
}

impl BenchEngine for LevelEngine {
    fn put_batch(&self, batch: &[Put<'_>]) -> Result<()> {
        let mut wb = roamkv_leveldb::WriteBatch::new();
        for p in batch {
            wb.put(&baseline_key(p.device, p.sensor, p.ts_ms), p.value);
        }
        Ok(self.db.write(&wb, self.sync)?)
    }
    fn query(&self, device: &str, sensor: &str, from_ms: i64, to_ms: i64) -> Result<usize> {
        let end = baseline_key(device, sensor, to_ms);
        let mut it = self.db.iter();
        it.seek(&baseline_key(device, sensor, from_ms));
        let mut n = 0;
        while it.valid() && it.key() < end.as_slice() {
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }
    fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(&baseline_key(device, sensor, ts_ms))?)
    }
    fn depart(&self, device: &str) -> Result<()> {
        // LevelDB has no range delete: one tombstone per key, as the paper's LevelDB did.
        let (start, end) = device_range(device);
        let mut wb = roamkv_leveldb::WriteBatch::new();
        {
            let mut it = self.db.iter();
            it.seek(&start);
            while it.valid() && it.key() < end.as_slice() {
                wb.delete(it.key());
                it.next();
            }
            it.status()?;
        }
        Ok(self.db.write(&wb, self.sync)?)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

struct SqliteEngine {
    connection: Mutex<rusqlite::Connection>,
}

impl SqliteEngine {
    fn open(dir: &Path, memory_bytes: u64, sync: bool) -> Result<SqliteEngine> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
        let c = rusqlite::Connection::open(dir.join("readings.db"))?;
        let mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if mode != "wal" {
            return Err(BenchError::Run(format!(
                "SQLite refused WAL mode (got {mode})"
            )));
        }
        c.execute_batch(&format!(
            "PRAGMA synchronous={}; PRAGMA cache_size=-{};
             CREATE TABLE IF NOT EXISTS readings(device TEXT NOT NULL, sensor TEXT NOT NULL, ts INTEGER NOT NULL,
                 value BLOB NOT NULL, PRIMARY KEY (device, sensor, ts)) WITHOUT ROWID;",
            if sync { "FULL" } else { "OFF" },
            memory_bytes / 1024
        ))?;
        Ok(SqliteEngine {
            connection: Mutex::new(c),
        })
    }
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, rusqlite::Connection>> {
        self.connection
            .lock()
            .map_err(|_| BenchError::Run("a SQLite writer panicked".into()))
    }
}

impl BenchEngine for SqliteEngine {
    fn put_batch(&self, batch: &[Put<'_>]) -> Result<()> {
        let mut c = self.lock()?;
        let tx = c.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO readings(device, sensor, ts, value) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for p in batch {
                stmt.execute(rusqlite::params![p.device, p.sensor, p.ts_ms, p.value])?;
            }
        }
        Ok(tx.commit()?)
    }
    fn query(&self, device: &str, sensor: &str, from_ms: i64, to_ms: i64) -> Result<usize> {
        let c = self.lock()?;
        let n: i64 = c
            .prepare_cached("SELECT count(*) FROM readings WHERE device = ?1 AND sensor = ?2 AND ts >= ?3 AND ts < ?4")
            .and_then(|mut s| s.query_row(rusqlite::params![device, sensor, from_ms, to_ms], |r| r.get(0)))?;
        Ok(n as usize)
    }
    fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>> {
        let c = self.lock()?;
        let mut stmt = c.prepare_cached(
            "SELECT value FROM readings WHERE device = ?1 AND sensor = ?2 AND ts = ?3",
        )?;
        let mut rows = stmt.query(rusqlite::params![device, sensor, ts_ms])?;
        match rows.next()? {
            Some(row) => Ok(Some(row.get(0)?)),
            None => Ok(None),
        }
    }
    fn depart(&self, device: &str) -> Result<()> {
        let c = self.lock()?;
        c.prepare_cached("DELETE FROM readings WHERE device = ?1")
            .and_then(|mut s| s.execute([device]))
            .map(|_| ())
            .map_err(BenchError::from)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Shared handle for the writer threads.
pub type SharedEngine = Arc<dyn BenchEngine>;
