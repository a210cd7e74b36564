//! A fault-injecting `Storage` for the commit log: files in memory, with what the process sees
//! (the page cache) kept apart from what a power cut would leave (the disk).
//!
//! The model is ext4 with data=ordered on a device with 512-byte atomic sectors:
//! - fdatasync/fsync of a file makes its current bytes durable.
//! - Bytes written since then may or may not survive a cut, page by page (4096 bytes), in any
//!   mix; a page being written may also be torn, keeping a prefix of its sectors.
//! - Creations, renames and removals are durable after an fsync of their directory; before it,
//!   the metadata journal commits them in order, so a cut keeps some prefix of them.
//! - A failed fdatasync drops the file's unsynced pages (Linux marks them clean and reports the
//!   error once: the next fdatasync "succeeds" — the PostgreSQL fsyncgate lesson).
//!
//! Faults: the Nth write / sync / rename / create from now fails with a chosen errno; writes
//! may be made short; the file system has a capacity (ENOSPC past it). A power cut moves the
//! file system to a new generation: handles of the old one (the dead process) get EIO forever.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::Rng;
use rand::rngs::StdRng;
use roamkv_engine::storage::{Storage, StorageFile};

const PAGE_BYTES: usize = 4096;
const SECTOR_BYTES: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Sync,
    Rename,
    Create,
    SyncDir,
}

#[derive(Debug)]
struct Armed {
    op: Op,
    /// Calls of `op` still to pass before the one that fails.
    skip: u64,
    errno: i32,
    /// Cut the power (with this seed) instead of failing only this call.
    cut_seed: Option<u64>,
}

#[derive(Debug, Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Link(PathBuf, u64),
    Unlink(PathBuf),
    Rename(PathBuf, PathBuf),
}

#[derive(Debug, Default)]
struct FsState {
    generation: u64,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    /// Name changes since the last directory sync, in order.
    dir_log: Vec<DirOp>,
    armed: Vec<Armed>,
    short_writes: bool,
    capacity_bytes: u64,
    /// Operations that failed by injection, as "op path".
    injected: Vec<String>,
}

/// The shared file system. `storage()` hands out a handle for the current generation.
#[derive(Debug, Clone)]
pub struct FaultFs {
    state: Arc<Mutex<FsState>>,
}

impl FaultFs {
    pub fn new(capacity_bytes: u64) -> FaultFs {
        FaultFs {
            state: Arc::new(Mutex::new(FsState {
                capacity_bytes,
                next_inode: 1,
                ..FsState::default()
            })),
        }
    }

    /// A `Storage` for an engine of the current generation (the "process" now running).
    pub fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(FaultStorage {
            fs: self.clone(),
            generation: self.state.lock().generation,
        })
    }

    /// Makes the `nth` (1-based) call of `op` from now fail with `errno`.
    pub fn fail_nth(&self, op: Op, nth: u64, errno: i32) {
        self.state.lock().armed.push(Armed {
            op,
            skip: nth.saturating_sub(1),
            errno,
            cut_seed: None,
        });
    }

    /// Cuts the power just before the `nth` call of `op` from now would complete: that call
    /// (and every later one of the same process) gets EIO. Whatever that call was writing was
    /// in flight: it survives only as far as the cut's page choices say.
    pub fn cut_at(&self, op: Op, nth: u64, seed: u64) {
        self.state.lock().armed.push(Armed {
            op,
            skip: nth.saturating_sub(1),
            errno: libc::EIO,
            cut_seed: Some(seed),
        });
    }

    /// Whether a power cut happened since the handle's generation.
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// Forgets every armed fault and cut.
    pub fn disarm(&self) {
        self.state.lock().armed.clear();
    }

    pub fn set_short_writes(&self, on: bool) {
        self.state.lock().short_writes = on;
    }

    pub fn set_capacity(&self, capacity_bytes: u64) {
        self.state.lock().capacity_bytes = capacity_bytes;
    }

    pub fn injected(&self) -> Vec<String> {
        self.state.lock().injected.clone()
    }

    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used_bytes()
    }

    /// Flips a byte of a file, in the page cache and on disk (bit rot).
    pub fn corrupt(&self, path: &Path, offset: usize) {
        let mut st = self.state.lock();
        let ino = st.names[path];
        let inode = st.inodes.get_mut(&ino).expect("inode");
        inode.data[offset] ^= 0x5a;
        if offset < inode.durable.len() {
            inode.durable[offset] ^= 0x5a;
        }
    }

    /// The names in the file system, as the running process sees them.
    pub fn names(&self) -> Vec<PathBuf> {
        self.state.lock().names.keys().cloned().collect()
    }

    /// Cuts the power: keeps what was durable plus a random choice of what was not (see the
    /// module comment), and starts a new generation. Returns how many unsynced pages survived
    /// and how many were lost or torn.
    pub fn power_cut(&self, rng: &mut StdRng) -> (usize, usize) {
        cut(&mut self.state.lock(), rng)
    }

    /// A power cut where the unsynced pages of files whose name contains `keep` survive and
    /// all others are lost (a deterministic worst case for ordering bugs).
    pub fn power_cut_keeping(&self, keep: &str) {
        let mut st = self.state.lock();
        let keep_inodes: Vec<u64> = st
            .names
            .iter()
            .filter(|(p, _)| p.to_string_lossy().contains(keep))
            .map(|(_, ino)| *ino)
            .collect();
        for (ino, inode) in st.inodes.iter_mut() {
            if keep_inodes.contains(ino) && inode.data.len() == inode.durable.len() {
                inode.durable = inode.data.clone();
            } else {
                inode.data = inode.durable.clone();
            }
        }
        st.dir_log.clear();
        let mut rng = <StdRng as rand::SeedableRng>::seed_from_u64(0);
        cut(&mut st, &mut rng);
    }
}

fn cut(st: &mut FsState, rng: &mut StdRng) -> (usize, usize) {
    // Some prefix of the unsynced name changes was committed by the journal.
    let mut names = st.durable_names.clone();
    let committed = rng.random_range(0..=st.dir_log.len());
    for op in &st.dir_log[..committed] {
        apply_dir_op(&mut names, op);
    }
    let (mut kept, mut lost) = (0, 0);
    let mut inodes = HashMap::new();
    let live: Vec<u64> = names.values().copied().collect();
    for ino in live {
        if inodes.contains_key(&ino) {
            continue;
        }
        let Some(inode) = st.inodes.get(&ino) else {
            continue;
        };
        let mut after = inode.durable.clone();
        if inode.data.len() == inode.durable.len() {
            for start in (0..inode.data.len()).step_by(PAGE_BYTES) {
                let end = (start + PAGE_BYTES).min(inode.data.len());
                if inode.data[start..end] == inode.durable[start..end] {
                    continue;
                }
                match rng.random_range(0..4) {
                    0 | 1 => {
                        after[start..end].copy_from_slice(&inode.data[start..end]);
                        kept += 1;
                    }
                    2 => lost += 1,
                    _ => {
                        // Torn: a prefix of the page's sectors made it.
                        let sectors = rng.random_range(0..(end - start).div_ceil(SECTOR_BYTES));
                        let torn_end = (start + sectors * SECTOR_BYTES).min(end);
                        after[start..torn_end].copy_from_slice(&inode.data[start..torn_end]);
                        lost += 1;
                    }
                }
            }
        }
        inodes.insert(
            ino,
            Inode {
                data: after.clone(),
                durable: after,
            },
        );
    }
    st.generation += 1;
    st.inodes = inodes;
    st.names = names.clone();
    st.durable_names = names;
    st.dir_log.clear();
    st.armed.clear();
    st.short_writes = false;
    (kept, lost)
}

fn apply_dir_op(names: &mut BTreeMap<PathBuf, u64>, op: &DirOp) {
    match op {
        DirOp::Link(path, ino) => {
            names.insert(path.clone(), *ino);
        }
        DirOp::Unlink(path) => {
            names.remove(path);
        }
        DirOp::Rename(from, to) => {
            if let Some(ino) = names.remove(from) {
                names.insert(to.clone(), ino);
            }
        }
    }
}

impl FsState {
    /// Whether this call of `op` is the one armed to fail; its errno if so.
    fn should_fail(&mut self, op: Op, what: &Path) -> Option<io::Error> {
        let at = self.armed.iter().position(|a| a.op == op)?;
        if self.armed[at].skip > 0 {
            self.armed[at].skip -= 1;
            return None;
        }
        let armed = self.armed.remove(at);
        self.injected.push(format!("{op:?} {}", what.display()));
        if let Some(seed) = armed.cut_seed {
            let mut rng = <StdRng as rand::SeedableRng>::seed_from_u64(seed);
            cut(self, &mut rng);
        }
        Some(io::Error::from_raw_os_error(armed.errno))
    }

    fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.data.len() as u64).sum()
    }

    fn dead(generation: u64, current: u64) -> io::Result<()> {
        if generation != current {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }
}

#[derive(Debug)]
struct FaultStorage {
    fs: FaultFs,
    generation: u64,
}

#[derive(Debug)]
struct FaultFile {
    fs: FaultFs,
    generation: u64,
    ino: u64,
    path: PathBuf,
}

impl FaultStorage {
    fn file(&self, ino: u64, path: &Path) -> Arc<dyn StorageFile> {
        Arc::new(FaultFile {
            fs: self.fs.clone(),
            generation: self.generation,
            ino,
            path: path.to_path_buf(),
        })
    }
}

impl Storage for FaultStorage {
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        if let Some(e) = st.should_fail(Op::Create, path) {
            return Err(e);
        }
        let ino = st.next_inode;
        st.next_inode += 1;
        st.inodes.insert(ino, Inode::default());
        st.names.insert(path.to_path_buf(), ino);
        st.dir_log.push(DirOp::Link(path.to_path_buf(), ino));
        drop(st);
        Ok(self.file(ino, path))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        let ino = *st
            .names
            .get(path)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        drop(st);
        Ok(self.file(ino, path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        if let Some(e) = st.should_fail(Op::Rename, from) {
            return Err(e);
        }
        let ino = st
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        st.names.insert(to.to_path_buf(), ino);
        st.dir_log
            .push(DirOp::Rename(from.to_path_buf(), to.to_path_buf()));
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        st.names
            .remove(path)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        st.dir_log.push(DirOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        if let Some(e) = st.should_fail(Op::SyncDir, dir) {
            return Err(e);
        }
        // One directory holds every file the log makes: its sync commits all name changes.
        st.durable_names = st.names.clone();
        st.dir_log.clear();
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, u64)>> {
        let st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        Ok(st
            .names
            .iter()
            .filter(|(path, _)| path.parent() == Some(dir))
            .filter_map(|(path, ino)| {
                let name = path.file_name()?.to_str()?.to_string();
                Some((name, st.inodes.get(ino).map_or(0, |i| i.data.len() as u64)))
            })
            .collect())
    }

    fn free_bytes(&self, _dir: &Path) -> io::Result<u64> {
        let st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        Ok(st.capacity_bytes.saturating_sub(st.used_bytes()))
    }
}

impl FaultFile {
    fn with<T>(&self, f: impl FnOnce(&mut FsState) -> io::Result<T>) -> io::Result<T> {
        let mut st = self.fs.state.lock();
        FsState::dead(self.generation, st.generation)?;
        f(&mut st)
    }

    /// Grows the file to `len` bytes if the capacity allows.
    fn grow(st: &mut FsState, ino: u64, len: usize) -> io::Result<()> {
        let have = st.inodes.get(&ino).map_or(0, |i| i.data.len());
        if len > have {
            if st.used_bytes() + (len - have) as u64 > st.capacity_bytes {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            if let Some(inode) = st.inodes.get_mut(&ino) {
                inode.data.resize(len, 0);
            }
        }
        Ok(())
    }
}

impl StorageFile for FaultFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.with(|st| {
            if let Some(e) = st.should_fail(Op::Write, &self.path) {
                return Err(e);
            }
            let n = if st.short_writes && buf.len() > 1 {
                buf.len() / 2
            } else {
                buf.len()
            };
            let offset = offset as usize;
            FaultFile::grow(st, self.ino, offset + n)?;
            let inode = st.inodes.get_mut(&self.ino).expect("open inode");
            inode.data[offset..offset + n].copy_from_slice(&buf[..n]);
            Ok(n)
        })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with(|st| {
            let inode = st.inodes.get(&self.ino).expect("open inode");
            let offset = (offset as usize).min(inode.data.len());
            let n = buf.len().min(inode.data.len() - offset);
            buf[..n].copy_from_slice(&inode.data[offset..offset + n]);
            Ok(n)
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|st| {
            let failed = st.should_fail(Op::Sync, &self.path);
            if st.generation != self.generation {
                return Err(io::Error::from_raw_os_error(libc::EIO)); // the power went
            }
            let inode = st.inodes.get_mut(&self.ino).expect("open inode");
            match failed {
                Some(e) => {
                    // The kernel drops the dirty pages it could not write and reports it once.
                    inode.data = inode.durable.clone();
                    Err(e)
                }
                None => {
                    inode.durable = inode.data.clone();
                    Ok(())
                }
            }
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn size_bytes(&self) -> io::Result<u64> {
        self.with(|st| Ok(st.inodes.get(&self.ino).map_or(0, |i| i.data.len() as u64)))
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.with(|st| FaultFile::grow(st, self.ino, len as usize))
    }

    fn write_back(&self, _wait_before: u64, _start: u64, _len: u64) -> io::Result<()> {
        self.with(|_| Ok(()))
    }
}
