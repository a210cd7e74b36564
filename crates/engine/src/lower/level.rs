//! Google LevelDB as the lower tier (paper 002's 2Lev-LevelDB), through roamkv-leveldb.
//!
//! LevelDB cannot take RocksDB's path all the way, and what it does instead is measured
//! (docs/ENGINE.md, "LevelDB"):
//! - **No ingestion.** A run is written as write batches, through LevelDB's own log and
//!   memtable, then flushed to a table: a moved reading costs LevelDB about two writes where
//!   RocksDB's ingestion costs one. Window keys grow with every pass, so each flushed table lies
//!   above all others and LevelDB moves it down its levels without rewriting it (a trivial move).
//!   The batches are small (a fraction of the write buffer) and only the last is synced: a run is
//!   not visible until the catalog names it, so it need not be one atomic batch, and its memory
//!   stays within the memtable (a 32 MiB run as one batch made a memtable of 32 MiB beside the
//!   run itself, which is what took roamkv-leveldb past its 256 MiB cgroup).
//! - **No file drops.** A dead window's keys are deleted (tombstones) and the window's range
//!   compacted, which reads the window's table and writes nothing back.
//! - **No range delete.** The settled space's deletes are key by key.
//! - **Two databases.** Readings (runs and settled) in one, the catalog in another, so that the
//!   catalog's small writes never widen the tables that hold runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use roamkv_leveldb::{Db, Options, WriteBatch};

use super::{CatalogOp, Layout, LowerTier, PreparedBody, PreparedRun, Space, WindowFile};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::WindowId;
use crate::stats::LowerDiagnostics;

/// Tag bytes of the spaces in the readings database: settled below runs, so new windows (ever
/// larger keys) always sort above everything in it. Format 2's (a key per reading) and format
/// 3's (blocks of readings: lower/blocks/).
const READING_SETTLED_TAG: u8 = 0x01;
const READING_RUNS_TAG: u8 = 0x02;
const BLOCK_SETTLED_TAG: u8 = 0x03;
const BLOCK_RUNS_TAG: u8 = 0x04;
/// The two databases' directories under `DIR/lower`.
const DATA_DB: &str = "leveldb";
const CATALOG_DB: &str = "leveldb-catalog";
/// Tries of a checkpoint that found the database changing under it.
const CHECKPOINT_TRIES_MAX: usize = 20;

pub struct LevelLower {
    /// `DIR/lower`, for checkpoints.
    dir: PathBuf,
    data: Db,
    catalog: Db,
    layout: Layout,
    /// Bytes of a write batch when a run is written.
    batch_bytes: usize,
    /// Bytes handed to LevelDB's logs (key + value + 8 bytes of framing per op; approximate:
    /// LevelDB does not report its log bytes).
    log_bytes: AtomicU64,
}

fn lower_err(e: roamkv_leveldb::Error) -> Error {
    Error::Lower(e.to_string())
}

impl LevelLower {
    pub fn open(dir: &Path, memory_bytes: u64, layout: Layout) -> Result<LevelLower> {
        let write_buffer_bytes = (memory_bytes / 4).max(1 << 20) as usize;
        let options = Options {
            write_buffer_bytes,
            block_cache_bytes: (memory_bytes / 2).max(1 << 20) as usize,
            ..Options::default()
        };
        let data = Db::open(&dir.join(DATA_DB), &options).map_err(lower_err)?;
        let catalog_options = Options {
            write_buffer_bytes: 1 << 20,
            block_cache_bytes: 1 << 20,
            ..Options::default()
        };
        let catalog = Db::open(&dir.join(CATALOG_DB), &catalog_options).map_err(lower_err)?;
        Ok(LevelLower {
            dir: dir.to_path_buf(),
            data,
            catalog,
            layout,
            batch_bytes: (write_buffer_bytes / 4).max(256 << 10),
            log_bytes: AtomicU64::new(0),
        })
    }

    fn count(&self, key: &[u8], value: &[u8]) {
        self.log_bytes
            .fetch_add((key.len() + value.len() + 8) as u64, Ordering::Relaxed);
    }

    /// The tag byte of a space of the readings database.
    fn tag(&self, space: Space) -> u8 {
        match (space, self.layout) {
            (Space::Windows, Layout::Readings) | (Space::LegacyWindows, _) => READING_RUNS_TAG,
            (Space::Settled, Layout::Readings) | (Space::LegacySettled, _) => READING_SETTLED_TAG,
            (Space::Windows, Layout::Blocks) => BLOCK_RUNS_TAG,
            (Space::Settled, Layout::Blocks) => BLOCK_SETTLED_TAG,
            (Space::Catalog, _) => unreachable!("the catalog is a database of its own"),
        }
    }

    /// The database and key of a key of `space`.
    fn locate(&self, space: Space, key: &[u8]) -> (&Db, Vec<u8>) {
        match space {
            Space::Catalog => (&self.catalog, key.to_vec()),
            _ => {
                let tag = self.tag(space);
                let mut tagged = Vec::with_capacity(key.len() + 1);
                tagged.push(tag);
                tagged.extend_from_slice(key);
                (&self.data, tagged)
            }
        }
    }

    /// Deletes every key of `space` in [start, end) (LevelDB has no range delete).
    fn delete_range(&self, space: Space, start: &[u8], end: &[u8], sync: bool) -> Result<()> {
        let (db, start) = self.locate(space, start);
        let (_, end) = self.locate(space, end);
        let mut batch = WriteBatch::new();
        let mut it = db.iter();
        it.seek(&start);
        while it.valid() && it.key() < end.as_slice() {
            batch.delete(it.key());
            self.count(it.key(), &[]);
            it.next();
        }
        it.status().map_err(lower_err)?;
        drop(it);
        db.write(&batch, sync).map_err(lower_err)
    }

    /// Sum of a column of the "Level Files Size(MB) Time(sec) Read(MB) Write(MB)" table of
    /// leveldb.stats, over both databases.
    fn stats_column_mb(&self, column: usize) -> f64 {
        [&self.data, &self.catalog]
            .iter()
            .filter_map(|db| db.property("leveldb.stats"))
            .flat_map(|stats| {
                stats
                    .lines()
                    .filter_map(|line| {
                        let cols: Vec<&str> = line.split_whitespace().collect();
                        (cols.len() == 6 && cols[0].parse::<u32>().is_ok())
                            .then(|| cols[column].parse::<f64>().ok())?
                    })
                    .collect::<Vec<f64>>()
            })
            .sum()
    }
}

impl LowerTier for LevelLower {
    fn prepare_run(&self, space: Space, run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<PreparedRun> {
        if !super::strictly_sorted(&run) {
            return Err(Error::Lower(
                "leveldb: a run whose keys do not strictly ascend".into(),
            ));
        }
        let entry_bytes = run.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
        Ok(PreparedRun {
            space,
            // What writing it costs LevelDB at first: its log and then a table.
            file_bytes: entry_bytes,
            first_key: run.first().map(|(k, _)| k.clone()),
            body: PreparedBody::Entries(run),
        })
    }

    fn ingest(&self, run: PreparedRun) -> Result<()> {
        let PreparedBody::Entries(entries) = run.body else {
            return Err(Error::Lower(
                "leveldb: a run prepared for another tier".into(),
            ));
        };
        let mut batch = WriteBatch::new();
        let mut batched = 0;
        for (key, value) in &entries {
            let (_, tagged) = self.locate(run.space, key);
            batch.put(&tagged, value);
            self.count(&tagged, value);
            batched += tagged.len() + value.len();
            if batched >= self.batch_bytes {
                self.data.write(&batch, false).map_err(lower_err)?;
                batch.clear();
                batched = 0;
            }
        }
        // A synced write makes LevelDB's whole log durable, with every batch before it.
        self.data.write(&batch, true).map_err(lower_err)
    }

    fn discard(&self, _run: PreparedRun) {}

    fn write_catalog(&self, ops: &[CatalogOp]) -> Result<()> {
        // The readings database first (departures' and trims' deletes of settled readings),
        // then the catalog. A crash between them leaves readings deleted that the catalog still
        // names: only ever readings whose DEPART or TRIM is still in the log, which recovery
        // applies again.
        for op in ops {
            match op {
                CatalogOp::DeleteRange(space, start, end) if *space != Space::Catalog => {
                    self.delete_range(*space, start, end, true)?
                }
                CatalogOp::Put(space, k, v) if *space != Space::Catalog => {
                    let (db, k) = self.locate(*space, k);
                    self.count(&k, v);
                    db.put(&k, v, true).map_err(lower_err)?
                }
                CatalogOp::Delete(space, k) if *space != Space::Catalog => {
                    let (db, k) = self.locate(*space, k);
                    db.delete(&k, true).map_err(lower_err)?
                }
                _ => {}
            }
        }
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                CatalogOp::Put(Space::Catalog, k, v) => {
                    batch.put(k, v);
                    self.count(k, v);
                }
                CatalogOp::Delete(Space::Catalog, k) => batch.delete(k),
                CatalogOp::DeleteRange(Space::Catalog, start, end) => {
                    let mut it = self.catalog.iter();
                    it.seek(start);
                    while it.valid() && it.key() < end.as_slice() {
                        batch.delete(it.key());
                        it.next();
                    }
                    it.status().map_err(lower_err)?;
                }
                _ => {}
            }
        }
        self.catalog.write(&batch, true).map_err(lower_err)
    }

    fn drop_windows(&self, wins: &[WindowId]) -> Result<()> {
        let (Some(first), Some(last)) = (wins.iter().min(), wins.iter().max()) else {
            return Ok(());
        };
        for &win in wins {
            self.delete_range(
                Space::Windows,
                &win.0.to_be_bytes(),
                &win.next().0.to_be_bytes(),
                false,
            )?;
        }
        // Compaction of the dropped range reads its tables and writes nothing back.
        let (_, start) = self.locate(Space::Windows, &first.0.to_be_bytes());
        let (_, end) = self.locate(Space::Windows, &last.next().0.to_be_bytes());
        self.data.compact_range(Some(&start), Some(&end));
        Ok(())
    }

    fn reclaim(&self, space: Space, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        // The keys were deleted one by one (no range delete): compacting the range drops them.
        for (start, end) in ranges {
            let (db, start) = self.locate(space, start);
            let (_, end) = self.locate(space, end);
            db.compact_range(Some(&start), Some(&end));
        }
        Ok(())
    }

    fn settled_bytes(&self) -> (u64, u64) {
        // LevelDB estimates no live data; its table bytes of the settled range stand for both.
        let tag = self.tag(Space::Settled);
        let bytes = self.data.approximate_size(&[tag], &[tag + 1]);
        (bytes, bytes)
    }

    fn window_files(&self) -> Result<Vec<WindowFile>> {
        // One seek per window: to the window's first key, then past the window.
        let mut files = Vec::new();
        let mut it = self.data.iter();
        let tag = self.tag(Space::Windows);
        it.seek(&[tag]);
        while it.valid() && it.key().first() == Some(&tag) {
            let Some(win) = super::keys::window_of(&it.key()[1..]) else {
                return Err(Error::Lower(format!(
                    "leveldb: malformed run key {:?}",
                    it.key()
                )));
            };
            files.push(WindowFile {
                win,
                bytes: 0,
                level: None,
            });
            let (_, next) = self.locate(Space::Windows, &win.next().0.to_be_bytes());
            it.seek(&next);
        }
        it.status().map_err(lower_err)?;
        Ok(files)
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (db, key) = self.locate(space, key);
        db.get(&key).map_err(lower_err)
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let (db, start) = self.locate(space, start);
        let (_, end) = self.locate(space, end);
        let skip = if space == Space::Catalog { 0 } else { 1 };
        let mut it = db.iter();
        it.seek(&start);
        while it.valid() && it.key() < end.as_slice() {
            if !visit(&it.key()[skip..], it.value()) {
                break;
            }
            it.next();
        }
        it.status().map_err(lower_err)
    }

    fn last_in(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let (db, start) = self.locate(space, start);
        let (_, end) = self.locate(space, end);
        let skip = if space == Space::Catalog { 0 } else { 1 };
        let mut it = db.iter();
        it.seek(&end);
        if it.valid() {
            it.prev();
        } else {
            it.seek_to_last();
        }
        while it.valid() && it.key() >= end.as_slice() {
            it.prev();
        }
        let found = (it.valid() && it.key() >= start.as_slice())
            .then(|| (it.key()[skip..].to_vec(), it.value().to_vec()));
        it.status().map_err(lower_err)?;
        Ok(found)
    }

    fn bytes_written(&self) -> u64 {
        self.log_bytes.load(Ordering::Relaxed) + (self.stats_column_mb(5) * 1_048_576.0) as u64
    }

    fn estimate(&self) -> (u64, u64) {
        // LevelDB offers no key-count estimate; report the bytes of its table files.
        (0, (self.stats_column_mb(2) * 1_048_576.0) as u64)
    }

    fn verify(&self) -> Result<u64> {
        let mut keys = 0;
        for db in [&self.data, &self.catalog] {
            let mut it = db.iter();
            it.seek_to_first();
            while it.valid() {
                keys += 1;
                it.next();
            }
            it.status().map_err(lower_err)?;
        }
        Ok(keys)
    }

    /// LevelDB has no checkpoint call: each database is copied as `checkpoint_db` says.
    fn checkpoint(&self, to: &Path) -> Result<()> {
        for name in [DATA_DB, CATALOG_DB] {
            checkpoint_db(&self.dir.join(name), &to.join(name))?;
        }
        Ok(())
    }

    fn diagnostics(&self) -> LowerDiagnostics {
        // LevelDB's stats table has one Write(MB) column for flushes and compactions together.
        LowerDiagnostics {
            compaction_write_bytes: (self.stats_column_mb(5) * 1_048_576.0) as u64,
            compaction_read_bytes: (self.stats_column_mb(4) * 1_048_576.0) as u64,
            ..LowerDiagnostics::default()
        }
    }
}

/// A consistent copy of one LevelDB database without stopping it. roamkv writes nothing to it
/// meanwhile (the maintenance lock), so only LevelDB's own compactions change its files, and a
/// compaction deletes a file only after it recorded the change in the MANIFEST (LogAndApply,
/// then RemoveObsoleteFiles): the MANIFEST is read, every table and log file hard-linked (logs
/// copied), and the copy kept only if `CURRENT` and the MANIFEST's length did not change
/// meanwhile. Otherwise it is made again. Files linked that the MANIFEST does not name are
/// obsolete; LevelDB deletes them when the copy is opened.
fn checkpoint_db(from: &Path, to: &Path) -> Result<()> {
    for _ in 0..CHECKPOINT_TRIES_MAX {
        if std::fs::exists(to).unwrap_or(false) {
            std::fs::remove_dir_all(to).context(|| format!("removing {}", to.display()))?;
        }
        std::fs::create_dir_all(to).context(|| format!("creating {}", to.display()))?;
        let current_path = from.join("CURRENT");
        let current = std::fs::read(&current_path)
            .context(|| format!("reading {}", current_path.display()))?;
        let manifest_name = String::from_utf8_lossy(&current).trim().to_string();
        let manifest_path = from.join(&manifest_name);
        let manifest = std::fs::read(&manifest_path)
            .context(|| format!("reading {}", manifest_path.display()))?;
        if !link_files(from, to)? {
            continue;
        }
        let unchanged = std::fs::read(&current_path).is_ok_and(|now| now == current)
            && std::fs::metadata(&manifest_path).is_ok_and(|m| m.len() == manifest.len() as u64);
        if unchanged {
            std::fs::write(to.join(&manifest_name), &manifest)
                .and_then(|()| std::fs::write(to.join("CURRENT"), &current))
                .context(|| format!("writing {}", to.display()))?;
            return Ok(());
        }
    }
    Err(Error::Lower(format!(
        "leveldb: {} kept changing during {CHECKPOINT_TRIES_MAX} checkpoints",
        from.display()
    )))
}

/// Hard-links the table files and copies the log files of `from` into `to`; false if one
/// vanished meanwhile (a compaction removed it: the caller starts again).
fn link_files(from: &Path, to: &Path) -> Result<bool> {
    for entry in std::fs::read_dir(from).context(|| format!("listing {}", from.display()))? {
        let entry = entry.context(|| format!("listing {}", from.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let target = to.join(&name);
        let done = if name.ends_with(".ldb") || name.ends_with(".sst") {
            std::fs::hard_link(entry.path(), &target)
        } else if name.ends_with(".log") {
            std::fs::copy(entry.path(), &target).map(|_| ())
        } else {
            continue;
        };
        match done {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e).context(|| format!("copying {}", entry.path().display())),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ids::LowerId;

    #[test]
    fn spaces_stay_apart_and_windows_list_by_seeks() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let lower = LevelLower::open(dir.path(), 8 << 20, Layout::Blocks)?;
        for win in [3u64, 5, 9].map(WindowId) {
            let run: Vec<(Vec<u8>, Vec<u8>)> = (0..10)
                .map(|i| {
                    (
                        super::super::keys::run_key(win, LowerId(1), "s", i),
                        vec![win.0 as u8; 10],
                    )
                })
                .collect();
            let prepared = lower.prepare_run(Space::Windows, run)?;
            lower.ingest(prepared)?;
        }
        lower.write_catalog(&[CatalogOp::Put(Space::Catalog, b"k".to_vec(), b"v".to_vec())])?;
        let wins: Vec<u64> = lower.window_files()?.iter().map(|f| f.win.0).collect();
        assert_eq!(wins, vec![3, 5, 9]);
        lower.drop_windows(&[WindowId(5)])?;
        let wins: Vec<u64> = lower.window_files()?.iter().map(|f| f.win.0).collect();
        assert_eq!(wins, vec![3, 9]);
        let (start, end) = super::super::keys::Place::Window(WindowId(9)).range(LowerId(1), None);
        let last = lower.last_in(Space::Windows, &start, &end)?;
        assert_eq!(
            last.map(|(k, _)| k),
            Some(super::super::keys::run_key(WindowId(9), LowerId(1), "s", 9))
        );
        assert_eq!(lower.get(Space::Catalog, b"k")?, Some(b"v".to_vec()));
        Ok(())
    }
}
