//! RocksDB as the lower tier (rust-rocksdb, RocksDB's bundled C++ build).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::statistics::Ticker;
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Direction, IngestExternalFileOptions,
    IteratorMode, Options, ReadOptions, SstFileWriter, WriteBatch, WriteOptions,
};

use super::{LowerOp, LowerTier};
use crate::error::{Error, IoContext, Result};

pub struct RocksLower {
    db: DB,
    options: Options,
    ingest_dir: PathBuf,
    ingest_seq: AtomicU64,
    ingested_bytes: AtomicU64,
    /// Files ingested per level (RocksDB's 7 levels): where each run landed.
    ingested_by_level: [AtomicU64; 7],
}

fn lower_err(e: rocksdb::Error) -> Error {
    Error::Lower(format!("rocksdb: {e}"))
}

impl RocksLower {
    /// `memory_bytes` is split: half block cache, half memtables (two write buffers).
    pub fn open(dir: &Path, memory_bytes: u64) -> Result<RocksLower> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.enable_statistics();
        options.set_compression_type(DBCompressionType::None);
        options.set_max_background_jobs(2);
        options.set_bytes_per_sync(1 << 20);
        let write_buffer_bytes = (memory_bytes / 4).max(1 << 20) as usize;
        options.set_write_buffer_size(write_buffer_bytes);
        options.set_max_write_buffer_number(2);
        options.set_target_file_size_base(write_buffer_bytes as u64);
        let cache = Cache::new_lru_cache((memory_bytes / 2).max(1 << 20) as usize);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
        // Closing must not flush the memtable on its own: the engine persists explicitly when it
        // closes cleanly, and a process that dies loses its memtable anyway (the WAL is off).
        // Without this, a test that abandons an engine as a crash would (and a real crash would
        // not) make unpersisted lower-tier writes durable.
        // SAFETY: the pointer is `options`' own, alive for the call.
        unsafe {
            librocksdb_sys::rocksdb_options_set_avoid_flush_during_shutdown(
                rocksdb::AsRawPtr::as_raw_ptr(&options),
                1,
            );
        }
        let db = DB::open(&options, dir.join("rocksdb")).map_err(lower_err)?;
        let ingest_dir = dir.join("ingest");
        std::fs::create_dir_all(&ingest_dir)
            .context(|| format!("creating {}", ingest_dir.display()))?;
        Ok(RocksLower {
            db,
            options,
            ingest_dir,
            ingest_seq: AtomicU64::new(0),
            ingested_bytes: AtomicU64::new(0),
            ingested_by_level: Default::default(),
        })
    }

    /// Notes the level each run's file landed in (found by its first key): a run placed above
    /// the last level will be rewritten by compaction.
    fn count_ingest_levels(&self, runs: &[Vec<(Vec<u8>, Vec<u8>)>]) {
        let Ok(files) = self.db.live_files() else {
            return;
        };
        for first in runs.iter().filter_map(|run| run.first()) {
            let level = files
                .iter()
                .find(|f| f.start_key.as_deref() == Some(first.0.as_slice()))
                .map(|f| f.level);
            if let Some(counter) = level.and_then(|l| self.ingested_by_level.get(l as usize)) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn no_wal() -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        wo
    }
}

impl LowerTier for RocksLower {
    fn ingest_sorted(&self, runs: &[Vec<(Vec<u8>, Vec<u8>)>]) -> Result<u64> {
        let mut paths = Vec::new();
        let mut bytes = 0;
        for run in runs.iter().filter(|run| !run.is_empty()) {
            let n = self.ingest_seq.fetch_add(1, Ordering::Relaxed);
            let path = self.ingest_dir.join(format!("migrate-{n}.sst"));
            let mut writer = SstFileWriter::create(&self.options);
            writer.open(&path).map_err(lower_err)?;
            for (key, value) in run {
                writer.put(key, value).map_err(lower_err)?;
            }
            writer.finish().map_err(lower_err)?;
            bytes += std::fs::metadata(&path)
                .context(|| format!("stat {}", path.display()))?
                .len();
            paths.push(path);
        }
        if paths.is_empty() {
            return Ok(0);
        }
        let mut ingest = IngestExternalFileOptions::default();
        // Move (hard-link) the files instead of copying them: each run is written exactly once.
        ingest.set_move_files(true);
        let outcome = self
            .db
            .ingest_external_file_opts(&ingest, paths.iter().collect())
            .map_err(lower_err);
        // With move_files RocksDB links the files into its directory; our names are leftovers.
        for path in &paths {
            let _ = std::fs::remove_file(path);
        }
        outcome?;
        self.ingested_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.count_ingest_levels(runs);
        Ok(bytes)
    }

    fn write(&self, ops: &[LowerOp]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                LowerOp::Put(k, v) => batch.put(k, v),
                LowerOp::Delete(k) => batch.delete(k),
                LowerOp::DeleteRange(start, end) => batch.delete_range(start, end),
                LowerOp::TrimBefore {
                    lower_id,
                    before_ms,
                } => {
                    // The sensors are read from the DB: what is queued before must be in it.
                    let queued = std::mem::take(&mut batch);
                    self.db
                        .write_opt(queued, &Self::no_wal())
                        .map_err(lower_err)?;
                    for range in super::trim_ranges(self, *lower_id, *before_ms)? {
                        if let LowerOp::DeleteRange(start, end) = range {
                            batch.delete_range(start, end);
                        }
                    }
                }
            }
        }
        self.db.write_opt(batch, &Self::no_wal()).map_err(lower_err)
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
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        for item in self
            .db
            .iterator_opt(IteratorMode::From(start, Direction::Forward), read)
        {
            let (key, value) = item.map_err(lower_err)?;
            if !visit(&key, &value) {
                break;
            }
        }
        Ok(())
    }

    fn last_in(&self, start: &[u8], end: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(start.to_vec());
        for item in self
            .db
            .iterator_opt(IteratorMode::From(end, Direction::Reverse), read)
        {
            let (key, value) = item.map_err(lower_err)?;
            // A reverse seek lands on the last key <= end; the range excludes `end` itself.
            if &*key < end {
                return Ok(Some((key.to_vec(), value.to_vec())));
            }
        }
        Ok(None)
    }

    fn persist(&self) -> Result<()> {
        self.db.flush().map_err(lower_err)
    }

    fn bytes_written(&self) -> u64 {
        self.ingested_bytes.load(Ordering::Relaxed)
            + self.options.get_ticker_count(Ticker::FlushWriteBytes)
            + self.options.get_ticker_count(Ticker::CompactWriteBytes)
    }

    fn estimate(&self) -> (u64, u64) {
        let prop = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        (
            prop("rocksdb.estimate-num-keys"),
            prop("rocksdb.live-sst-files-size"),
        )
    }

    fn diagnostics(&self) -> crate::stats::LowerDiagnostics {
        let ticker = |t| self.options.get_ticker_count(t);
        crate::stats::LowerDiagnostics {
            flush_write_bytes: ticker(Ticker::FlushWriteBytes),
            compaction_read_bytes: ticker(Ticker::CompactReadBytes),
            compaction_write_bytes: ticker(Ticker::CompactWriteBytes),
            write_stall_us: ticker(Ticker::StallMicros),
            ingested_files_by_level: self
                .ingested_by_level
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect(),
        }
    }

    fn verify(&self) -> Result<u64> {
        let mut read = ReadOptions::default();
        read.set_verify_checksums(true);
        read.fill_cache(false);
        let mut keys = 0;
        for item in self.db.iterator_opt(IteratorMode::Start, read) {
            item.map_err(lower_err)?;
            keys += 1;
        }
        Ok(keys)
    }
}
