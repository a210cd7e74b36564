//! Replays a portable trace in a directory: every call again, in the recorded order, on one
//! thread, with a fixed data pattern of the recorded sizes at the recorded places.
//!
//! Descriptors are looked up by (recorded fd, path), so two processes that both used fd 3 for
//! different files stay apart. A call on a file the trace never opened (it was open before the
//! recording started) opens it read-write, creating it and its directories. A call that fails in
//! the replay is counted and named in the result, not fatal: the replay goes on, as an
//! application would after an error it expected (e.g. unlinking a journal that is not there).
use super::format::{Call, Op, OpenFlag, SyscallTrace};
use crate::LabError;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How calls are spaced in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Each call right after the previous one (what the file system can do).
    Asap,
    /// Each call no earlier than its recorded start (the application's think time kept).
    Recorded,
}

/// The largest single read or write the replay issues at once (longer calls are split).
const CHUNK_BYTES_MAX: usize = 8 << 20;
/// How many failed calls the result names (all are counted).
const ERRORS_NAMED_MAX: usize = 20;

/// Latency percentiles of one kind of call, replayed and as recorded (microseconds).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct OpLatency {
    pub calls: u64,
    pub bytes: u64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub recorded_p50_us: f64,
    pub recorded_p99_us: f64,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReplayResult {
    pub seconds: f64,
    pub calls: u64,
    pub failed_calls: u64,
    pub failures: Vec<String>,
    pub by_op: BTreeMap<String, OpLatency>,
    /// Files whose size after the replay differs from the recording's final size.
    pub size_mismatches: Vec<String>,
    pub files_checked: usize,
}

struct Player<'a> {
    root: &'a Path,
    files: HashMap<(i32, String), File>,
    pattern: Vec<u8>,
    read_buffer: Vec<u8>,
}

pub fn play(trace: &SyscallTrace, root: &Path, timing: Timing) -> Result<ReplayResult, LabError> {
    let mut player = Player {
        root,
        files: HashMap::new(),
        pattern: vec![0x5A; CHUNK_BYTES_MAX],
        read_buffer: vec![0; CHUNK_BYTES_MAX],
    };
    let mut latencies: BTreeMap<Op, (Vec<f64>, Vec<f64>, u64)> = BTreeMap::new();
    let mut result = ReplayResult::default();
    let start = Instant::now();
    for call in &trace.calls {
        if roamkv_testbed::fixture::interrupted() {
            return Err(LabError::Interrupted);
        }
        if timing == Timing::Recorded {
            let due = Duration::from_micros(call.t_us);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let t0 = Instant::now();
        let outcome = player.apply(call);
        let us = t0.elapsed().as_secs_f64() * 1e6;
        result.calls += 1;
        if let Err(e) = outcome {
            result.failed_calls += 1;
            if result.failures.len() < ERRORS_NAMED_MAX {
                result.failures.push(format!(
                    "{} {}: {e}",
                    call.op.name(),
                    call.path.as_deref().unwrap_or("")
                ));
            }
            continue;
        }
        let entry = latencies.entry(call.op).or_default();
        entry.0.push(us);
        entry.1.push(call.dur_us as f64);
        entry.2 += call.bytes.unwrap_or(0);
    }
    result.seconds = start.elapsed().as_secs_f64();
    drop(player);
    for (op, (mut replayed, mut recorded, bytes)) in latencies {
        replayed.sort_by(f64::total_cmp);
        recorded.sort_by(f64::total_cmp);
        let p = roamkv_testbed::stats::percentile;
        result.by_op.insert(
            op.name().to_string(),
            OpLatency {
                calls: replayed.len() as u64,
                bytes: if matches!(op, Op::Ftruncate | Op::Truncate | Op::Fallocate) {
                    0
                } else {
                    bytes
                },
                p50_us: p(&replayed, 50.0),
                p95_us: p(&replayed, 95.0),
                p99_us: p(&replayed, 99.0),
                max_us: replayed.last().copied().unwrap_or(0.0),
                recorded_p50_us: p(&recorded, 50.0),
                recorded_p99_us: p(&recorded, 99.0),
            },
        );
    }
    let sizes = file_sizes(root)?;
    result.files_checked = trace.header.final_files.len();
    for (path, recorded) in &trace.header.final_files {
        let replayed = sizes.get(path).copied();
        if replayed != Some(*recorded) {
            result.size_mismatches.push(format!(
                "{path}: recorded {recorded} bytes, replayed {}",
                replayed.map_or("no file".to_string(), |b| format!("{b} bytes"))
            ));
        }
    }
    Ok(result)
}

impl Player<'_> {
    fn path(&self, call: &Call) -> PathBuf {
        self.root.join(call.path.as_deref().unwrap_or(""))
    }

    fn key(call: &Call) -> (i32, String) {
        (call.fd.unwrap_or(-1), call.path.clone().unwrap_or_default())
    }

    /// The replay's file for this call's descriptor (opened now if the trace never opened it).
    fn file(&mut self, call: &Call) -> std::io::Result<&mut File> {
        let key = Player::key(call);
        if !self.files.contains_key(&key) {
            let path = self.path(call);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let file = if path.is_dir() {
                File::open(&path)?
            } else {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?
            };
            self.files.insert(key.clone(), file);
        }
        self.files
            .get_mut(&key)
            .ok_or_else(|| std::io::Error::other("descriptor vanished"))
    }

    /// Replays one call.
    fn apply(&mut self, call: &Call) -> std::io::Result<()> {
        let bytes = call.bytes.unwrap_or(0);
        let offset = call.offset.unwrap_or(0);
        match call.op {
            Op::Open => self.open(call)?,
            Op::Close => {
                self.files.remove(&Player::key(call));
            }
            Op::Read => self.read(call, bytes)?,
            Op::Pread => self.pread(call, bytes, offset)?,
            Op::Write | Op::Pwrite => self.write(call, bytes, offset)?,
            Op::Lseek => {
                self.file(call)?.seek(SeekFrom::Start(offset))?;
            }
            Op::Fsync => self.file(call)?.sync_all()?,
            Op::Fdatasync => self.file(call)?.sync_data()?,
            Op::Ftruncate => self.file(call)?.set_len(bytes)?,
            Op::Truncate => OpenOptions::new()
                .write(true)
                .open(self.path(call))?
                .set_len(bytes)?,
            Op::Fallocate => self.fallocate(call, bytes, offset)?,
            Op::Rename => {
                let to = self.root.join(call.to.as_deref().unwrap_or(""));
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::rename(self.path(call), to)?;
            }
            Op::Unlink => std::fs::remove_file(self.path(call))?,
            Op::Mkdir => match std::fs::create_dir(self.path(call)) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            },
            Op::Rmdir => std::fs::remove_dir(self.path(call))?,
        }
        Ok(())
    }

    /// Opens the call's file with the recorded flags (creating its directories).
    fn open(&mut self, call: &Call) -> std::io::Result<()> {
        let path = self.path(call);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let has = |f: OpenFlag| call.flags.contains(&f);
        let file = if has(OpenFlag::Directory) || path.is_dir() {
            File::open(&path)?
        } else {
            let write = has(OpenFlag::Wronly) || has(OpenFlag::Rdwr);
            OpenOptions::new()
                .read(!has(OpenFlag::Wronly))
                .write(write && !has(OpenFlag::Append))
                .append(has(OpenFlag::Append))
                // O_EXCL is not replayed: a file the replay made earlier than the
                // recording did (lazily, see above) must not fail the open.
                .create(has(OpenFlag::Create) && write)
                .truncate(has(OpenFlag::Trunc) && write)
                .open(&path)?
        };
        self.files.insert(Player::key(call), file);
        Ok(())
    }

    /// Reads `bytes` at the file's position, in chunks, stopping early at its end.
    fn read(&mut self, call: &Call, bytes: u64) -> std::io::Result<()> {
        let mut left = bytes as usize;
        while left > 0 {
            let n = left.min(CHUNK_BYTES_MAX);
            let mut buf = std::mem::take(&mut self.read_buffer);
            let got = self.file(call)?.read(&mut buf[..n]);
            self.read_buffer = buf;
            let got = got?;
            if got == 0 {
                break;
            }
            left -= got;
        }
        Ok(())
    }

    /// Reads `bytes` at `offset`, in chunks, stopping early at the file's end.
    fn pread(&mut self, call: &Call, bytes: u64, offset: u64) -> std::io::Result<()> {
        let mut done = 0u64;
        while done < bytes {
            let n = ((bytes - done) as usize).min(CHUNK_BYTES_MAX);
            let mut buf = std::mem::take(&mut self.read_buffer);
            let got = self.file(call)?.read_at(&mut buf[..n], offset + done);
            self.read_buffer = buf;
            let got = got?;
            if got == 0 {
                break;
            }
            done += got as u64;
        }
        Ok(())
    }

    /// Writes `bytes` of the pattern, in chunks: at the file's position (write) or at `offset`
    /// (pwrite).
    fn write(&mut self, call: &Call, bytes: u64, offset: u64) -> std::io::Result<()> {
        let mut done = 0u64;
        while done < bytes {
            let n = ((bytes - done) as usize).min(CHUNK_BYTES_MAX);
            let pattern = std::mem::take(&mut self.pattern);
            let written = if call.op == Op::Write {
                self.file(call)?.write_all(&pattern[..n])
            } else {
                self.file(call)?.write_all_at(&pattern[..n], offset + done)
            };
            self.pattern = pattern;
            written?;
            done += n as u64;
        }
        Ok(())
    }

    fn fallocate(&mut self, call: &Call, bytes: u64, offset: u64) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.file(call)?.as_raw_fd();
        let (off, len) = (
            i64::try_from(offset).map_err(std::io::Error::other)?,
            i64::try_from(bytes).map_err(std::io::Error::other)?,
        );
        // SAFETY: fd belongs to a File held in self.files for the duration of the call.
        if unsafe { libc::fallocate(fd, 0, off, len) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Sizes of every regular file under `root`, by path relative to it.
pub fn file_sizes(root: &Path) -> Result<BTreeMap<String, u64>, LabError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| LabError::io(&dir, e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                if entry.file_name() != "lost+found" {
                    stack.push(path);
                }
            } else if meta.is_file()
                && let Ok(rel) = path.strip_prefix(root)
            {
                out.insert(rel.to_string_lossy().into_owned(), meta.len());
            }
        }
    }
    Ok(out)
}
