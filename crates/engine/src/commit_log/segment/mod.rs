//! Commit-log segment files: fixed-size, preallocated, recycled (docs/FORMAT.md, "Segment").
//!
//! A segment is created once at its full size (header + zeros, fdatasync'd) or recycled from a
//! retired one, so that appending a record never grows the file or allocates blocks: a commit is
//! a data write plus fdatasync, with no file-system metadata to journal (docs/PROPERTIES.md, property 4).
//!
//! ```text
//! header (the first 4096 bytes of the file):
//! offset size field
//!  0      8   magic "RKVLOG01"
//!  8      4   format version (u32 LE) = 2
//! 12      4   reserved, zero
//! 16      8   segment sequence number (u64 LE), also the file's name
//! 24      8   segment size in bytes (u64 LE), the file's length
//! 32      4   crc32c of bytes [0, 32)
//! 36   4060   zero
//! records from offset 4096 on (record.rs)
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::commit_log::storage::{self, Storage, StorageFile};
use crate::dir::format::{u32_at, u64_at};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{
    LOG_BLOCK_BYTES, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES,
};

use crate::dir::format::SEGMENT_FORMAT_PUT_PER_READING;
/// The segment's magic and format (format.rs), under the names the format tests use.
pub use crate::dir::format::{SEGMENT_FORMAT_VERSION as FORMAT_VERSION, SEGMENT_MAGIC as MAGIC};

// The segment header (docs/FORMAT.md, "Segment"): magic, version, 4 reserved bytes, the
// sequence number, the file's size, then the crc32c of the fields before it.
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
const RESERVED_OFFSET: usize = VERSION_OFFSET + 4;
const SEQ_OFFSET: usize = RESERVED_OFFSET + 4;
const SIZE_OFFSET: usize = SEQ_OFFSET + 8;
/// The header's fields, all covered by its checksum.
const HEADER_FIELDS_BYTES: usize = SIZE_OFFSET + 8;
const HEADER_CRC_OFFSET: usize = HEADER_FIELDS_BYTES;
/// The header with its checksum (the rest of the first page is zero).
const HEADER_USED_BYTES: usize = HEADER_CRC_OFFSET + 4;
const _: () = assert!(HEADER_USED_BYTES as u64 <= SEGMENT_HEADER_BYTES);
/// A new segment is zero-filled in writes of this size; paced, each is written back before the
/// next (`Segment::create_paced`). A commit's fdatasync queued behind one waits about a
/// millisecond: with 1 MiB chunks p99 at half of bench serve's peak was 17-35 ms, with 256 KiB
/// 6-16 ms.
const ZERO_FILL_CHUNK_BYTES: usize = 256 << 10;

/// What a group writes after its records, up to the next block boundary.
static ZERO_BLOCK: [u8; LOG_BLOCK_BYTES as usize] = [0; LOG_BLOCK_BYTES as usize];

/// The last partial block of a segment as the log last wrote it: the bytes a group that starts
/// inside that block writes again before its own (`Segment::write_blocks`).
#[derive(Debug, Default)]
struct TailBlock {
    /// Offset of the block (a multiple of `LOG_BLOCK_BYTES`).
    start: u64,
    /// Its bytes from `start` to the end of the last write: shorter than a block.
    bytes: Vec<u8>,
}

pub fn segment_path(dir: &Path, seq: SegmentSeq) -> PathBuf {
    dir.join(format!("{:020}.seg", seq.0))
}

/// Parses a segment file name back to its sequence number.
pub fn parse_segment_name(name: &str) -> Option<SegmentSeq> {
    let digits = name.strip_suffix(".seg")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(SegmentSeq)
}

/// Names of segments being made or retired (interrupted by a crash): deleted on open.
pub fn is_incomplete_segment_name(name: &str) -> bool {
    name.ends_with(".seg.tmp") || name.ends_with(".seg.recycling") || name.ends_with(".seg.retired")
}

fn encode_header(seq: SegmentSeq, segment_bytes: u64) -> Vec<u8> {
    let mut header = vec![0u8; SEGMENT_HEADER_BYTES as usize];
    header[MAGIC_OFFSET..VERSION_OFFSET].copy_from_slice(MAGIC);
    header[VERSION_OFFSET..RESERVED_OFFSET].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[SEQ_OFFSET..SIZE_OFFSET].copy_from_slice(&seq.0.to_le_bytes());
    header[SIZE_OFFSET..HEADER_FIELDS_BYTES].copy_from_slice(&segment_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&header[..HEADER_FIELDS_BYTES]);
    header[HEADER_CRC_OFFSET..HEADER_USED_BYTES].copy_from_slice(&crc.to_le_bytes());
    header
}

/// One open segment file.
#[derive(Debug)]
pub struct Segment {
    pub seq: SegmentSeq,
    pub path: PathBuf,
    pub bytes: u64,
    file: Arc<dyn StorageFile>,
    storage: Arc<dyn Storage>,
    /// Start of the bytes whose write-back has not been started yet (`start_writeback`).
    writeback_from: AtomicU64,
    /// Only the group commit's writer (one at a time) takes it: never contended.
    tail_block: Mutex<TailBlock>,
}

impl Segment {
    fn new(
        seq: SegmentSeq,
        path: PathBuf,
        bytes: u64,
        file: Arc<dyn StorageFile>,
        storage: Arc<dyn Storage>,
    ) -> Segment {
        Segment {
            seq,
            path,
            bytes,
            file,
            storage,
            writeback_from: AtomicU64::new(SEGMENT_HEADER_BYTES),
            tail_block: Mutex::new(TailBlock::default()),
        }
    }

    /// Bounds the dirty pages of a log that is not fdatasync'd per commit (RocksDB's
    /// bytes_per_sync): once `window_bytes` have been written past the last call, waits for the
    /// write-back started last time and starts write-back of the new bytes. Only the group
    /// commit leader calls this (one writer at a time).
    pub fn start_writeback(&self, written_end: u64, window_bytes: u64) -> Result<()> {
        let from = self.writeback_from.load(Ordering::Relaxed);
        if window_bytes == 0 || written_end < from + window_bytes {
            return Ok(());
        }
        self.file
            .write_back(from, from, written_end - from)
            .context(|| format!("write-back of {} up to {written_end}", self.path.display()))?;
        self.writeback_from.store(written_end, Ordering::Relaxed);
        Ok(())
    }

    /// Low 32 bits of the sequence, as stored in every record.
    pub fn seq_low(&self) -> u32 {
        self.seq.0 as u32
    }

    /// Creates a segment at its full size, then gives it its final name and syncs the directory.
    /// Returns the segment and the bytes written.
    ///
    /// `zero_fill`: write zeros over the whole file, so that later commits find every block
    /// allocated and initialised and their fdatasync has no metadata to write (property 4).
    /// Without it the space is only reserved with fallocate(2): ext4 and XFS then keep
    /// "unwritten" extents whose conversion on first write is metadata — fine when commits do
    /// not fdatasync (durability None), and it saves writing every segment twice.
    pub fn create(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        seq: SegmentSeq,
        bytes: u64,
        zero_fill: bool,
    ) -> Result<(Segment, u64)> {
        Segment::create_paced(storage, dir, seq, bytes, zero_fill, &|| false)
    }

    /// `create`, with the zero-fill paced while `pace()` says so (the segment preparer: while
    /// no writer is waiting for the segment). Paced, each `ZERO_FILL_CHUNK_BYTES` write is
    /// written back before the next is made, so the preparer has at most one chunk queued at
    /// the disk ahead of a commit's fdatasync. Unpaced, the zeros go to the page cache as fast
    /// as it takes them and one sync at the end writes them: fastest, but 64 MiB queued at once
    /// stalled commits for ~80 ms (docs/BENCHMARKS.md, bench serve's p99).
    pub fn create_paced(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        seq: SegmentSeq,
        bytes: u64,
        zero_fill: bool,
        pace: &dyn Fn() -> bool,
    ) -> Result<(Segment, u64)> {
        let tmp = segment_path(dir, seq).with_extension("seg.tmp");
        let made = Segment::create_at(storage, dir, &tmp, seq, bytes, zero_fill, pace);
        if made.is_err() {
            // Give the space back at once (a full file system is the likely cause).
            let _ = storage.remove(&tmp);
        }
        made
    }

    fn create_at(
        storage: &Arc<dyn Storage>,
        dir: &Path,
        tmp: &Path,
        seq: SegmentSeq,
        bytes: u64,
        zero_fill: bool,
        pace: &dyn Fn() -> bool,
    ) -> Result<(Segment, u64)> {
        let path = segment_path(dir, seq);
        let file = storage
            .create(tmp)
            .context(|| format!("creating segment {}", tmp.display()))?;
        storage::write_all_at(&*file, &encode_header(seq, bytes), 0)
            .context(|| format!("writing {}", tmp.display()))?;
        let mut written = SEGMENT_HEADER_BYTES;
        if zero_fill {
            // The blocks get allocated and written now, not during a commit (see create_paced).
            let zeros = vec![0u8; ZERO_FILL_CHUNK_BYTES];
            while written < bytes {
                let n = zeros.len().min((bytes - written) as usize);
                storage::write_all_at(&*file, &zeros[..n], written)
                    .context(|| format!("zero-filling {}", tmp.display()))?;
                if pace() {
                    // Wait for what came before, start this chunk's write-back.
                    file.write_back(written, written, n as u64)
                        .context(|| format!("write-back of {}", tmp.display()))?;
                }
                written += n as u64;
            }
        } else {
            file.allocate(bytes)
                .context(|| format!("fallocate {}", tmp.display()))?;
        }
        file.sync_all()
            .context(|| format!("syncing {}", tmp.display()))?;
        storage
            .rename(tmp, &path)
            .context(|| format!("renaming {} into place", tmp.display()))?;
        sync_dir(&**storage, dir)?;
        Ok((
            Segment::new(seq, path, bytes, file, Arc::clone(storage)),
            written,
        ))
    }

    /// Gives a retired segment (`file`, now named `from`) a new life under a new sequence
    /// number. Its old records stay in place but carry the old sequence, so they read as "end
    /// of data". Crash-safe: the file passes through a `.seg.recycling` name that open() deletes.
    pub fn recycle(
        storage: &Arc<dyn Storage>,
        file: Arc<dyn StorageFile>,
        from: &Path,
        bytes: u64,
        dir: &Path,
        new_seq: SegmentSeq,
    ) -> Result<Segment> {
        let path = segment_path(dir, new_seq);
        let transit = path.with_extension("seg.recycling");
        storage
            .rename(from, &transit)
            .context(|| format!("renaming {} for reuse", from.display()))?;
        // The new name must be durable before the header changes: otherwise a power cut could
        // leave the file under its old, live name with a new sequence in its header.
        sync_dir(&**storage, dir)?;
        storage::write_all_at(&*file, &encode_header(new_seq, bytes), 0)
            .context(|| format!("writing header of {}", transit.display()))?;
        file.sync_data()
            .context(|| format!("fdatasync {}", transit.display()))?;
        storage
            .rename(&transit, &path)
            .context(|| format!("renaming {} into place", transit.display()))?;
        sync_dir(&**storage, dir)?;
        Ok(Segment::new(
            new_seq,
            path,
            bytes,
            file,
            Arc::clone(storage),
        ))
    }

    /// Moves a segment out of the log (to `.seg.retired`), durably, and returns a handle for
    /// recycling. Readers that still hold the segment keep reading the same file. Segments retire
    /// oldest first, each rename made durable before the next: after a power cut the live log is
    /// still a contiguous suffix of the whole log (recovery checks it).
    pub fn retire(&self) -> Result<(Arc<dyn StorageFile>, PathBuf)> {
        let retired = self.path.with_extension("seg.retired");
        self.storage
            .rename(&self.path, &retired)
            .context(|| format!("retiring {}", self.path.display()))?;
        if let Some(dir) = self.path.parent() {
            sync_dir(&*self.storage, dir)?;
        }
        Ok((Arc::clone(&self.file), retired))
    }

    /// Opens an existing segment and validates its header against its name.
    pub fn open(
        storage: &Arc<dyn Storage>,
        path: &Path,
        expected_seq: SegmentSeq,
    ) -> Result<Segment> {
        Segment::open_as(storage, path, expected_seq, false)
    }

    /// `open`, or with `read_only` the file opened for reading only (a read-only engine's).
    pub fn open_as(
        storage: &Arc<dyn Storage>,
        path: &Path,
        expected_seq: SegmentSeq,
        read_only: bool,
    ) -> Result<Segment> {
        let file = open_file(&**storage, path, read_only)?;
        let len = file
            .size_bytes()
            .context(|| format!("stat {}", path.display()))?;
        let corrupt = |offset: u64, reason: String| Error::Corrupt {
            file: path.to_path_buf(),
            offset,
            reason,
        };
        let mut header = [0u8; HEADER_USED_BYTES];
        if len < SEGMENT_HEADER_BYTES {
            return Err(corrupt(
                0,
                format!("file is {len} bytes, shorter than the segment header"),
            ));
        }
        storage::read_exact_at(&*file, &mut header, 0)
            .context(|| format!("reading {}", path.display()))?;
        if &header[MAGIC_OFFSET..VERSION_OFFSET] != MAGIC {
            return Err(corrupt(0, "bad magic: not a roamkv log segment".into()));
        }
        let u32_field = |at| u32_at(&header, at).expect("inside the fixed-size header");
        let u64_field = |at| u64_at(&header, at).expect("inside the fixed-size header");
        let stored_crc = u32_field(HEADER_CRC_OFFSET);
        let computed_crc = crc32c::crc32c(&header[..HEADER_FIELDS_BYTES]);
        if stored_crc != computed_crc {
            return Err(corrupt(
                HEADER_CRC_OFFSET as u64,
                format!(
                    "header checksum mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x})"
                ),
            ));
        }
        let version = u32_field(VERSION_OFFSET);
        if version != FORMAT_VERSION && version != SEGMENT_FORMAT_PUT_PER_READING {
            return Err(corrupt(
                VERSION_OFFSET as u64,
                format!(
                    "segment format version {version}, this build reads \
                     {SEGMENT_FORMAT_PUT_PER_READING} and {FORMAT_VERSION}"
                ),
            ));
        }
        let seq = SegmentSeq(u64_field(SEQ_OFFSET));
        let bytes = u64_field(SIZE_OFFSET);
        if seq != expected_seq {
            return Err(corrupt(
                SEQ_OFFSET as u64,
                format!("header says segment {seq}, file name says {expected_seq}"),
            ));
        }
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&bytes) || bytes % 4096 != 0 {
            return Err(corrupt(
                SIZE_OFFSET as u64,
                format!(
                    "header says {bytes} bytes; a segment is {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX} bytes, a multiple of 4096"
                ),
            ));
        }
        if bytes != len {
            return Err(corrupt(
                SIZE_OFFSET as u64,
                format!("header says {bytes} bytes, file has {len}"),
            ));
        }
        Ok(Segment::new(
            seq,
            path.to_path_buf(),
            bytes,
            file,
            Arc::clone(storage),
        ))
    }

    pub fn write_at(&self, bytes: &[u8], offset: u64) -> Result<()> {
        debug_assert!(offset >= SEGMENT_HEADER_BYTES && offset + bytes.len() as u64 <= self.bytes);
        storage::write_all_at(&*self.file, bytes, offset)
            .context(|| format!("writing {} at {offset}", self.path.display()))
    }

    /// Writes `pieces` one after another from `offset` as whole blocks, with one pwritev (the
    /// writers' own buffers, never copied into one): first the bytes of `offset`'s block before
    /// it, as the last write left them (kept in memory), then the pieces, then zeros to the next
    /// block boundary, which the next write overwrites with its records. A write that covers
    /// each block it touches whole never makes the kernel read a block first; a partial one
    /// does when the block is not in the page cache (a recycled or zero-filled segment under a
    /// memory cap: ~100 µs, synchronously, in ~60 % of groups; docs/BENCHMARKS.md).
    ///
    /// The bytes before `offset` are written again unchanged: a torn write leaves each sector
    /// old or new, and both hold the same records there (the assumption PostgreSQL's WAL makes
    /// when it rewrites its last partial page). Returns whether those bytes had to be read from
    /// the file: only the first write into a block this process did not write (after open).
    pub fn write_blocks(&self, pieces: &[Vec<u8>], offset: u64) -> Result<bool> {
        let end = offset + pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        let block_start = offset - offset % LOG_BLOCK_BYTES;
        let padded_end = end.next_multiple_of(LOG_BLOCK_BYTES);
        debug_assert!(block_start >= SEGMENT_HEADER_BYTES && padded_end <= self.bytes);
        let head_len = (offset - block_start) as usize;
        let mut tail = self.tail_block.lock();
        let read_head = head_len > 0 && (tail.start != block_start || tail.bytes.len() != head_len);
        if read_head {
            tail.bytes = self.read_at(block_start, head_len)?;
            tail.start = block_start;
        }
        let head = &tail.bytes[..head_len];
        let mut bufs: Vec<&[u8]> = Vec::with_capacity(pieces.len() + 2);
        bufs.push(head);
        bufs.extend(pieces.iter().map(Vec::as_slice));
        bufs.push(&ZERO_BLOCK[..(padded_end - end) as usize]);
        storage::write_all_vectored_at(&*self.file, &bufs, block_start)
            .context(|| format!("writing {} at {block_start}", self.path.display()))?;
        let next_start = end - end % LOG_BLOCK_BYTES;
        let next_bytes = last_bytes(&bufs[..bufs.len() - 1], (end - next_start) as usize);
        *tail = TailBlock {
            start: next_start,
            bytes: next_bytes,
        };
        Ok(read_head)
    }

    /// Reads `len` bytes at `offset` into `buf`, which keeps its allocation between calls (a
    /// pass reads its segment through one buffer, never zero-filling it again).
    pub fn read_into(&self, buf: &mut Vec<u8>, offset: u64, len: usize) -> Result<()> {
        if buf.len() < len {
            buf.resize(len, 0);
        }
        storage::read_exact_at(&*self.file, &mut buf[..len], offset).context(|| {
            format!(
                "reading {} bytes of {} at {offset}",
                len,
                self.path.display()
            )
        })
    }

    /// Lets the page cache drop this range (read once by maintenance, not needed again):
    /// a memory-capped process keeps its cache for what is read again.
    pub fn drop_cache(&self, offset: u64, len: u64) {
        // A hint: a failure changes nothing but memory.
        let _ = self.file.drop_cache(offset, len);
    }

    pub fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .context(|| format!("fdatasync {}", self.path.display()))
    }

    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        storage::read_exact_at(&*self.file, &mut buf, offset).context(|| {
            format!(
                "reading {} bytes of {} at {offset}",
                len,
                self.path.display()
            )
        })?;
        Ok(buf)
    }

    /// The whole file, for a sequential recovery or check scan.
    pub fn read_all(&self) -> Result<Vec<u8>> {
        self.read_at(0, self.bytes as usize)
    }

    /// Reads and verifies one record (a point read from the upper tier).
    pub fn read_record(&self, offset: u64, len: u32) -> Result<Vec<u8>> {
        self.read_at(offset, len as usize)
    }
}

/// The last `n` bytes of `parts` taken one after another.
fn last_bytes(parts: &[&[u8]], n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let mut left = n;
    for part in parts.iter().rev() {
        if left == 0 {
            break;
        }
        let take = left.min(part.len());
        out[left - take..left].copy_from_slice(&part[part.len() - take..]);
        left -= take;
    }
    debug_assert_eq!(left, 0, "the parts hold fewer than {n} bytes");
    out
}

pub fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage
        .sync_dir(dir)
        .context(|| format!("syncing directory {}", dir.display()))
}

mod scan;

pub use scan::{ScanEnd, scan};

/// A segment's file, for reading and writing or (`read_only`) for reading only.
fn open_file(storage: &dyn Storage, path: &Path, read_only: bool) -> Result<Arc<dyn StorageFile>> {
    let file = if read_only {
        storage.open_read_only(path)
    } else {
        storage.open(path)
    };
    file.context(|| format!("opening segment {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = segment_path(Path::new("/x"), SegmentSeq(42));
        let name = p.file_name().and_then(|n| n.to_str()).expect("utf8");
        assert_eq!(parse_segment_name(name), Some(SegmentSeq(42)));
        assert_eq!(parse_segment_name("42.seg"), None);
        assert!(is_incomplete_segment_name("00000000000000000042.seg.tmp"));
    }

    #[test]
    fn create_open_recycle() -> Result<()> {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = crate::commit_log::storage::PlainFiles::shared();
        let (seg, written) = Segment::create(&storage, dir.path(), SegmentSeq(1), 1 << 20, true)?;
        assert_eq!(written, 1 << 20);
        let (sparse, reserved_only) =
            Segment::create(&storage, dir.path(), SegmentSeq(2), 1 << 20, false)?;
        assert_eq!(
            (reserved_only, sparse.bytes),
            (SEGMENT_HEADER_BYTES, 1 << 20)
        );
        assert_eq!(
            std::fs::metadata(&sparse.path).map(|m| m.len()).ok(),
            Some(1 << 20)
        );
        let (file, retired) = seg.retire()?;
        let recycled =
            Segment::recycle(&storage, file, &retired, 1 << 20, dir.path(), SegmentSeq(7))?;
        assert!(!segment_path(dir.path(), SegmentSeq(1)).exists());
        let reopened = Segment::open(
            &storage,
            &segment_path(dir.path(), SegmentSeq(7)),
            SegmentSeq(7),
        )?;
        assert_eq!((reopened.seq, reopened.bytes), (SegmentSeq(7), 1 << 20));
        drop(recycled);
        assert!(matches!(
            Segment::open(
                &storage,
                &segment_path(dir.path(), SegmentSeq(7)),
                SegmentSeq(8)
            ),
            Err(Error::Corrupt { offset: 16, .. })
        ));
        Ok(())
    }
}
