//! RocksDB as the lower tier (rust-rocksdb, RocksDB's bundled C++ build): one column family per
//! key space (mod.rs). The runs family never gets a memtable write and never compacts: runs
//! are ingested into its last level with `fail_if_not_bottommost_level`, so an overlap is an
//! error rather than an L0 placement that compaction would rewrite; dead windows are dropped
//! with `DeleteFilesInRange`. The catalog and the settled family's range deletes go through
//! the WAL, one synced batch per pass.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::statistics::Ticker;
use rocksdb::{
    AsColumnFamilyRef, BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamily,
    ColumnFamilyDescriptor, CompactOptions, DB, DBCompressionType, Direction, IteratorMode,
    Options, ReadOptions, SstFileWriter, WriteBatch, WriteOptions,
};

use super::keys;
use super::{CatalogOp, Layout, LowerTier, PreparedBody, PreparedRun, Space, WindowFile};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::WindowId;
use crate::stats::LowerDiagnostics;

/// The format 2 families (a key per reading): `Layout::Readings`' spaces, the legacy spaces
/// of `Layout::Blocks`.
const READING_RUNS_CF: &str = "runs";
const READING_SETTLED_CF: &str = "settled";
/// The format 3 families (blocks of readings: lower/blocks/).
const BLOCK_RUNS_CF: &str = "window_blocks";
const BLOCK_SETTLED_CF: &str = "settled_blocks";
const CATALOG_CF: &str = "catalog";
/// RocksDB's levels (the default `num_levels`): ingested runs go to the last one.
const LEVELS: usize = 7;

pub struct RocksLower {
    db: DB,
    /// The families of `Space::Windows` and `Space::Settled`.
    runs_cf: &'static str,
    settled_cf: &'static str,
    /// Kept for its statistics and for writing SST files with the runs family's settings.
    options: Options,
    runs_options: Options,
    ingest_dir: PathBuf,
    ingest_seq: AtomicU64,
    ingested_bytes: AtomicU64,
    catalog_bytes: AtomicU64,
    /// Files ingested per level: where each run landed.
    ingested_by_level: [AtomicU64; LEVELS],
}

fn lower_err(e: rocksdb::Error) -> Error {
    Error::Lower(format!("rocksdb: {e}"))
}

/// Options of a family: no compression (the readings families hold blocks that are already
/// zstd-compressed, lower/blocks/codec.rs; the catalog is small; and the
/// codecs cost build time), a bloom filter over whole keys, the shared block cache.
fn family_options(cache: &Cache, write_buffer_bytes: usize) -> Options {
    let mut options = Options::default();
    options.set_compression_type(DBCompressionType::None);
    options.set_write_buffer_size(write_buffer_bytes);
    options.set_max_write_buffer_number(2);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    options.set_block_based_table_factory(&table);
    options
}

/// The settled space's options: a family's, with compaction's output files cut wherever the
/// device changes (every settled key begins with the device's 8-byte lower id, keys.rs). A file
/// then holds one device: a departed device's files drop whole (`DeleteFilesInRange`) and the
/// range compaction of its reclaim finds nothing else to rewrite, and a run ingested for some
/// devices is merged with those devices' files only. Without it a compaction output file held
/// dozens of devices, and reclaiming one departed stayer rewrote about the whole settled space
/// (docs/BENCHMARKS.md, "A fleet that stays").
fn settled_options(cache: &Cache, write_buffer_bytes: usize) -> Options {
    let options = family_options(cache, write_buffer_bytes);
    // SAFETY: `options`' own pointer, alive for the calls; the setter keeps its own reference
    // to the factory (a shared_ptr copy), so the wrapper is destroyed right after.
    unsafe {
        let factory = librocksdb_sys::rocksdb_sst_partitioner_fixed_prefix_factory_create(
            keys::LOWER_ID_BYTES,
        );
        librocksdb_sys::rocksdb_options_set_sst_partitioner_factory(
            rocksdb::AsRawPtr::as_raw_ptr(&options),
            factory,
        );
        librocksdb_sys::rocksdb_sst_partitioner_factory_destroy(factory);
    }
    options
}

/// The directory run files are written in before they are ingested, emptied of those a pass
/// that crashed left.
fn clear_ingest_dir(ingest_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(ingest_dir).context(|| format!("creating {}", ingest_dir.display()))?;
    for entry in std::fs::read_dir(ingest_dir)
        .context(|| format!("listing {}", ingest_dir.display()))?
        .flatten()
    {
        let _ = std::fs::remove_file(entry.path());
    }
    Ok(())
}

impl RocksLower {
    /// `memory_bytes` is split: half block cache (shared), the rest write buffers. `read_only`:
    /// RocksDB's read-only open (it replays the WAL into memory and creates nothing, not even
    /// its LOG; every write fails), and no `ingest` directory. With `Layout::Blocks` the format
    /// 2 families are opened too where the database has them (RocksDB opens all or none).
    pub fn open(
        dir: &Path,
        memory_bytes: u64,
        read_only: bool,
        layout: Layout,
    ) -> Result<RocksLower> {
        let cache = Cache::new_lru_cache((memory_bytes / 2).max(1 << 20) as usize);
        // The memtables hold only catalog entries and range deletes: small buffers suffice.
        let buffer = (memory_bytes / 16).clamp(1 << 20, 16 << 20) as usize;
        let mut options = family_options(&cache, buffer);
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.enable_statistics();
        options.set_max_background_jobs(2);
        options.set_bytes_per_sync(1 << 20);
        // A crash never needs the memtables flushed at close: the WAL holds the catalog.
        // SAFETY: the pointer is `options`' own, alive for the call.
        unsafe {
            librocksdb_sys::rocksdb_options_set_avoid_flush_during_shutdown(
                rocksdb::AsRawPtr::as_raw_ptr(&options),
                1,
            );
        }
        let mut runs_options = family_options(&cache, 1 << 20);
        // Runs are ingested whole into the last level and dropped whole: never compacted.
        runs_options.set_disable_auto_compactions(true);
        runs_options.set_ttl(0);
        runs_options.set_periodic_compaction_seconds(0);
        let path = dir.join("rocksdb");
        let (runs_cf, settled_cf) = match layout {
            Layout::Readings => (READING_RUNS_CF, READING_SETTLED_CF),
            Layout::Blocks => (BLOCK_RUNS_CF, BLOCK_SETTLED_CF),
        };
        let mut families = vec![
            ColumnFamilyDescriptor::new(runs_cf, runs_options.clone()),
            ColumnFamilyDescriptor::new(settled_cf, settled_options(&cache, buffer)),
            ColumnFamilyDescriptor::new(CATALOG_CF, family_options(&cache, buffer)),
        ];
        if layout == Layout::Blocks {
            let existing = DB::list_cf(&options, &path).unwrap_or_default();
            if existing.iter().any(|f| f == READING_RUNS_CF) {
                families.push(ColumnFamilyDescriptor::new(
                    READING_RUNS_CF,
                    runs_options.clone(),
                ));
            }
            if existing.iter().any(|f| f == READING_SETTLED_CF) {
                families.push(ColumnFamilyDescriptor::new(
                    READING_SETTLED_CF,
                    settled_options(&cache, buffer),
                ));
            }
        }
        let db = if read_only {
            DB::open_cf_descriptors_read_only(&options, path, families, false)
        } else {
            DB::open_cf_descriptors(&options, path, families)
        }
        .map_err(lower_err)?;
        let ingest_dir = dir.join("ingest");
        if !read_only {
            clear_ingest_dir(&ingest_dir)?;
        }
        Ok(RocksLower {
            db,
            runs_cf,
            settled_cf,
            options,
            runs_options,
            ingest_dir,
            ingest_seq: AtomicU64::new(0),
            ingested_bytes: AtomicU64::new(0),
            catalog_bytes: AtomicU64::new(0),
            ingested_by_level: Default::default(),
        })
    }

    fn family(&self, space: Space) -> Result<&ColumnFamily> {
        let name = match space {
            Space::Windows => self.runs_cf,
            Space::Settled => self.settled_cf,
            Space::Catalog => CATALOG_CF,
            Space::LegacyWindows => READING_RUNS_CF,
            Space::LegacySettled => READING_SETTLED_CF,
        };
        self.db
            .cf_handle(name)
            .ok_or_else(|| Error::Lower(format!("rocksdb: column family {name} is missing")))
    }

    /// Ingests one file into a family; for the runs family, only into its last level.
    fn ingest_file(&self, space: Space, path: &Path) -> Result<()> {
        let family = self.family(space)?;
        let path_c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::Lower(format!("a NUL in {}", path.display())))?;
        let paths = [path_c.as_ptr()];
        let mut error: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: every pointer passed is alive for the call: the options are created and
        // destroyed here, `paths` points at `path_c`, the DB and family handles are `self`'s.
        // rust-rocksdb does not wrap `fail_if_not_bottommost_level`, hence the C API.
        unsafe {
            let options = librocksdb_sys::rocksdb_ingestexternalfileoptions_create();
            // Move (hard-link) the file instead of copying it: each run is written once.
            librocksdb_sys::rocksdb_ingestexternalfileoptions_set_move_files(options, 1);
            if space == Space::Windows {
                librocksdb_sys::rocksdb_ingestexternalfileoptions_set_fail_if_not_bottommost_level(
                    options, 1,
                );
                librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_global_seqno(
                    options, 0,
                );
                librocksdb_sys::rocksdb_ingestexternalfileoptions_set_allow_blocking_flush(
                    options, 0,
                );
            }
            librocksdb_sys::rocksdb_ingest_external_file_cf(
                rocksdb::AsRawPtr::as_raw_ptr(&self.db),
                family.inner(),
                paths.as_ptr(),
                paths.len(),
                options,
                &mut error,
            );
            librocksdb_sys::rocksdb_ingestexternalfileoptions_destroy(options);
        }
        if !error.is_null() {
            // SAFETY: RocksDB hands back a NUL-terminated message it allocated; it is copied,
            // then freed with RocksDB's own free.
            let message = unsafe {
                let text = std::ffi::CStr::from_ptr(error)
                    .to_string_lossy()
                    .into_owned();
                librocksdb_sys::rocksdb_free(error.cast());
                text
            };
            return Err(Error::Lower(format!(
                "rocksdb: ingesting {}: {message}",
                path.display()
            )));
        }
        Ok(())
    }

    /// Notes the level the run starting with `first_key` landed in.
    fn count_ingest_level(&self, first_key: &[u8]) {
        let Ok(files) = self.db.live_files() else {
            return;
        };
        let level = files
            .iter()
            .find(|f| {
                f.column_family_name == self.runs_cf && f.start_key.as_deref() == Some(first_key)
            })
            .map(|f| f.level);
        if let Some(counter) = level.and_then(|l| self.ingested_by_level.get(l as usize)) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl LowerTier for RocksLower {
    fn prepare_run(&self, space: Space, run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<PreparedRun> {
        let n = self.ingest_seq.fetch_add(1, Ordering::Relaxed);
        let path = self.ingest_dir.join(format!("run-{n}.sst"));
        let options = match space {
            Space::Windows => &self.runs_options,
            _ => &self.options,
        };
        let mut writer = SstFileWriter::create(options);
        writer.open(&path).map_err(lower_err)?;
        for (key, value) in &run {
            writer.put(key, value).map_err(lower_err)?;
        }
        writer.finish().map_err(lower_err)?;
        let file_bytes = std::fs::metadata(&path)
            .context(|| format!("stat {}", path.display()))?
            .len();
        Ok(PreparedRun {
            space,
            file_bytes,
            first_key: run.first().map(|(k, _)| k.clone()),
            body: PreparedBody::File(path),
        })
    }

    fn ingest(&self, run: PreparedRun) -> Result<()> {
        let PreparedBody::File(path) = &run.body else {
            return Err(Error::Lower(
                "rocksdb: a run prepared for another tier".into(),
            ));
        };
        let outcome = self.ingest_file(run.space, path);
        // With move_files RocksDB links the file into its directory; ours is a leftover.
        let _ = std::fs::remove_file(path);
        outcome?;
        self.ingested_bytes
            .fetch_add(run.file_bytes, Ordering::Relaxed);
        if let (Space::Windows, Some(first)) = (run.space, &run.first_key) {
            self.count_ingest_level(first);
        }
        Ok(())
    }

    fn discard(&self, run: PreparedRun) {
        if let PreparedBody::File(path) = run.body {
            let _ = std::fs::remove_file(path);
        }
    }

    fn write_catalog(&self, ops: &[CatalogOp]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                CatalogOp::Put(space, k, v) => batch.put_cf(self.family(*space)?, k, v),
                CatalogOp::Delete(space, k) => batch.delete_cf(self.family(*space)?, k),
                CatalogOp::DeleteRange(space, start, end) => {
                    batch.delete_range_cf(self.family(*space)?, start, end)
                }
            }
        }
        self.catalog_bytes
            .fetch_add(batch.size_in_bytes() as u64, Ordering::Relaxed);
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        self.db.write_opt(batch, &sync).map_err(lower_err)
    }

    fn drop_windows(&self, wins: &[WindowId]) -> Result<()> {
        let family = self.family(Space::Windows)?;
        for &win in wins {
            let start = win.0.to_be_bytes();
            let end = win.next().0.to_be_bytes();
            // Deletes the files lying wholly in [start, end]: a window's file exactly (no run
            // spans two windows; the runs family never compacts).
            self.db
                .delete_file_in_range_cf(family, start, end)
                .map_err(lower_err)?;
        }
        Ok(())
    }

    fn reclaim(&self, space: Space, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let family = self.family(space)?;
        let mut compact = CompactOptions::default();
        // The deleted keys usually sit in the last level, which a manual compaction skips by
        // default (without a compaction filter): force it.
        compact.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for (start, end) in ranges {
            self.db
                .delete_file_in_range_cf(family, start, end)
                .map_err(lower_err)?;
            self.db
                .compact_range_cf_opt(family, Some(start), Some(end), &compact);
        }
        Ok(())
    }

    fn settled_bytes(&self) -> (u64, u64) {
        let Ok(family) = self.family(Space::Settled) else {
            return (0, 0);
        };
        let prop = |name: &str| {
            self.db
                .property_int_value_cf(family, name)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let files = prop("rocksdb.live-sst-files-size");
        (files, prop("rocksdb.estimate-live-data-size").min(files))
    }

    fn window_files(&self) -> Result<Vec<WindowFile>> {
        let mut files: Vec<WindowFile> = self
            .db
            .live_files()
            .map_err(lower_err)?
            .into_iter()
            .filter(|f| f.column_family_name == self.runs_cf)
            .filter_map(|f| {
                Some(WindowFile {
                    win: keys::window_of(f.start_key.as_deref()?)?,
                    bytes: f.size as u64,
                    level: u32::try_from(f.level).ok(),
                })
            })
            .collect();
        files.sort_by_key(|f| f.win);
        Ok(files)
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get_cf(self.family(space)?, key).map_err(lower_err)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        for item in self.db.iterator_cf_opt(
            self.family(space)?,
            read,
            IteratorMode::From(start, Direction::Forward),
        ) {
            let (key, value) = item.map_err(lower_err)?;
            if !visit(&key, &value) {
                break;
            }
        }
        Ok(())
    }

    fn last_in(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let mut read = ReadOptions::default();
        read.set_iterate_lower_bound(start.to_vec());
        for item in self.db.iterator_cf_opt(
            self.family(space)?,
            read,
            IteratorMode::From(end, Direction::Reverse),
        ) {
            let (key, value) = item.map_err(lower_err)?;
            // A reverse seek lands on the last key <= end; the range excludes `end` itself.
            if &*key < end {
                return Ok(Some((key.to_vec(), value.to_vec())));
            }
        }
        Ok(None)
    }

    fn bytes_written(&self) -> u64 {
        self.ingested_bytes.load(Ordering::Relaxed)
            + self.catalog_bytes.load(Ordering::Relaxed)
            + self.options.get_ticker_count(Ticker::FlushWriteBytes)
            + self.options.get_ticker_count(Ticker::CompactWriteBytes)
    }

    fn estimate(&self) -> (u64, u64) {
        let mut keys = 0;
        let mut bytes = 0;
        for space in [Space::Windows, Space::Settled] {
            if let Ok(family) = self.family(space) {
                let prop = |name: &str| {
                    self.db
                        .property_int_value_cf(family, name)
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                };
                keys += prop("rocksdb.estimate-num-keys");
                bytes += prop("rocksdb.live-sst-files-size");
            }
        }
        (keys, bytes)
    }

    fn verify(&self) -> Result<u64> {
        let mut keys = 0;
        for space in [Space::Windows, Space::Settled, Space::Catalog] {
            let mut read = ReadOptions::default();
            read.set_verify_checksums(true);
            read.fill_cache(false);
            for item in self
                .db
                .iterator_cf_opt(self.family(space)?, read, IteratorMode::Start)
            {
                item.map_err(lower_err)?;
                keys += 1;
            }
        }
        Ok(keys)
    }

    fn has_space(&self, space: Space) -> bool {
        self.family(space).is_ok()
    }

    /// RocksDB's Checkpoint: memtables flushed, table files hard-linked, the MANIFEST and
    /// the WAL copied, consistent across the column families.
    fn checkpoint(&self, to: &Path) -> Result<()> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(to.join("rocksdb")))
            .map_err(lower_err)
    }

    fn diagnostics(&self) -> LowerDiagnostics {
        let ticker = |t| self.options.get_ticker_count(t);
        LowerDiagnostics {
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
}
