//! The storage seam: every file operation of the commit log goes through `Storage` and
//! `StorageFile` — creating, opening, writing, reading, syncing, renaming, removing and listing
//! segment files, and syncing their directory. `PlainFiles` (the default) is the kernel's file
//! system; tests plug in a fault-injecting implementation (crates/engine/tests/common/
//! fault_storage.rs) that fails the Nth operation with EIO or ENOSPC, writes short, and simulates
//! power cuts that drop what was never made durable.
//!
//! What is *not* behind the seam, and why: the lower tier's files (RocksDB and LevelDB do their
//! own I/O; their durability is theirs to prove, and ours is to retire a segment only after the
//! lower tier has durably taken what the segment held), and the data directory's identity and
//! LOCK files (made
//! once, with their own crash test in `tests/interrupted_creation.rs`; the lock must be a real
//! flock).
//!
//! The interface is narrow on purpose: positional reads and writes that may be short (the caller
//! loops, as with pwrite(2)), so a fault implementation can return exactly what a kernel may.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// The file operations the commit log makes. Paths are real paths inside the log directory;
/// an implementation may keep the files anywhere (in memory, for a test).
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates `path` (truncating a file of that name), for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;
    /// Opens an existing file for reading only (a read-only engine's segments: readable by a
    /// user who may not write them). The default opens it as `open` does.
    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.open(path)
    }
    /// rename(2): atomic, durable only after `sync_dir` of its directory.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// unlink(2): durable only after `sync_dir`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// fsync(2) of a directory: makes its renames, creations and removals durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of the files in `dir` and their lengths in bytes.
    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>>;
    /// Bytes still free for files in `dir` (statvfs(3)'s f_bavail for plain files).
    fn free_bytes(&self, dir: &Path) -> io::Result<u64>;
}

/// One open file.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// pwrite(2): may write fewer bytes than given.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// pwritev(2): the buffers one after another from `offset`; may write fewer bytes than
    /// given. The default writes (part of) the first non-empty buffer.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<usize> {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(first) => self.write_at(first, offset),
            None => Ok(0),
        }
    }
    /// posix_fadvise(POSIX_FADV_DONTNEED): the range will not be read again soon; its clean
    /// pages may leave the page cache. A hint: the default does nothing.
    fn drop_cache(&self, _start: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// pread(2): may read fewer bytes than asked; 0 at the end of the file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// fdatasync(2).
    fn sync_data(&self) -> io::Result<()>;
    /// fsync(2).
    fn sync_all(&self) -> io::Result<()>;
    /// The file's length in bytes.
    fn size_bytes(&self) -> io::Result<u64>;
    /// fallocate(2) mode 0: reserves blocks up to `len` and extends the file to it.
    fn allocate(&self, len: u64) -> io::Result<()>;
    /// Write-back hints (sync_file_range(2)): waits for write-back of `[0, wait_before)` started
    /// earlier, then starts write-back of `[start, start + len)`. Makes nothing durable.
    fn write_back(&self, wait_before: u64, start: u64, len: u64) -> io::Result<()>;
}

/// Writes all of `buf` at `offset`, looping over short writes (as `FileExt::write_all_at`).
pub fn write_all_at(file: &dyn StorageFile, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, offset) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes every buffer, one after another from `offset`, looping over short writes.
pub fn write_all_vectored_at(
    file: &dyn StorageFile,
    bufs: &[&[u8]],
    mut offset: u64,
) -> io::Result<()> {
    let mut pending: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut first = 0;
    while first < pending.len() {
        match file.write_vectored_at(&pending[first..], offset) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote 0 bytes")),
            Ok(mut n) => {
                offset += n as u64;
                while n > 0 {
                    let buf = pending[first];
                    if n >= buf.len() {
                        n -= buf.len();
                        first += 1;
                    } else {
                        pending[first] = &buf[n..];
                        n = 0;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills all of `buf` from `offset`, looping over short reads; the end of the file is an error.
pub fn read_exact_at(
    file: &dyn StorageFile,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file ends before the bytes asked for",
                ));
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The kernel's file system: what the engine uses unless a test says otherwise.
#[derive(Debug, Default, Clone, Copy)]
pub struct PlainFiles;

impl PlainFiles {
    /// The default storage, shared.
    pub fn shared() -> Arc<dyn Storage> {
        Arc::new(PlainFiles)
    }
}

impl Storage for PlainFiles {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Arc::new(PlainFile(file)))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(PlainFile(file)))
    }

    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        Ok(Arc::new(PlainFile(File::open(path)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>> {
        let mut found = Vec::new();
        for dirent in fs::read_dir(dir)? {
            let dirent = dirent?;
            // Names that are not UTF-8 are not ours.
            let Ok(name) = dirent.file_name().into_string() else {
                continue;
            };
            let len = dirent.metadata().map_or(0, |m| m.len());
            found.push((name, len));
        }
        Ok(found)
    }

    fn free_bytes(&self, dir: &Path) -> io::Result<u64> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL"))?;
        // SAFETY: statvfs is a plain C struct of integers: all-zero bytes are a valid value.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: statvfs(3) with a valid C string and a struct we own.
        if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(vfs.f_bavail as u64 * vfs.f_frsize as u64)
    }
}

#[derive(Debug)]
struct PlainFile(File);

/// Buffers one pwritev(2) takes at most (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

impl StorageFile for PlainFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<usize> {
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .take(IOV_MAX)
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        // SAFETY: pwritev(2) on an fd we own; every iovec points into a buffer borrowed for the
        // call and is only read.
        let n = unsafe {
            libc::pwritev(
                fd,
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn drop_cache(&self, start: u64, len: u64) -> io::Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        // SAFETY: posix_fadvise(2) on an fd we own: a hint, touching no memory of ours.
        let rc = unsafe {
            libc::posix_fadvise(
                fd,
                start as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        // SAFETY: fallocate(2) on an fd we own; mode 0 allocates and extends the file.
        if unsafe { libc::fallocate(fd, 0, 0, len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn write_back(&self, wait_before: u64, start: u64, len: u64) -> io::Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.0);
        // SAFETY: sync_file_range(2) on an fd we own, with ranges inside the file.
        let waited = unsafe {
            libc::sync_file_range(
                fd,
                0,
                wait_before as libc::off64_t,
                libc::SYNC_FILE_RANGE_WAIT_BEFORE,
            )
        };
        if waited != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let started = unsafe {
            libc::sync_file_range(
                fd,
                start as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if started != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
