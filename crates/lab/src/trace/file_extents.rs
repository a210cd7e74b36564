//! The syscall side: the physical extents of every file under the mount point (FIEMAP), kept up
//! to date while the traced command runs (inotify + a short poll), so that files deleted during
//! the operation still get a name.

use super::events::SECTOR_BYTES;
use super::layout::SectorRange;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the watcher re-scans every file's extents even without inotify events.
const EXTENT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Sector ranges of each file, by path relative to the mount point.
pub type FileExtents = BTreeMap<String, Vec<SectorRange>>;

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
pub(super) fn scan_files(
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

/// Directories watched with inotify for files that change or appear.
struct DirWatcher {
    fd: OwnedFd,
    watched: HashMap<i32, PathBuf>,
    buffer: Vec<u8>,
}

impl DirWatcher {
    const MASK: u32 = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;

    /// Watches `root` and every directory below it; None when inotify is unavailable.
    fn new(root: &Path) -> Option<DirWatcher> {
        // SAFETY: inotify_init1 has no preconditions; the result is checked before use.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return None;
        }
        let mut watcher = DirWatcher {
            // SAFETY: raw is a fresh fd owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
            watched: HashMap::new(),
            buffer: vec![0u8; 64 * 1024],
        };
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            watcher.add(&dir);
            if let Ok(entries) = fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        Some(watcher)
    }

    fn add(&mut self, dir: &Path) {
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), Self::MASK) };
        if wd >= 0 {
            self.watched.insert(wd, dir.to_path_buf());
        }
    }

    /// Waits up to 10 ms for events; returns the files that changed (new directories are
    /// watched from now on).
    fn changed_files(&mut self) -> HashSet<PathBuf> {
        let mut dirty: HashSet<PathBuf> = HashSet::new();
        let mut new_dirs: Vec<PathBuf> = Vec::new();
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 10) };
        loop {
            // SAFETY: buffer is writable for its length.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast(),
                    self.buffer.len(),
                )
            };
            if n <= 0 {
                break;
            }
            let buffer = &self.buffer[..n as usize];
            let mut offset = 0usize;
            let header = std::mem::size_of::<libc::inotify_event>();
            while offset + header <= buffer.len() {
                // SAFETY: the kernel wrote a complete inotify_event header at `offset`.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buffer.as_ptr().add(offset).cast()) };
                let name_bytes = &buffer
                    [offset + header..(offset + header + event.len as usize).min(buffer.len())];
                let name_len = name_bytes
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(name_bytes.len());
                if let Some(dir) = self.watched.get(&event.wd) {
                    let name = std::ffi::OsStr::from_encoded_bytes_checked(&name_bytes[..name_len]);
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
        for path in new_dirs {
            self.add(&path);
        }
        dirty
    }
}

/// inotify + poll loop that keeps `extents` up to date while the traced command runs.
pub(super) fn watch_files(
    root: PathBuf,
    chunks: Vec<(u64, u64, u64)>,
    stop: Arc<AtomicBool>,
    mut extents: FileExtents,
) -> FileExtents {
    let mut watcher = DirWatcher::new(&root);
    let mut last_scan = Instant::now();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let dirty = match &mut watcher {
            Some(w) => w.changed_files(),
            None => {
                std::thread::sleep(Duration::from_millis(10));
                HashSet::new()
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn btrfs_logical_addresses_map_to_device_bytes() {
        assert_eq!(
            to_device_bytes(13_631_488 + 4096, &[(13_631_488, 8_388_608, 20_000_000)]),
            20_004_096
        );
        assert_eq!(to_device_bytes(4096, &[]), 4096);
    }
}
