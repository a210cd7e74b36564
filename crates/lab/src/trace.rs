//! A block tracer that names every request, in the spirit of paper 004's MOST tool.
//!
//! `Tracer::start` creates a private tracefs instance (so it never disturbs other tracing users),
//! enables block_rq_issue and block_rq_complete filtered to the fixture's device(s), and streams the
//! instance's trace_pipe in a thread (so long commands do not overflow the ring buffer). Meanwhile a
//! watcher thread records the physical extents (FIEMAP) of every file under the mount point, on
//! inotify events and on a short poll, so files deleted during the operation still get a name.
//! `Tracer::stop` then classifies each request by its LBA:
//! - flush (REQ_OP_FLUSH, 0 bytes) -> `Flush`; reads -> `Read`;
//! - writes to an external journal/log device, or into the ext4 journal inode's extents
//!   (`debugfs -R 'stat <8>'`) or the XFS internal log (`xfs_db ... logstart logblocks`) -> `FsJournal`;
//! - writes into a file's extents -> `Data` with the file's path (relative to the mount point);
//! - every other write -> `Metadata` (inode tables, bitmaps, btrees, superblocks, btrfs trees).
//!
//! The classifier itself (`classify`) is a pure function of parsed events and a `Layout`, so it
//! is unit-tested on recorded traces in tests/fixtures.
use crate::LabError;
use crate::fixture::{Fixture, FsSpec, Undo, new_owner_id, register_undo, run_command, undo_owner};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TRACEFS_ROOT: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer of the private instance. The reader thread drains it continuously; the
/// size only has to absorb bursts between two reads.
const TRACE_BUFFER_KIB_PER_CPU: u32 = 16 * 1024;
const SECTOR_BYTES: u64 = 512;
/// How often the watcher re-scans every file's extents even without inotify events.
const EXTENT_POLL_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Data,
    FsJournal,
    Metadata,
    Flush,
    Read,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::FsJournal => "fs_journal",
            Kind::Metadata => "metadata",
            Kind::Flush => "flush",
            Kind::Read => "read",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Request {
    /// Issue time, microseconds since the tracer started.
    pub time_us: u64,
    /// Start sector (512 bytes) on `device`.
    pub lba: u64,
    pub bytes: u64,
    /// "W" write, "R" read, "F" flush, "D" discard (counted with metadata).
    pub op: String,
    pub kind: Kind,
    /// Path relative to the mount point, for data writes; " (deleted)" appended if the file was
    /// gone when the trace stopped.
    pub file: Option<String>,
    /// The kernel's rwbs flags, e.g. "WS", "WSM", "FF", "WFS" (FUA).
    pub rwbs: String,
    /// Which device ("loop3"); differs from the data device for an external journal/log.
    pub device: String,
    /// Issuing task as the kernel recorded it (e.g. "jbd2/loop3-8", "kworker/1:1H", "dd").
    pub comm: String,
    /// Issue -> completion, when the completion was seen.
    pub latency_us: Option<u64>,
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteCount {
    pub writes: u64,
    pub bytes: u64,
}

impl WriteCount {
    fn add(&mut self, bytes: u64) {
        self.writes += 1;
        self.bytes += bytes;
    }
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug)]
pub struct KindCounts {
    pub data: WriteCount,
    pub fs_journal: WriteCount,
    pub metadata: WriteCount,
}

impl KindCounts {
    pub fn total(&self) -> WriteCount {
        WriteCount {
            writes: self.data.writes + self.fs_journal.writes + self.metadata.writes,
            bytes: self.data.bytes + self.fs_journal.bytes + self.metadata.bytes,
        }
    }
}

#[derive(Serialize, Deserialize, Default, Clone, Debug)]
pub struct Summary {
    pub by_kind: KindCounts,
    pub flushes: u64,
    /// Data writes per file, path relative to the mount point.
    pub by_file: BTreeMap<String, WriteCount>,
    pub reads: WriteCount,
    /// Wall time between start and stop.
    pub duration_us: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Trace {
    pub requests: Vec<Request>,
    pub summary: Summary,
}

// ---- parsing tracefs lines ----------------------------------------------------------------------

/// One block_rq_issue / block_rq_complete line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEvent {
    pub time_ns: u64,
    pub issue: bool,
    pub major: u32,
    pub minor: u32,
    pub rwbs: String,
    pub bytes: u64,
    pub sector: u64,
    pub nr_sector: u64,
    pub comm: String,
}

/// Parses a trace line such as
/// `jbd2/loop0-8-18262 [000] ..... 2701.486414: block_rq_issue: 7,0 WSM 4096 () 262408 + 8 be,0,3 [jbd2/loop0-8]`.
/// Returns None for comment lines and other events.
pub fn parse_trace_line(line: &str) -> Option<RawEvent> {
    let (issue, marker) = if let Some(i) = line.find(": block_rq_issue: ") {
        (true, i)
    } else {
        (false, line.find(": block_rq_complete: ")?)
    };
    let time_field = line[..marker].rsplit(' ').next()?;
    let time_ns = parse_seconds_ns(time_field)?;
    let body = &line[marker..];
    let body = body
        .split_once(": ")
        .and_then(|(_, b)| b.split_once(": "))
        .map(|(_, b)| b)?;
    let mut words = body.split_whitespace();
    let (major, minor) = words.next()?.split_once(',')?;
    let rwbs = words.next()?.to_string();
    let bytes = if issue {
        words.next()?.parse().ok()?
    } else {
        0
    };
    // The "(cmd)" field; empty for file-system requests, but skip whatever is between the parens.
    let after_paren = body.split_once(") ")?.1;
    let mut rest = after_paren.split_whitespace();
    let sector: u64 = rest.next()?.parse().ok()?;
    if rest.next()? != "+" {
        return None;
    }
    let nr_sector: u64 = rest.next()?.parse().ok()?;
    let comm = body
        .rsplit_once('[')
        .map(|(_, c)| c.trim_end().trim_end_matches(']').to_string())
        .unwrap_or_default();
    Some(RawEvent {
        time_ns,
        issue,
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        bytes: if issue {
            bytes
        } else {
            nr_sector * SECTOR_BYTES
        },
        rwbs,
        sector,
        nr_sector,
        comm,
    })
}

fn parse_seconds_ns(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    let mut frac_ns: u64 = frac.parse().ok()?;
    for _ in frac.len()..9 {
        frac_ns *= 10;
    }
    Some(secs * 1_000_000_000 + frac_ns)
}

/// What an rwbs string says: the operation letter, and whether a preflush / FUA was attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RwbsOp {
    pub op: char,
    pub preflush: bool,
    pub fua: bool,
}

/// rwbs layout (kernel blk_fill_rwbs): optional 'F' for PREFLUSH, then the op letter
/// (W, R, D discard, E secure erase, Z zone ops, N none, or F for a pure flush), then 'F' for FUA,
/// 'A' readahead, 'S' sync, 'M' meta, 'P' prio.
pub fn parse_rwbs(rwbs: &str) -> RwbsOp {
    let chars: Vec<char> = rwbs.chars().collect();
    let (preflush, rest) = match chars.as_slice() {
        ['F', next, ..] if "WRDEZNF".contains(*next) => (true, &chars[1..]),
        _ => (false, &chars[..]),
    };
    let op = rest.first().copied().unwrap_or('N');
    let fua = rest.get(1) == Some(&'F');
    RwbsOp { op, preflush, fua }
}

// ---- layout: where the journal and each file live --------------------------------------------

/// A half-open sector range [start, end) on the data device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SectorRange {
    pub start: u64,
    pub end: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FileExtent {
    pub path: String,
    pub range: SectorRange,
    /// The file no longer existed when the trace stopped.
    pub deleted: bool,
}

/// Everything the classifier needs to know about the file system on the traced device(s).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Layout {
    /// (major, minor) of the data device.
    pub data_device: (u32, u32),
    /// (major, minor) of an external journal/log device, if any: every write there is journal.
    pub journal_device: Option<(u32, u32)>,
    pub journal_extents: Vec<SectorRange>,
    pub files: Vec<FileExtent>,
}

impl Layout {
    fn region_of(&self, start: u64, end: u64) -> Option<Kind> {
        let overlaps = |r: &SectorRange| r.start < end.max(start + 1) && start < r.end;
        if self.journal_extents.iter().any(overlaps) {
            Some(Kind::FsJournal)
        } else {
            None
        }
    }

    fn file_of(&self, start: u64, end: u64) -> Option<&FileExtent> {
        // Prefer the extent containing the first sector; else any overlapping one.
        self.files
            .iter()
            .find(|f| f.range.start <= start && start < f.range.end)
            .or_else(|| {
                self.files
                    .iter()
                    .find(|f| f.range.start < end && start < f.range.end)
            })
    }
}

/// Turns raw events into classified requests and a summary. `start_ns` is the trace start on the
/// same clock as the events (earlier events are dropped: they leaked in from before the start).
pub fn classify(
    events: &[RawEvent],
    layout: &Layout,
    start_ns: u64,
    device_names: &HashMap<(u32, u32), String>,
) -> Trace {
    let mut sorted: Vec<&RawEvent> = events.iter().filter(|e| e.time_ns >= start_ns).collect();
    sorted.sort_by_key(|e| e.time_ns);
    // Completions are matched to issues FIFO per (device, op, sector).
    let mut pending: HashMap<((u32, u32), char, u64), VecDeque<usize>> = HashMap::new();
    let mut requests: Vec<Request> = Vec::new();
    let mut summary = Summary::default();
    for event in sorted {
        let dev = (event.major, event.minor);
        let rwbs = parse_rwbs(&event.rwbs);
        let match_sector = if rwbs.op == 'F' {
            u64::MAX
        } else {
            event.sector
        };
        if !event.issue {
            // A flush machinery completion of a write with 0 sectors carries no new information.
            if let Some(queue) = pending.get_mut(&(dev, rwbs.op, match_sector))
                && let Some(index) = queue.pop_front()
                && let Some(req) = requests.get_mut(index)
            {
                let issue_ns = req.time_us * 1000 + start_ns;
                req.latency_us = Some(event.time_ns.saturating_sub(issue_ns) / 1000);
            }
            continue;
        }
        let end = event.sector + event.nr_sector.max(1);
        let (op, kind, file) = match rwbs.op {
            'F' => ("F", Kind::Flush, None),
            'R' => ("R", Kind::Read, None),
            'W' | 'D' | 'E' | 'Z' => {
                let op = if rwbs.op == 'W' { "W" } else { "D" };
                if Some(dev) == layout.journal_device {
                    (op, Kind::FsJournal, None)
                } else if dev != layout.data_device {
                    (op, Kind::Metadata, None)
                } else if let Some(kind) = layout.region_of(event.sector, end) {
                    (op, kind, None)
                } else if let Some(f) = layout.file_of(event.sector, end).filter(|_| rwbs.op == 'W')
                {
                    let name = if f.deleted {
                        format!("{} (deleted)", f.path)
                    } else {
                        f.path.clone()
                    };
                    (op, Kind::Data, Some(name))
                } else {
                    (op, Kind::Metadata, None)
                }
            }
            _ => continue,
        };
        // A zero-byte write that only carries a preflush is the flush itself.
        let (op, kind) = if rwbs.op == 'W' && event.bytes == 0 && rwbs.preflush {
            ("F", Kind::Flush)
        } else {
            (op, kind)
        };
        match kind {
            Kind::Data => summary.by_kind.data.add(event.bytes),
            Kind::FsJournal => summary.by_kind.fs_journal.add(event.bytes),
            Kind::Metadata => summary.by_kind.metadata.add(event.bytes),
            Kind::Flush => summary.flushes += 1,
            Kind::Read => summary.reads.add(event.bytes),
        }
        // A write with a preflush flag also costs a flush (kernels that split it issue a separate
        // FF request, which is counted on its own; here the device kept it attached).
        if rwbs.preflush && kind != Kind::Flush {
            summary.flushes += 1;
        }
        if let Some(f) = &file {
            summary
                .by_file
                .entry(f.clone())
                .or_default()
                .add(event.bytes);
        }
        pending
            .entry((dev, rwbs.op, match_sector))
            .or_default()
            .push_back(requests.len());
        requests.push(Request {
            time_us: (event.time_ns - start_ns) / 1000,
            lba: event.sector,
            bytes: event.bytes,
            op: op.to_string(),
            kind,
            file,
            rwbs: event.rwbs.clone(),
            device: device_names
                .get(&dev)
                .cloned()
                .unwrap_or_else(|| format!("{},{}", dev.0, dev.1)),
            comm: event.comm.clone(),
            latency_us: None,
        });
    }
    Trace { requests, summary }
}

// ---- collecting the layout --------------------------------------------------------------------

/// Parses debugfs `stat <8>` output: "EXTENTS:\n(0-4095):32801-36896, (4096-8191):40000-44095".
pub fn parse_debugfs_extents(text: &str, block_bytes: u64) -> Vec<SectorRange> {
    let Some((_, extents)) = text.split_once("EXTENTS:") else {
        return Vec::new();
    };
    let per_block = block_bytes / SECTOR_BYTES;
    extents
        .split([',', '\n'])
        .filter_map(|item| {
            let (_, physical) = item.trim().split_once("):")?;
            let (first, last) = match physical.split_once('-') {
                Some((a, b)) => (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?),
                None => {
                    let b = physical.trim().parse::<u64>().ok()?;
                    (b, b)
                }
            };
            Some(SectorRange {
                start: first * per_block,
                end: (last + 1) * per_block,
            })
        })
        .collect()
}

/// Parses `xfs_db -c 'sb 0' -c 'print logstart logblocks blocksize agblocks agblklog'` output.
pub fn parse_xfs_log(text: &str) -> Option<SectorRange> {
    let value = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
        })
    };
    let (logstart, logblocks) = (value("logstart")?, value("logblocks")?);
    let (block_bytes, agblocks, agblklog) =
        (value("blocksize")?, value("agblocks")?, value("agblklog")?);
    if logstart == 0 {
        return None; // external log
    }
    // XFS fsblock numbers are (ag number << agblklog) | block within the AG.
    let agno = logstart >> agblklog;
    let agbno = logstart & ((1 << agblklog) - 1);
    let per_block = block_bytes / SECTOR_BYTES;
    let start = (agno * agblocks + agbno) * per_block;
    Some(SectorRange {
        start,
        end: start + logblocks * per_block,
    })
}

/// btrfs chunk map: (logical start, length, physical start) of single-stripe DATA chunks, from
/// `btrfs inspect-internal dump-tree -t chunk DEV`. FIEMAP on btrfs reports logical addresses.
pub fn parse_btrfs_chunks(text: &str) -> Vec<(u64, u64, u64)> {
    let mut chunks = Vec::new();
    let mut logical: Option<u64> = None;
    let mut length: Option<u64> = None;
    let mut is_data = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.split_once("CHUNK_ITEM ").map(|(_, r)| r) {
            logical = rest.split(')').next().and_then(|v| v.trim().parse().ok());
            length = None;
            is_data = false;
        } else if line.starts_with("length ") {
            let words: Vec<&str> = line.split_whitespace().collect();
            length = words.get(1).and_then(|v| v.parse().ok());
            is_data = words
                .iter()
                .position(|w| *w == "type")
                .and_then(|i| words.get(i + 1))
                .is_some_and(|t| t.starts_with("DATA"));
        } else if line.starts_with("stripe 0 ")
            && is_data
            && let (Some(l), Some(len)) = (logical, length)
            && let Some(phys) = line
                .split_whitespace()
                .skip_while(|w| *w != "offset")
                .nth(1)
                .and_then(|v| v.parse().ok())
        {
            chunks.push((l, len, phys));
        }
    }
    chunks
}

const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// Extents whose physical address is not meaningful: unknown, delayed allocation, inline data.
const FIEMAP_EXTENT_NO_PHYSICAL: u32 = 0x2 | 0x4 | 0x200;
const FIEMAP_BATCH: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

#[repr(C)]
struct Fiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [FiemapExtent; FIEMAP_BATCH],
}

/// Physical (byte offset, byte length) extents of an open file, without syncing it first
/// (FIEMAP_FLAG_SYNC would add writes to the measurement).
pub fn fiemap(file: &fs::File) -> std::io::Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let mut next_logical = 0u64;
    loop {
        let mut request = Box::new(Fiemap {
            start: next_logical,
            length: u64::MAX - next_logical,
            flags: 0,
            mapped_extents: 0,
            extent_count: FIEMAP_BATCH as u32,
            reserved: 0,
            extents: [FiemapExtent::default(); FIEMAP_BATCH],
        });
        // SAFETY: `request` is a properly sized, writable struct fiemap with room for
        // `extent_count` extents; the fd is open for the duration of the call.
        let rc = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                FS_IOC_FIEMAP as _,
                &mut *request as *mut Fiemap,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mapped = (request.mapped_extents as usize).min(FIEMAP_BATCH);
        if mapped == 0 {
            return Ok(out);
        }
        for e in &request.extents[..mapped] {
            if e.flags & FIEMAP_EXTENT_NO_PHYSICAL == 0 && e.length > 0 {
                out.push((e.physical, e.length));
            }
            next_logical = e.logical + e.length;
        }
        if request.extents[mapped - 1].flags & FIEMAP_EXTENT_LAST != 0 {
            return Ok(out);
        }
    }
}

/// Maps a FIEMAP physical byte address to a device sector (identity except on btrfs).
fn to_device_bytes(address: u64, chunks: &[(u64, u64, u64)]) -> u64 {
    chunks
        .iter()
        .find(|(logical, len, _)| *logical <= address && address < logical + len)
        .map_or(address, |(logical, _, physical)| {
            physical + (address - logical)
        })
}

/// Extents of every regular file under `root` (skipping the file-system's own lost+found).
fn scan_files(
    root: &Path,
    chunks: &[(u64, u64, u64)],
    into: &mut BTreeMap<String, Vec<SectorRange>>,
) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if file_type.is_dir() {
                stack.push(path);
            } else if file_type.is_file() {
                record_file(root, &path, chunks, into);
            }
        }
    }
}

fn record_file(
    root: &Path,
    path: &Path,
    chunks: &[(u64, u64, u64)],
    into: &mut BTreeMap<String, Vec<SectorRange>>,
) {
    // O_NONBLOCK: never hang on a FIFO; O_NOFOLLOW: symlinks are not the file's blocks.
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    else {
        return;
    };
    let Ok(extents) = fiemap(&file) else { return };
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned();
    let known = into.entry(name).or_default();
    for (physical, length) in extents {
        let start = to_device_bytes(physical, chunks) / SECTOR_BYTES;
        let range = SectorRange {
            start,
            end: start + length.div_ceil(SECTOR_BYTES),
        };
        if !known.contains(&range) {
            known.push(range);
        }
    }
}

/// inotify + poll loop that keeps `extents` up to date while the traced command runs.
fn watch_files(
    root: PathBuf,
    chunks: Vec<(u64, u64, u64)>,
    stop: Arc<AtomicBool>,
    mut extents: BTreeMap<String, Vec<SectorRange>>,
) -> BTreeMap<String, Vec<SectorRange>> {
    // SAFETY: inotify_init1 has no preconditions; the result is checked before use.
    let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    let inotify = (raw >= 0).then(|| {
        // SAFETY: raw is a fresh fd owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(raw) }
    });
    let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
    let mut watched: HashMap<i32, PathBuf> = HashMap::new();
    let add_watch = |fd: &OwnedFd, dir: &Path, watched: &mut HashMap<i32, PathBuf>| {
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd >= 0 {
            watched.insert(wd, dir.to_path_buf());
        }
    };
    if let Some(fd) = &inotify {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            add_watch(fd, &dir, &mut watched);
            if let Ok(entries) = fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
    let mut last_scan = Instant::now();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let mut dirty: HashSet<PathBuf> = HashSet::new();
        let mut new_dirs: Vec<PathBuf> = Vec::new();
        if let Some(fd) = &inotify {
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, 10) };
            loop {
                // SAFETY: buffer is writable for its length.
                let n =
                    unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
                if n <= 0 {
                    break;
                }
                let mut offset = 0usize;
                let header = std::mem::size_of::<libc::inotify_event>();
                while offset + header <= n as usize {
                    // SAFETY: the kernel wrote a complete inotify_event header at `offset`.
                    let event: libc::inotify_event =
                        unsafe { std::ptr::read_unaligned(buffer.as_ptr().add(offset).cast()) };
                    let name_bytes = &buffer
                        [offset + header..(offset + header + event.len as usize).min(n as usize)];
                    let name_len = name_bytes
                        .iter()
                        .position(|b| *b == 0)
                        .unwrap_or(name_bytes.len());
                    if let Some(dir) = watched.get(&event.wd) {
                        let name =
                            std::ffi::OsStr::from_encoded_bytes_checked(&name_bytes[..name_len]);
                        let path = dir.join(name);
                        if event.mask & libc::IN_ISDIR != 0 {
                            new_dirs.push(path);
                        } else {
                            dirty.insert(path);
                        }
                    }
                    offset += header + event.len as usize;
                }
            }
            for path in new_dirs.drain(..) {
                add_watch(fd, &path, &mut watched);
            }
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        // No stat() here: since Linux 6.13 a getattr makes the next timestamp update fine-grained,
        // which would turn every write into a metadata change (an observer effect on fsync costs).
        for path in &dirty {
            record_file(&root, path, &chunks, &mut extents);
        }
        if last_scan.elapsed() >= EXTENT_POLL_INTERVAL || stopping {
            scan_files(&root, &chunks, &mut extents);
            last_scan = Instant::now();
        }
        if stopping {
            return extents;
        }
    }
}

/// `OsStr::from_encoded_bytes_unchecked` needs unsafe; paths from inotify are valid OS strings,
/// but go through a checked conversion anyway.
trait FromEncodedChecked {
    fn from_encoded_bytes_checked(bytes: &[u8]) -> &std::ffi::OsStr;
}
impl FromEncodedChecked for std::ffi::OsStr {
    fn from_encoded_bytes_checked(bytes: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(bytes)
    }
}

fn device_numbers(device: &Path) -> Result<(u32, u32), LabError> {
    let meta = fs::metadata(device).map_err(|e| LabError::io(device, e))?;
    let rdev = meta.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

fn journal_extents(fixture: &Fixture) -> Vec<SectorRange> {
    let dev = fixture.device().to_string_lossy().into_owned();
    match fixture.spec() {
        FsSpec::Ext4 | FsSpec::Ext4Writeback | FsSpec::Ext4Journal | FsSpec::Ext4FastCommit => {
            let block_bytes = run_command(&["dumpe2fs", "-h", &dev])
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        l.strip_prefix("Block size:")
                            .and_then(|v| v.trim().parse().ok())
                    })
                })
                .unwrap_or(4096);
            run_command(&["debugfs", "-R", "stat <8>", &dev])
                .map(|t| parse_debugfs_extents(&t, block_bytes))
                .unwrap_or_default()
        }
        FsSpec::Xfs => run_command(&[
            "xfs_db",
            "-r",
            "-c",
            "sb 0",
            "-c",
            "print logstart logblocks blocksize agblocks agblklog",
            &dev,
        ])
        .ok()
        .and_then(|t| parse_xfs_log(&t))
        .into_iter()
        .collect(),
        _ => Vec::new(),
    }
}

fn btrfs_chunks(fixture: &Fixture) -> Vec<(u64, u64, u64)> {
    if fixture.spec() != FsSpec::Btrfs {
        return Vec::new();
    }
    let dev = fixture.device().to_string_lossy().into_owned();
    run_command(&[
        "btrfs",
        "inspect-internal",
        "dump-tree",
        "-t",
        "chunk",
        &dev,
    ])
    .map(|t| parse_btrfs_chunks(&t))
    .unwrap_or_default()
}

fn ensure_tracefs() -> Result<PathBuf, LabError> {
    let root = PathBuf::from(TRACEFS_ROOT);
    if root.join("instances").is_dir() {
        return Ok(root);
    }
    let _ = run_command(&["mount", "-t", "tracefs", "nodev", TRACEFS_ROOT]);
    if root.join("instances").is_dir() {
        return Ok(root);
    }
    let debug_root = PathBuf::from("/sys/kernel/debug/tracing");
    if debug_root.join("instances").is_dir() {
        return Ok(debug_root);
    }
    Err(LabError::TracefsUnavailable(format!(
        "{TRACEFS_ROOT} is not mounted and `mount -t tracefs nodev {TRACEFS_ROOT}` failed"
    )))
}

/// True when tracefs with block events is usable (for tests that must skip otherwise).
pub fn tracefs_available() -> bool {
    ensure_tracefs().is_ok_and(|root| root.join("events/block/block_rq_issue").is_dir())
}

fn write_tracefs(path: &Path, value: &str) -> Result<(), LabError> {
    fs::write(path, value).map_err(|e| LabError::io(path, e))
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Everything `classify` needs, as recorded: replaying it gives the same `Trace` (test fixtures).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Capture {
    pub lines: Vec<String>,
    pub layout: Layout,
    pub start_ns: u64,
    /// "major,minor" -> device name.
    pub device_names: BTreeMap<String, String>,
}

impl Capture {
    pub fn classify(&self) -> Trace {
        let events: Vec<RawEvent> = self
            .lines
            .iter()
            .filter_map(|l| parse_trace_line(l))
            .collect();
        let names = self
            .device_names
            .iter()
            .filter_map(|(k, v)| {
                let (major, minor) = k.split_once(',')?;
                Some(((major.parse().ok()?, minor.parse().ok()?), v.clone()))
            })
            .collect();
        classify(&events, &self.layout, self.start_ns, &names)
    }
}

/// A private tracefs instance filtered to one fixture's device(s), streaming into memory.
pub struct Tracer {
    instance: PathBuf,
    owner: u64,
    start_ns: u64,
    started: Instant,
    stop_flag: Arc<AtomicBool>,
    reader: Option<JoinHandle<Result<Vec<String>, LabError>>>,
    watcher: Option<JoinHandle<BTreeMap<String, Vec<SectorRange>>>>,
    layout: Layout,
    chunks: Vec<(u64, u64, u64)>,
    device_names: HashMap<(u32, u32), String>,
}

impl Tracer {
    pub fn start(fixture: &Fixture) -> Result<Tracer, LabError> {
        crate::fixture::require_root()?;
        let root = ensure_tracefs()?;
        crate::fixture::install_interrupt_cleanup();
        let data_device = device_numbers(fixture.device())?;
        let journal_device = fixture.journal_device().map(device_numbers).transpose()?;
        let mut device_names = HashMap::new();
        device_names.insert(data_device, fixture.device_name().to_string());
        if let (Some(numbers), Some(name)) = (journal_device, fixture.journal_device_name()) {
            device_names.insert(numbers, name);
        }
        let chunks = btrfs_chunks(fixture);
        let layout = Layout {
            data_device,
            journal_device,
            journal_extents: journal_extents(fixture),
            files: Vec::new(),
        };
        let mut extents = BTreeMap::new();
        scan_files(fixture.mount_dir(), &chunks, &mut extents);

        let owner = new_owner_id();
        let instance = root
            .join("instances")
            .join(format!("roamkv-lab-{}-{owner}", std::process::id()));
        fs::create_dir(&instance)
            .map_err(|e| LabError::TracefsUnavailable(format!("{}: {e}", instance.display())))?;
        register_undo(owner, Undo::RemoveDir(instance.clone()));
        let mut tracer = Tracer {
            instance: instance.clone(),
            owner,
            start_ns: 0,
            started: Instant::now(),
            stop_flag: Arc::new(AtomicBool::new(false)),
            reader: None,
            watcher: None,
            layout,
            chunks: chunks.clone(),
            device_names,
        };
        let dev_t = |(major, minor): (u32, u32)| (u64::from(major) << 20) | u64::from(minor);
        let mut filter = format!("dev == {}", dev_t(data_device));
        if let Some(j) = journal_device {
            filter = format!("{filter} || dev == {}", dev_t(j));
        }
        write_tracefs(&instance.join("tracing_on"), "0")?;
        write_tracefs(&instance.join("trace_clock"), "mono")?;
        write_tracefs(
            &instance.join("buffer_size_kb"),
            &TRACE_BUFFER_KIB_PER_CPU.to_string(),
        )?;
        for event in ["block_rq_issue", "block_rq_complete"] {
            let dir = instance.join("events/block").join(event);
            write_tracefs(&dir.join("filter"), &filter)?;
            write_tracefs(&dir.join("enable"), "1")?;
        }
        let pipe_path = instance.join("trace_pipe");
        let pipe = fs::OpenOptions::new()
            .read(true)
            .custom_flags_nonblock()
            .open(&pipe_path)
            .map_err(|e| LabError::io(&pipe_path, e))?;
        let stop = tracer.stop_flag.clone();
        tracer.reader = Some(std::thread::spawn(move || read_pipe(pipe, pipe_path, stop)));
        let stop = tracer.stop_flag.clone();
        let root_dir = fixture.mount_dir().to_path_buf();
        tracer.watcher = Some(std::thread::spawn(move || {
            watch_files(root_dir, chunks, stop, extents)
        }));
        tracer.start_ns = monotonic_ns();
        tracer.started = Instant::now();
        write_tracefs(&instance.join("tracing_on"), "1")?;
        Ok(tracer)
    }

    /// Stops tracing and classifies every request seen since `start`.
    pub fn stop(self, fixture: &Fixture) -> Result<Trace, LabError> {
        self.stop_with_capture(fixture).map(|(trace, _)| trace)
    }

    /// Like `stop`, also returning the raw tracefs lines and the layout (to record test fixtures).
    pub fn stop_with_capture(mut self, fixture: &Fixture) -> Result<(Trace, Capture), LabError> {
        let duration_us = self.started.elapsed().as_micros() as u64;
        write_tracefs(&self.instance.join("tracing_on"), "0")?;
        self.stop_flag.store(true, Ordering::SeqCst);
        let lines = match self.reader.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| LabError::TracefsUnavailable("trace reader panicked".into()))??,
            None => Vec::new(),
        };
        let mut extents = match self.watcher.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| LabError::TracefsUnavailable("extent watcher panicked".into()))?,
            None => BTreeMap::new(),
        };
        // After sync, delayed allocations have physical blocks; the trace is already off.
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        scan_files(fixture.mount_dir(), &self.chunks, &mut extents);
        let mut layout = self.layout.clone();
        for (path, ranges) in extents {
            let deleted = !fixture.mount_dir().join(&path).exists();
            layout
                .files
                .extend(ranges.into_iter().map(|range| FileExtent {
                    path: path.clone(),
                    range,
                    deleted,
                }));
        }
        let events: Vec<RawEvent> = lines.iter().filter_map(|l| parse_trace_line(l)).collect();
        let mut trace = classify(&events, &layout, self.start_ns, &self.device_names);
        trace.summary.duration_us = duration_us;
        let device_names = self
            .device_names
            .iter()
            .map(|((major, minor), name)| (format!("{major},{minor}"), name.clone()))
            .collect();
        Ok((
            trace,
            Capture {
                lines,
                layout,
                start_ns: self.start_ns,
                device_names,
            },
        ))
    }

    /// The layout gathered at start (journal extents, devices); files are filled in by `stop`.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = fs::write(self.instance.join("tracing_on"), "0");
        self.stop_flag.store(true, Ordering::SeqCst);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
        if let Some(h) = self.watcher.take() {
            let _ = h.join();
        }
        for event in ["block_rq_issue", "block_rq_complete"] {
            let _ = fs::write(
                self.instance
                    .join("events/block")
                    .join(event)
                    .join("enable"),
                "0",
            );
        }
        undo_owner(self.owner);
    }
}

trait NonBlockOpen {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}
impl NonBlockOpen for fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

/// Drains trace_pipe until asked to stop and the pipe is empty.
fn read_pipe(
    mut pipe: fs::File,
    path: PathBuf,
    stop: Arc<AtomicBool>,
) -> Result<Vec<String>, LabError> {
    let mut lines = Vec::new();
    let mut partial = String::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        match pipe.read(&mut buffer) {
            Ok(0) => {
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(n) => {
                partial.push_str(&String::from_utf8_lossy(&buffer[..n]));
                while let Some(i) = partial.find('\n') {
                    lines.push(partial[..i].to_string());
                    partial.drain(..=i);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LabError::io(&path, e)),
        }
    }
    if !partial.is_empty() {
        lines.push(partial);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_issue_and_complete_lines() {
        let issue = parse_trace_line("    jbd2/loop0-8-18262   [000] .....  2701.486414: block_rq_issue: 7,0 WSM 4096 () 262408 + 8 be,0,3 [jbd2/loop0-8]").expect("issue line");
        assert!(issue.issue);
        assert_eq!(
            (
                issue.major,
                issue.minor,
                issue.bytes,
                issue.sector,
                issue.nr_sector
            ),
            (7, 0, 4096, 262408, 8)
        );
        assert_eq!(issue.time_ns, 2_701_486_414_000);
        assert_eq!(issue.comm, "jbd2/loop0-8");
        let complete = parse_trace_line("     ksoftirqd/1-22      [001] ..s..  2701.487023: block_rq_complete: 7,0 FF () 18446744073709551615 + 0 none,0,0 [0]").expect("complete line");
        assert!(!complete.issue);
        assert_eq!(complete.rwbs, "FF");
        assert!(parse_trace_line("# tracer: nop").is_none());
        assert!(parse_trace_line("garbage: block_rq_issue: x").is_none());
    }

    #[test]
    fn rwbs_flags() {
        assert_eq!(
            parse_rwbs("FF"),
            RwbsOp {
                op: 'F',
                preflush: true,
                fua: false
            }
        );
        assert_eq!(
            parse_rwbs("WS"),
            RwbsOp {
                op: 'W',
                preflush: false,
                fua: false
            }
        );
        assert_eq!(
            parse_rwbs("FWFS"),
            RwbsOp {
                op: 'W',
                preflush: true,
                fua: true
            }
        );
        assert_eq!(
            parse_rwbs("WFSM"),
            RwbsOp {
                op: 'W',
                preflush: false,
                fua: true
            }
        );
        assert_eq!(
            parse_rwbs("RAM"),
            RwbsOp {
                op: 'R',
                preflush: false,
                fua: false
            }
        );
    }

    #[test]
    fn debugfs_journal_extents() {
        let text =
            "Inode: 8   Type: regular\nEXTENTS:\n(0-4095):32801-36896, (4096-4100):50000-50004\n";
        let r = parse_debugfs_extents(text, 4096);
        assert_eq!(
            r,
            vec![
                SectorRange {
                    start: 32801 * 8,
                    end: 36897 * 8
                },
                SectorRange {
                    start: 400_000,
                    end: 50005 * 8
                }
            ]
        );
    }

    #[test]
    fn xfs_log_location() {
        let text = "logstart = 65542\nlogblocks = 16384\nblocksize = 4096\nagblocks = 32768\nagblklog = 15\n";
        let r = parse_xfs_log(text).expect("internal log");
        assert_eq!(r.start, (2 * 32768 + 6) * 8);
        assert_eq!(r.end - r.start, 16384 * 8);
        assert!(parse_xfs_log(&text.replace("65542", "0")).is_none());
    }

    #[test]
    fn btrfs_data_chunks_only() {
        let text = "\titem 1 key (FIRST_CHUNK_TREE CHUNK_ITEM 13631488) itemoff 16105 itemsize 80\n\t\tlength 8388608 owner 2 stripe_len 65536 type DATA|single\n\t\t\tstripe 0 devid 1 offset 13631488\n\titem 3 key (FIRST_CHUNK_TREE CHUNK_ITEM 30408704) itemoff 15881 itemsize 112\n\t\tlength 33554432 owner 2 stripe_len 65536 type METADATA|DUP\n\t\t\tstripe 0 devid 1 offset 38797312\n";
        assert_eq!(
            parse_btrfs_chunks(text),
            vec![(13_631_488, 8_388_608, 13_631_488)]
        );
        assert_eq!(
            to_device_bytes(13_631_488 + 4096, &[(13_631_488, 8_388_608, 20_000_000)]),
            20_004_096
        );
    }
}
