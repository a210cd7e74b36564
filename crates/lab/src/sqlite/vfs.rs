//! A SQLite VFS shim that decides which sync system call SQLite makes.
//!
//! Why: paper 004 measured Android's SQLite, which called `fsync(2)`; modern SQLite on Linux calls
//! `fdatasync(2)` when built with `HAVE_FDATASYNC` (this repository sets `-DHAVE_FDATASYNC=1` in
//! `.cargo/config.toml`). To compare both on one build, the shim wraps the default `unix` VFS and
//! registers two VFSes:
//!
//! - `roamkv-fdatasync`: every method, `xSync` included, goes to the `unix` VFS unchanged (so the
//!   call is whatever the build makes: `fdatasync` here). It exists so both modes pay the same
//!   indirection.
//! - `roamkv-fsync`: `xSync` calls `fsync(2)` on a descriptor the shim opened on the same path at
//!   `xOpen` (fsync syncs the inode, so any descriptor of the file works), then, exactly like
//!   SQLite's own `unixSync`, fsyncs the parent directory once after a new journal/WAL file was
//!   created; `xDelete(.., syncDir=1)` likewise fsyncs the directory with `fsync(2)`. This is what a
//!   SQLite built without `HAVE_FDATASYNC` does, i.e. what the paper's phones did.
//!
//! The calls are counted (see [`SyncCounts`]); the test `sqlite_sync_call.rs` also checks with
//! `strace` that the kernel saw the intended call.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::ffi;

use super::config::SyncCall;

/// Name of the VFS that makes SQLite issue `call`.
pub fn vfs_name(call: SyncCall) -> &'static str {
    match call {
        SyncCall::Fdatasync => "roamkv-fdatasync",
        SyncCall::Fsync => "roamkv-fsync",
    }
}

/// How many sync calls the shim made or delegated since process start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncCounts {
    /// `fsync(2)` calls the shim made itself (fsync mode: files and directories).
    pub fsync_calls: u64,
    /// `xSync` calls delegated to the `unix` VFS (fdatasync mode, and temp files without a path).
    pub delegated_syncs: u64,
}

impl SyncCounts {
    pub fn read() -> SyncCounts {
        SyncCounts {
            fsync_calls: FSYNC_CALLS.load(Ordering::Relaxed),
            delegated_syncs: DELEGATED_SYNCS.load(Ordering::Relaxed),
        }
    }
    pub fn delta(&self, earlier: &SyncCounts) -> SyncCounts {
        SyncCounts {
            fsync_calls: self.fsync_calls.saturating_sub(earlier.fsync_calls),
            delegated_syncs: self.delegated_syncs.saturating_sub(earlier.delegated_syncs),
        }
    }
}

static FSYNC_CALLS: AtomicU64 = AtomicU64::new(0);
static DELEGATED_SYNCS: AtomicU64 = AtomicU64::new(0);

/// Errors registering the shim.
#[derive(Clone, Debug, thiserror::Error)]
pub enum VfsError {
    #[error("SQLite has no default \"unix\" VFS to wrap")]
    NoUnixVfs,
    #[error("sqlite3_vfs_register({name}) failed with code {code}")]
    Register { name: &'static str, code: c_int },
}

/// The `unix` VFS, found once.
struct Base(*mut ffi::sqlite3_vfs);
// SAFETY: the pointer refers to SQLite's static, never-freed unix VFS object; SQLite's VFS
// methods are thread-safe (the library is built threadsafe by rusqlite's bundled build).
unsafe impl Send for Base {}
// SAFETY: as for Send: the object is never written after SQLite set it up.
unsafe impl Sync for Base {}

static BASE: OnceLock<Base> = OnceLock::new();
static REGISTERED: OnceLock<Result<(), VfsError>> = OnceLock::new();

/// The shim's per-file object. SQLite allocates `szOsFile` bytes for it: this header followed
/// (at [`real_offset`]) by the `unix` VFS's own file object.
#[repr(C)]
struct ShimFile {
    header: ffi::sqlite3_file,
    /// Descriptor opened by the shim for `fsync(2)`; -1 when not in fsync mode or no path.
    own_fd: c_int,
    /// Set at xOpen when SQLite created a journal/WAL/super-journal: the directory must be synced
    /// once, as unixSync does (UNIXFILE_DIRSYNC).
    dir_sync_pending: bool,
    /// The file's path (owned CString, freed at xClose), for the directory sync; null if none.
    path: *mut c_char,
}

const fn real_offset() -> usize {
    // Round up to 16 so the unix file object keeps any alignment it needs.
    std::mem::size_of::<ShimFile>().div_ceil(16) * 16
}

unsafe fn real(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: `file` was allocated by SQLite with szOsFile = real_offset() + base szOsFile bytes.
    unsafe { (file as *mut u8).add(real_offset()) as *mut ffi::sqlite3_file }
}

unsafe fn real_methods(
    file: *mut ffi::sqlite3_file,
) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    // SAFETY: our pMethods is only installed after the base xOpen set a non-null pMethods on the
    // real file; the unix VFS's io-method tables are static.
    unsafe {
        let r = real(file);
        (r, &*(*r).pMethods)
    }
}

/// Registers both VFSes (idempotent). Call before opening a connection with [`vfs_name`].
pub fn register() -> Result<(), VfsError> {
    REGISTERED.get_or_init(register_once).clone()
}

fn register_once() -> Result<(), VfsError> {
    // SAFETY: sqlite3_initialize is safe to call repeatedly; vfs_find returns a static object.
    let base = unsafe {
        ffi::sqlite3_initialize();
        ffi::sqlite3_vfs_find(c"unix".as_ptr())
    };
    if base.is_null() {
        return Err(VfsError::NoUnixVfs);
    }
    let _ = BASE.set(Base(base));
    for (name, cname, open) in [
        (
            "roamkv-fdatasync",
            c"roamkv-fdatasync",
            x_open_fdatasync as OpenFn,
        ),
        ("roamkv-fsync", c"roamkv-fsync", x_open_fsync as OpenFn),
    ] {
        // SAFETY: copying the base VFS keeps its methods (which tolerate being handed our VFS
        // pointer: they only read pAppData, copied too); we replace name, size and open/delete.
        let mut vfs: ffi::sqlite3_vfs = unsafe { *base };
        vfs.pNext = std::ptr::null_mut();
        vfs.zName = cname.as_ptr();
        // SAFETY: `base` is SQLite's live unix VFS (checked non-null when it was found).
        vfs.szOsFile = (real_offset() as c_int) + unsafe { (*base).szOsFile };
        vfs.xOpen = Some(open);
        vfs.xDelete = Some(if name == "roamkv-fsync" {
            x_delete_fsync
        } else {
            x_delete_passthrough
        });
        // The VFS object must outlive every connection: leak it (two small structs per process).
        let vfs: &'static mut ffi::sqlite3_vfs = Box::leak(Box::new(vfs));
        // SAFETY: vfs is a valid, 'static VFS object; makeDflt=0 keeps "unix" the default.
        let code = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if code != ffi::SQLITE_OK {
            return Err(VfsError::Register { name, code });
        }
    }
    Ok(())
}

type OpenFn = unsafe extern "C" fn(
    *mut ffi::sqlite3_vfs,
    ffi::sqlite3_filename,
    *mut ffi::sqlite3_file,
    c_int,
    *mut c_int,
) -> c_int;

fn base() -> *mut ffi::sqlite3_vfs {
    BASE.get().map(|b| b.0).unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn x_open_fdatasync(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: forwarded from SQLite's own call with the same contract.
    unsafe { open_common(vfs, name, file, flags, out_flags, false) }
}

unsafe extern "C" fn x_open_fsync(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: forwarded from SQLite's own call with the same contract.
    unsafe { open_common(vfs, name, file, flags, out_flags, true) }
}

unsafe fn open_common(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
    fsync_mode: bool,
) -> c_int {
    let base = base();
    // SAFETY: SQLite hands us szOsFile writable bytes at `file`; we initialise our header and let
    // the base VFS initialise the real file object behind it.
    unsafe {
        let shim = file as *mut ShimFile;
        std::ptr::write(
            shim,
            ShimFile {
                header: ffi::sqlite3_file {
                    pMethods: std::ptr::null(),
                },
                own_fd: -1,
                dir_sync_pending: false,
                path: std::ptr::null_mut(),
            },
        );
        let r = real(file);
        (*r).pMethods = std::ptr::null();
        let Some(base_open) = (*base).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        let rc = base_open(base, name, r, flags, out_flags);
        if (*r).pMethods.is_null() {
            return rc;
        }
        (*shim).header.pMethods = &IO_METHODS;
        if rc != ffi::SQLITE_OK || !fsync_mode || name.is_null() {
            return rc;
        }
        let fd = libc::open(name, libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            // Without our own descriptor we cannot choose the call: refuse rather than silently
            // measure the other one. xClose (called by SQLite because pMethods is set) cleans up.
            return ffi::SQLITE_CANTOPEN;
        }
        (*shim).own_fd = fd;
        let is_create = flags & ffi::SQLITE_OPEN_CREATE != 0;
        let file_type = flags & 0x0FFF_FF00;
        (*shim).dir_sync_pending = is_create
            && (file_type == ffi::SQLITE_OPEN_MAIN_JOURNAL
                || file_type == ffi::SQLITE_OPEN_WAL
                || file_type == ffi::SQLITE_OPEN_SUPER_JOURNAL);
        (*shim).path = CStr::from_ptr(name).to_owned().into_raw();
        rc
    }
}

/// fsync(2) the directory holding `path` (errors ignored, as SQLite does: some systems cannot).
fn fsync_parent_dir(path: &CStr) {
    let bytes = path.to_bytes();
    let dir: &[u8] = match bytes.iter().rposition(|&b| b == b'/') {
        Some(0) => b"/",
        Some(i) => &bytes[..i],
        None => b".",
    };
    let Ok(dir) = CString::new(dir) else { return };
    // SAFETY: plain syscalls on a descriptor we own and close.
    unsafe {
        let fd = libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            FSYNC_CALLS.fetch_add(1, Ordering::Relaxed);
            libc::fsync(fd);
            libc::close(fd);
        }
    }
}

unsafe extern "C" fn x_delete_passthrough(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let base = base();
    // SAFETY: forwarding SQLite's arguments to the base VFS.
    unsafe {
        match (*base).xDelete {
            Some(f) => f(base, name, sync_dir),
            None => ffi::SQLITE_ERROR,
        }
    }
}

unsafe extern "C" fn x_delete_fsync(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let base = base();
    // SAFETY: forwarding SQLite's arguments to the base VFS; `name` is a valid C string.
    unsafe {
        let Some(f) = (*base).xDelete else {
            return ffi::SQLITE_ERROR;
        };
        let rc = f(base, name, 0);
        if rc == ffi::SQLITE_OK && sync_dir != 0 && !name.is_null() {
            fsync_parent_dir(CStr::from_ptr(name));
        }
        rc
    }
}

static IO_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

unsafe extern "C" fn x_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: `file` is a ShimFile opened by open_common.
    unsafe {
        let shim = file as *mut ShimFile;
        if (*shim).own_fd >= 0 {
            FSYNC_CALLS.fetch_add(1, Ordering::Relaxed);
            if libc::fsync((*shim).own_fd) != 0 {
                return ffi::SQLITE_IOERR_FSYNC;
            }
            if (*shim).dir_sync_pending {
                (*shim).dir_sync_pending = false;
                if !(*shim).path.is_null() {
                    fsync_parent_dir(CStr::from_ptr((*shim).path));
                }
            }
            return ffi::SQLITE_OK;
        }
        DELEGATED_SYNCS.fetch_add(1, Ordering::Relaxed);
        let (r, m) = real_methods(file);
        match m.xSync {
            Some(f) => f(r, flags),
            None => ffi::SQLITE_OK,
        }
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: `file` is a ShimFile; own_fd and path were created by open_common.
    unsafe {
        let shim = file as *mut ShimFile;
        if (*shim).own_fd >= 0 {
            libc::close((*shim).own_fd);
            (*shim).own_fd = -1;
        }
        if !(*shim).path.is_null() {
            drop(CString::from_raw((*shim).path));
            (*shim).path = std::ptr::null_mut();
        }
        let (r, m) = real_methods(file);
        match m.xClose {
            Some(f) => f(r),
            None => ffi::SQLITE_OK,
        }
    }
}

// The remaining methods forward to the unix VFS's file object. A missing method in the base
// table (older iVersion) is reported the way SQLite expects from an absent feature.
macro_rules! forward {
    ($name:ident, $field:ident, ($($arg:ident : $ty:ty),*), $ret:ty, $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> $ret {
            // SAFETY: `file` is a ShimFile whose real file was opened by the base VFS.
            unsafe {
                let (r, m) = real_methods(file);
                match m.$field { Some(f) => f(r $(, $arg)*), None => $missing }
            }
        }
    };
}

forward!(x_read, xRead, (buf: *mut c_void, amount: c_int, offset: ffi::sqlite3_int64), c_int, ffi::SQLITE_IOERR);
forward!(x_write, xWrite, (buf: *const c_void, amount: c_int, offset: ffi::sqlite3_int64), c_int, ffi::SQLITE_IOERR);
forward!(x_truncate, xTruncate, (size: ffi::sqlite3_int64), c_int, ffi::SQLITE_IOERR);
forward!(x_file_size, xFileSize, (size: *mut ffi::sqlite3_int64), c_int, ffi::SQLITE_IOERR);
forward!(x_lock, xLock, (level: c_int), c_int, ffi::SQLITE_OK);
forward!(x_unlock, xUnlock, (level: c_int), c_int, ffi::SQLITE_OK);
forward!(x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int), c_int, ffi::SQLITE_OK);
forward!(x_file_control, xFileControl, (op: c_int, arg: *mut c_void), c_int, ffi::SQLITE_NOTFOUND);
forward!(x_sector_size, xSectorSize, (), c_int, 4096);
forward!(
    x_device_characteristics,
    xDeviceCharacteristics,
    (),
    c_int,
    0
);
forward!(x_shm_map, xShmMap, (page: c_int, page_bytes: c_int, extend: c_int, out: *mut *mut c_void), c_int, ffi::SQLITE_IOERR);
forward!(x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), c_int, ffi::SQLITE_IOERR);
forward!(x_shm_unmap, xShmUnmap, (delete: c_int), c_int, ffi::SQLITE_OK);
forward!(x_fetch, xFetch, (offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void), c_int, {
    // `out` is SQLite's out-parameter (the macro body is already an unsafe block); a null page
    // means "no mmap, read instead".
    *out = std::ptr::null_mut();
    ffi::SQLITE_OK
});
forward!(x_unfetch, xUnfetch, (offset: ffi::sqlite3_int64, page: *mut c_void), c_int, ffi::SQLITE_OK);

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: `file` is a ShimFile whose real file was opened by the base VFS.
    unsafe {
        let (r, m) = real_methods(file);
        if let Some(f) = m.xShmBarrier {
            f(r)
        }
    }
}
