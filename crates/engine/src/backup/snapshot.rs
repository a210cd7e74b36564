//! A consistent copy of an open engine's files, taken while writers go on (`Engine::snapshot`).
//!
//! Under the maintenance lock (every write to the lower tier happens under it, so the catalog
//! and the log's bookkeeping agree while it is held), with the index caught up:
//! 1. the **recorded position** P: the end of what is applied, so every write acknowledged
//!    before the call is before it;
//! 2. the live segments the directory needs to open (those after the catalog's last aged
//!    segment, up to P's), **held** (an in-memory feed slot: they do not retire while they are
//!    read; the hold moves past each segment once it is copied, oldest first, and is released
//!    only when the log passes `BACKUP_HOLD_RELEASE_PERCENT` of its budget, and then the copy
//!    fails rather than read a recycled file);
//! 3. the lower tier's **checkpoint** (RocksDB's Checkpoint; LevelDB: hard links checked
//!    against its MANIFEST, `lower::level`), hard links in `DIR/backup/` (cheap, same file
//!    system), and copies of the directories the caller names (`server/`).
//!
//! Then the lock is released: the copy itself runs beside ingest and maintenance. A segment is
//! copied up to its data's end (P's offset in P's segment): a restore extends it with zeros, so
//! the log read back ends exactly at P. What was written after P is not in the snapshot.
//!
//! What a backup set may hard-link instead of copying (`BackupWriter::link`): the lower tier's
//! table files only. RocksDB and LevelDB never write into a table file once it is named in their
//! manifest; they delete it, and a link keeps its bytes. A log segment is never linked, sealed or
//! not: a retired segment is recycled *in place* (`Segment::recycle`: renamed, a new header
//! written over the old, then the new segment's records over the old ones), so a link would see
//! another segment's bytes change under it; and a backup stores a segment only up to its data's
//! end, not the whole preallocated file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::commit::index_apply;
use crate::commit_log::position::{LogPos, LogPosition};
use crate::commit_log::segment::Segment;
use crate::commit_log::slots;
use crate::dir::{IDENTITY_FILE, LOWER_DIR, LowerTierKind};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{BACKUP_HOLD_RELEASE_PERCENT, SEGMENT_HEADER_BYTES};
use crate::options::background::Pace;
use crate::state::Inner;

/// Where snapshots stage their hard links and copies, inside the data directory. Removed by
/// the snapshot when it ends, and by the next open after a crash.
pub const STAGING_DIR: &str = "backup";

/// Bytes a snapshot's file is read in (one buffer, reused).
const READ_CHUNK_BYTES: u64 = 1 << 20;

/// Snapshots taken since the process started: each stages in a directory of its own.
static NEXT_SNAPSHOT: AtomicU64 = AtomicU64::new(1);

/// What a file of a snapshot is: how a restore treats it, and whether a later backup of the
/// same log may take it from an earlier one instead of copying it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A commit-log segment, copied up to its data's end; restored at `segment_bytes` long
    /// (the rest zeros). Its bytes up to any end never change while the log lives.
    Segment { segment_bytes: u64 },
    /// A table file of the lower tier (`*.sst`, `*.ldb`): never rewritten once made.
    Table,
    /// Anything else (manifests, the identity file, the server's files): copied every time.
    Other,
}

impl FileKind {
    /// Whether the same name and length in an earlier backup of the same log is the same file.
    pub fn is_immutable(self) -> bool {
        !matches!(self, FileKind::Other)
    }
}

/// One file of a snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    /// Its path in the data directory, '/'-separated (`log/00000000000000000007.seg`).
    pub name: String,
    /// The bytes the snapshot holds of it.
    pub bytes: u64,
    pub kind: FileKind,
    source: Source,
}

impl SnapshotFile {
    /// Where a staged file (the lower tier's checkpoint, the identity file, the extra
    /// directories) is while the snapshot lives: a hard link to the data directory's file for
    /// the lower tier's table files. None for a log segment (read through the engine's handle).
    pub fn staged_path(&self) -> Option<&Path> {
        match &self.source {
            Source::Staged(path) => Some(path),
            Source::Segment(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
enum Source {
    /// A file staged under `DIR/backup/N/`.
    Staged(PathBuf),
    /// A held live segment.
    Segment(SegmentSeq),
}

/// A consistent copy of the engine's files (see the module's doc). Dropping it releases the
/// hold and removes the staged files.
pub struct Snapshot {
    inner: Arc<Inner>,
    staging: PathBuf,
    hold: String,
    position: LogPos,
    lower_tier: LowerTierKind,
    files: Vec<SnapshotFile>,
    segments: BTreeMap<SegmentSeq, Arc<Segment>>,
    /// What every read of the copy goes through (unlimited unless `set_pace`).
    pace: Arc<Pace>,
}

impl Snapshot {
    /// Takes the snapshot; `extra_dirs` are directories of the data directory copied with it
    /// (their files are read, not interpreted: the server's own files).
    pub(crate) fn take(inner: &Arc<Inner>, extra_dirs: &[&str]) -> Result<Snapshot> {
        let n = NEXT_SNAPSHOT.fetch_add(1, Ordering::Relaxed);
        let staging = inner
            .dir
            .path
            .join(STAGING_DIR)
            .join(format!("{}-{n}", std::process::id()));
        let hold = format!("backup-{}-{n}", std::process::id());
        let mut snapshot = Snapshot {
            inner: Arc::clone(inner),
            staging,
            hold,
            position: LogPos {
                log_id: 0,
                seq: SegmentSeq(0),
                offset: 0,
                prev_crc: 0,
                prev_len: 0,
            },
            lower_tier: inner.dir.lower_tier,
            files: Vec::new(),
            segments: BTreeMap::new(),
            pace: Arc::new(Pace::unlimited()),
        };
        {
            let _no_maintenance = inner.maintenance.lock();
            index_apply::catch_up(inner)?;
            snapshot.hold_segments()?;
            snapshot.stage(extra_dirs)?;
        }
        snapshot.list_staged()?;
        Ok(snapshot)
    }

    /// Records P and holds the segments up to it (under the maintenance lock).
    fn hold_segments(&mut self) -> Result<()> {
        let mut st = self.inner.state.lock();
        let p: LogPosition = st.log.applied_end;
        let first = st.lower.last_aged_seq.next();
        let end_seq = p.segment_seq.max(first);
        for (seq, live) in st.log.segments.range(first..=end_seq) {
            let end = if *seq == p.segment_seq {
                p.offset.max(SEGMENT_HEADER_BYTES)
            } else {
                live.sealed_end.min(live.written_end)
            };
            self.files.push(SnapshotFile {
                name: format!("{}/{}", crate::dir::LOG_DIR, segment_file_name(*seq)),
                bytes: end.min(live.segment.bytes),
                kind: FileKind::Segment {
                    segment_bytes: live.segment.bytes,
                },
                source: Source::Segment(*seq),
            });
            self.segments.insert(*seq, Arc::clone(&live.segment));
        }
        if self.segments.is_empty() {
            return Err(Error::Lower(format!(
                "internal: no live segment from {first} to {end_seq} to back up"
            )));
        }
        self.position = LogPos {
            log_id: st.feed.log_id,
            seq: p.segment_seq,
            offset: p.offset,
            prev_crc: 0,
            prev_len: 0,
        };
        let at = LogPos {
            seq: first,
            offset: SEGMENT_HEADER_BYTES,
            ..self.position
        };
        st.feed
            .slots
            .insert(self.hold.clone(), slots::transient_slot(at));
        st.log.hold_from = st.feed.hold_from();
        Ok(())
    }

    /// The lower tier's checkpoint, the identity file and the extra directories, staged.
    fn stage(&self, extra_dirs: &[&str]) -> Result<()> {
        std::fs::create_dir_all(&self.staging)
            .context(|| format!("creating {}", self.staging.display()))?;
        let lower = self.staging.join(LOWER_DIR);
        std::fs::create_dir_all(&lower).context(|| format!("creating {}", lower.display()))?;
        self.inner.lower.checkpoint(&lower)?;
        let identity = self.inner.dir.path.join(IDENTITY_FILE);
        std::fs::copy(&identity, self.staging.join(IDENTITY_FILE))
            .context(|| format!("copying {}", identity.display()))?;
        for dir in extra_dirs {
            let from = self.inner.dir.path.join(dir);
            if from.is_dir() {
                copy_tree(&from, &self.staging.join(dir))?;
            }
        }
        Ok(())
    }

    /// Every staged file, named as in the data directory; table files marked.
    fn list_staged(&mut self) -> Result<()> {
        let mut staged = Vec::new();
        walk(&self.staging, &mut staged)?;
        staged.sort();
        for path in staged {
            let name = path
                .strip_prefix(&self.staging)
                .map_err(|_| Error::Lower(format!("internal: {} is not staged", path.display())))?
                .to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/");
            let bytes = std::fs::metadata(&path)
                .context(|| format!("stat {}", path.display()))?
                .len();
            let kind = if name.starts_with("lower/")
                && (name.ends_with(".sst") || name.ends_with(".ldb"))
            {
                FileKind::Table
            } else {
                FileKind::Other
            };
            self.files.push(SnapshotFile {
                name,
                bytes,
                kind,
                source: Source::Staged(path),
            });
        }
        self.files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(())
    }

    /// The files, by name.
    pub fn files(&self) -> &[SnapshotFile] {
        &self.files
    }

    /// The recorded position: every write acknowledged before the snapshot was taken lies
    /// before it, nothing in the snapshot after it.
    pub fn position(&self) -> LogPos {
        self.position
    }

    pub fn log_id(&self) -> u64 {
        self.position.log_id
    }

    pub fn lower_tier(&self) -> LowerTierKind {
        self.lower_tier
    }

    /// Reads of the copy go at most at `pace`'s rate from now on (issue 57: a backup within a
    /// budget). A longer copy holds the log longer: at a rate under ingest's, a long copy of the
    /// log can meet the hold's release near a full budget (`check_held`).
    pub fn set_pace(&mut self, pace: Arc<Pace>) {
        self.pace = pace;
    }

    /// The snapshot's bytes of `file`, in order, at the snapshot's pace. A segment read after
    /// the log's budget released the hold fails at its end (its file may have been recycled
    /// meanwhile).
    pub fn open(&self, file: &SnapshotFile) -> Result<Box<dyn Read + '_>> {
        match &file.source {
            Source::Staged(path) => {
                let opened = File::open(path).context(|| format!("opening {}", path.display()))?;
                Ok(Box::new(Paced {
                    inner: opened.take(file.bytes),
                    pace: &self.pace,
                }))
            }
            Source::Segment(seq) => {
                let segment = self.segments.get(seq).ok_or_else(|| {
                    Error::Lower(format!("internal: segment {seq} is not in the snapshot"))
                })?;
                Ok(Box::new(SegmentReader {
                    snapshot: self,
                    segment: Arc::clone(segment),
                    at: 0,
                    end: file.bytes,
                    buf: Vec::new(),
                    buf_at: 0,
                }))
            }
        }
    }

    /// Checks that segment `seq` is still held (so what was read of it is its own bytes).
    fn check_held(&self, seq: SegmentSeq) -> Result<()> {
        let st = self.inner.state.lock();
        match st.feed.slots.get(&self.hold) {
            Some(slot) if !slot.released => Ok(()),
            _ => Err(Error::Backup(format!(
                "the log passed {BACKUP_HOLD_RELEASE_PERCENT} % of its budget and released the \
                 backup's hold while it read segment {seq} (the oldest now is {}): the copy \
                 stopped rather than read a recycled file; run it again, or give the log a \
                 larger budget",
                st.log.segments.keys().next().copied().unwrap_or(seq)
            ))),
        }
    }

    /// The copy is done with `file` (copied, or taken from an earlier backup): if it is the
    /// oldest segment held, the hold moves to the next one, and it may retire. Segments are
    /// copied oldest first, so what the hold keeps shrinks while ingest adds to the log.
    pub fn done_with(&self, file: &SnapshotFile) {
        let Source::Segment(seq) = file.source else {
            return;
        };
        let next = self.segments.range(seq.next()..).next().map(|(s, _)| *s);
        let mut st = self.inner.state.lock();
        if let (Some(slot), Some(next)) = (st.feed.slots.get_mut(&self.hold), next)
            && slot.pos.seq == seq
        {
            slot.pos.seq = next;
            st.log.hold_from = st.feed.hold_from();
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        {
            let mut st = self.inner.state.lock();
            st.feed.slots.remove(&self.hold);
            st.log.hold_from = st.feed.hold_from();
        }
        let _ = std::fs::remove_dir_all(&self.staging);
    }
}

/// Removes what snapshots of a process that ended staged (`open` calls it).
pub(crate) fn remove_staging(data_dir: &Path) -> Result<()> {
    let staging = data_dir.join(STAGING_DIR);
    match std::fs::remove_dir_all(&staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).context(|| format!("removing {}", staging.display()))
        }
        _ => Ok(()),
    }
}

fn segment_file_name(seq: SegmentSeq) -> String {
    crate::commit_log::segment::segment_path(Path::new(""), seq)
        .to_string_lossy()
        .into_owned()
}

/// A held segment's bytes up to the snapshot's end, read a chunk at a time through the
/// engine's own file handle.
struct SegmentReader<'a> {
    snapshot: &'a Snapshot,
    segment: Arc<Segment>,
    at: u64,
    end: u64,
    buf: Vec<u8>,
    buf_at: usize,
}

impl Read for SegmentReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf_at == self.buf.len() {
            if self.at == self.end {
                // Read whole while held, or the bytes may be another segment's.
                self.snapshot
                    .check_held(self.segment.seq)
                    .map_err(std::io::Error::other)?;
                return Ok(0);
            }
            let len = (self.end - self.at).min(READ_CHUNK_BYTES) as usize;
            self.snapshot.pace.take(len as u64);
            self.segment
                .read_into(&mut self.buf, self.at, len)
                .map_err(std::io::Error::other)?;
            self.buf.truncate(len);
            self.buf_at = 0;
            self.at += len as u64;
        }
        let n = out.len().min(self.buf.len() - self.buf_at);
        out[..n].copy_from_slice(&self.buf[self.buf_at..self.buf_at + n]);
        self.buf_at += n;
        Ok(n)
    }
}

/// A staged file's reader, at the snapshot's pace.
struct Paced<'a, R> {
    inner: R,
    pace: &'a Pace,
}

impl<R: Read> Read for Paced<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        self.pace.take(n as u64);
        Ok(n)
    }
}

/// Every regular file under `dir`.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).context(|| format!("listing {}", dir.display()))? {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        let kind = entry
            .file_type()
            .context(|| format!("stat {}", entry.path().display()))?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Copies the regular files under `from` to `to` (files that vanish meanwhile are skipped:
/// the server replaces its files by rename, and a finished handoff's record may go).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).context(|| format!("listing {}", from.display()))? {
        let entry = entry.context(|| format!("listing {}", from.display()))?;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() && !entry.file_name().to_string_lossy().ends_with(".tmp") {
            match std::fs::copy(entry.path(), &target) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => {
                    other.context(|| format!("copying {}", entry.path().display()))?;
                }
            }
        }
    }
    Ok(())
}
