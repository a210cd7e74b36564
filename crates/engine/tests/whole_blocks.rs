//! The log writes whole blocks (`Segment::write_blocks`, docs/FORMAT.md "Segment"): a group
//! that ends inside a block is followed by zeros to the block's end, and the next group writes
//! that block again, whole, from the bytes kept in memory. No write reads first, and recovery
//! reads the padding as the end of the data, whatever a crash left in it.

mod common;

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use parking_lot::Mutex;
use roamkv_engine::limits::LOG_BLOCK_BYTES;
use roamkv_engine::log_record as record;
use roamkv_engine::storage::{PlainFiles, Storage, StorageFile};
use roamkv_engine::{Engine, Options};

/// The kernel's files, with every write to a segment recorded as (path, offset, length).
#[derive(Debug, Default)]
struct RecordingFiles {
    writes: Arc<Mutex<Vec<(PathBuf, u64, usize)>>>,
}

#[derive(Debug)]
struct RecordingFile {
    path: PathBuf,
    inner: Arc<dyn StorageFile>,
    writes: Arc<Mutex<Vec<(PathBuf, u64, usize)>>>,
}

impl RecordingFiles {
    fn wrap(&self, path: &Path, inner: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        Arc::new(RecordingFile {
            path: path.to_path_buf(),
            inner,
            writes: Arc::clone(&self.writes),
        })
    }
}

impl Storage for RecordingFiles {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(path, PlainFiles.create(path)?))
    }
    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(path, PlainFiles.open(path)?))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        PlainFiles.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        PlainFiles.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        PlainFiles.sync_dir(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>> {
        PlainFiles.list(dir)
    }
    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        PlainFiles.free_bytes(dir)
    }
}

impl StorageFile for RecordingFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.write_at(buf, offset)?;
        self.writes.lock().push((self.path.clone(), offset, n));
        Ok(n)
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<usize> {
        let n = self.inner.write_vectored_at(bufs, offset)?;
        self.writes.lock().push((self.path.clone(), offset, n));
        Ok(n)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn write_back(&self, wait_before: u64, start: u64, len: u64) -> io::Result<()> {
        self.inner.write_back(wait_before, start, len)
    }
}

fn active_segment(dir: &Path) -> PathBuf {
    segment_files(dir).into_iter().next().expect("a segment")
}

/// Readings of odd sizes, one group each (`Sync`, one writer): most groups end inside a block.
fn write_odd_readings(engine: &Engine, from: i64, to: i64) {
    for ts in from..to {
        let len = 20 + (ts as usize * 37) % 300;
        engine
            .put("car", "speed", ts, &value("car", "speed", ts, len))
            .expect("put");
    }
}

fn count(engine: &Engine) -> usize {
    engine
        .scan("car", None, i64::MIN, i64::MAX)
        .expect("scan")
        .len()
}

/// End of the records: the first byte of the zeros that follow them in a fresh segment.
fn data_end(segment: &Path) -> u64 {
    let data = std::fs::read(segment).expect("read");
    data.iter().rposition(|&b| b != 0).expect("records") as u64 + 1
}

#[test]
fn every_group_is_written_as_whole_blocks_and_nothing_is_read_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let files = Arc::new(RecordingFiles::default());
    let engine = Engine::open(
        dir.path(),
        Options {
            storage: files.clone(),
            ..options(&clock)
        },
    )
    .expect("open");
    let created = files.writes.lock().len();
    write_odd_readings(&engine, 0, 400);
    let stats = engine.stats();
    assert!(stats.group_commits >= 400, "{stats:?}");
    assert_eq!(stats.log_head_reads, 0, "a fresh log never reads to write");
    let writes: Vec<_> = files.writes.lock()[created..].to_vec();
    assert!(writes.len() >= 400);
    for (path, offset, len) in &writes {
        assert!(
            offset.is_multiple_of(LOG_BLOCK_BYTES) && (*len as u64).is_multiple_of(LOG_BLOCK_BYTES),
            "a write of {len} bytes at {offset} to {} is not whole blocks",
            path.display()
        );
    }
    // The engine's count of whole-block bytes is what reached the files, and above the
    // records' bytes by the rewrites and padding of each small group.
    let written: u64 = writes.iter().map(|(_, _, len)| *len as u64).sum();
    assert_eq!(stats.log_block_bytes_written, written, "{stats:?}");
    assert!(
        stats.log_block_bytes_written >= stats.log_bytes_written + 400 * LOG_BLOCK_BYTES / 2,
        "400 one-reading groups each write about a block: {stats:?}"
    );
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine), 400);
    assert!(engine.stats().recovery_cut.is_none());
}

#[test]
fn a_log_reopened_mid_block_reads_that_block_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    write_odd_readings(&engine, 0, 7);
    drop(engine);
    assert_ne!(data_end(&active_segment(dir.path())) % LOG_BLOCK_BYTES, 0);
    let engine = open(dir.path(), &clock);
    write_odd_readings(&engine, 7, 300);
    assert_eq!(engine.stats().log_head_reads, 1);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        count(&engine),
        300,
        "the block read back kept the records before it"
    );
}

#[test]
fn a_tail_torn_inside_the_padding_is_cut_and_every_acknowledged_reading_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    write_odd_readings(&engine, 0, 50);
    drop(engine);
    let segment = active_segment(dir.path());
    let end = data_end(&segment);
    let padding = end.next_multiple_of(LOG_BLOCK_BYTES) - end;
    assert!(
        padding >= 32,
        "pick a count whose last group leaves room: {padding}"
    );
    // A torn next group: a record header with this segment's sequence and a bad checksum,
    // inside the padding.
    let mut torn = Vec::new();
    record::encode_depart(&mut torn, 1, "car");
    torn[0] ^= 0xff;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open");
    file.write_all_at(&torn, end).expect("tear");
    drop(file);

    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine), 50, "the DEPART never happened");
    assert!(
        engine.stats().recovery_cut.is_some(),
        "the torn record is cut"
    );
    write_odd_readings(&engine, 50, 60);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine), 60);
    assert!(engine.stats().recovery_cut.is_none());
}

#[test]
fn bad_bytes_past_the_padding_are_not_read_as_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    write_odd_readings(&engine, 0, 50);
    drop(engine);
    let segment = active_segment(dir.path());
    let past = data_end(&segment).next_multiple_of(LOG_BLOCK_BYTES) + 512;
    // Garbage that does not look like a record, then a well-formed record of this segment
    // from no group: neither was written by the engine after its last acknowledged group.
    let mut stray = Vec::new();
    record::encode_trim(&mut stray, 1, "car", i64::MAX);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open");
    file.write_all_at(&[0x5a; 100], past).expect("garbage");
    file.write_all_at(&stray, past + 1024).expect("stray");
    drop(file);

    let engine = open(dir.path(), &clock);
    assert_eq!(
        count(&engine),
        50,
        "the stray TRIM past the end is not replayed"
    );
    assert!(
        engine.stats().recovery_cut.is_some(),
        "a record past the end is cut (zeroed), never left to be read later"
    );
    write_odd_readings(&engine, 50, 400);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine), 400);
}

#[test]
fn a_recycled_segment_reads_its_old_records_beyond_the_padding_as_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    // Fill several 1 MiB segments, let them leave the log and retire, then write into the
    // recycled ones: their previous lives' records lie past every group's padding.
    let mut ts = 0;
    for _ in 0..4 {
        for _ in 0..3000 {
            engine
                .put("old", "s", ts, &value("old", "s", ts, 900))
                .expect("put");
            ts += 1;
        }
        settle(&engine, &clock);
    }
    assert!(
        engine.stats().segments_recycled >= 1,
        "{:?}",
        engine.stats()
    );
    write_odd_readings(&engine, 0, 120);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine), 120);
    assert!(
        engine.stats().recovery_cut.is_none(),
        "{:?}",
        engine.stats()
    );
    assert_eq!(
        engine
            .scan("old", None, i64::MIN, i64::MAX)
            .expect("scan")
            .len(),
        ts as usize
    );
}
