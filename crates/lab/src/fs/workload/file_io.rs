//! The file handling under the workloads: an O_DIRECT-aligned buffer of incompressible bytes,
//! opening a file for buffered or direct I/O, the untimed preparation of the file to read or
//! overwrite, and the sync call.
use super::spec::{IoMode, SyncCall};
use crate::LabError;
use rand::SeedableRng;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Alignment of O_DIRECT buffers (covers 512 B and 4 KiB logical blocks).
const DIRECT_ALIGN_BYTES: usize = 4096;
const PREPARE_CHUNK_BYTES: u64 = 1 << 20;

/// A heap buffer aligned for O_DIRECT, filled with pseudo-random (incompressible) bytes.
pub(super) struct AlignedBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuffer {
    pub(super) fn new(bytes: usize, seed: u64) -> AlignedBuffer {
        let layout =
            std::alloc::Layout::from_size_align(bytes.max(DIRECT_ALIGN_BYTES), DIRECT_ALIGN_BYTES)
                .expect("block sizes are small powers of two");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mut buffer = AlignedBuffer { ptr, layout };
        use rand::RngCore;
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(buffer.as_mut_slice());
        buffer
    }
    pub(super) fn as_slice(&self, len: usize) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() bytes; len is clamped to it.
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.layout.size())) }
    }
    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid and uniquely owned for layout.size() bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

pub(super) fn io_err(path: &Path) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |e| LabError::io(path, e)
}

pub(super) fn open_for(
    path: &Path,
    io: IoMode,
    write: bool,
    create: bool,
    append: bool,
) -> Result<File, LabError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(write)
        .create(create)
        .append(append);
    if io == IoMode::Direct {
        options.custom_flags(libc::O_DIRECT);
    }
    options.open(path).map_err(io_err(path))
}

/// Writes `bytes` of random data to `path` and fsyncs it (untimed preparation).
pub(super) fn prepare_file(path: &Path, bytes: u64, seed: u64) -> Result<(), LabError> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == bytes) {
        return Ok(());
    }
    let file = File::create(path).map_err(io_err(path))?;
    let buffer = AlignedBuffer::new(PREPARE_CHUNK_BYTES as usize, seed);
    let mut written = 0;
    while written < bytes {
        let len = (bytes - written).min(PREPARE_CHUNK_BYTES);
        file.write_all_at(buffer.as_slice(len as usize), written)
            .map_err(io_err(path))?;
        written += len;
    }
    file.sync_all().map_err(io_err(path))
}

pub(super) fn sync_file(file: &File, call: SyncCall, path: &Path) -> Result<(), LabError> {
    match call {
        SyncCall::Fsync => file.sync_all(),
        SyncCall::Fdatasync => file.sync_data(),
    }
    .map_err(io_err(path))
}
