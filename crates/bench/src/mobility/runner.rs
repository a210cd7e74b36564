//! Runs one (engine, threads, durability, scenario) measurement: a fresh file system on a loop
//! device, the worker in a memory cgroup, the device's own write counters before and after.
//!
//! The lab's fixtures attach loop devices with direct I/O, so the loop device's writes reach the
//! (virtual) disk instead of the host's page cache, and bandwidth means the disk's.
//!
//! How the device's cost is made visible on a machine with 24 GiB of RAM: the worker process
//! runs in a cgroup-v1 memory cgroup whose limit covers its page cache as well as its heap
//! (`check_cgroup_caps_page_cache` proves it on this kernel at the start of every run), so
//! dirty data must reach the device during the run; after the worker exits the file system is
//! synced (sync + syncfs) before the counters are read, so delayed write-back is counted too.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::{BenchError, Result};
use crate::mobility::engines::{Durability, EngineConfig, EngineKind};
use crate::mobility::worker::{WorkerResult, WorkerSpec};
use crate::mobility::workload::WorkloadConfig;

/// Where cgroup v1 mounts its memory controller.
const CGROUP_V1_MEMORY: &str = "/sys/fs/cgroup/memory";
/// Where cgroup v2 (the unified hierarchy) is mounted: on its own, or beside v1 (hybrid).
const CGROUP_V2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Which cgroup interface a group speaks: the files differ, the meaning is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    fn limit_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        }
    }
    fn usage_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        }
    }
    fn peak_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            // Linux 5.19 and later; older kernels lack it (the peak then reads 0).
            CgroupVersion::V2 => "memory.peak",
        }
    }
    /// The file with an "oom_kill N" line.
    fn oom_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        }
    }
}

/// A memory cgroup whose limit covers the page cache as well as the heap (v1 or v2), removed
/// when dropped.
pub struct MemoryCgroup {
    path: PathBuf,
    version: CgroupVersion,
}

/// The parent directory for a new memory cgroup: v1's memory controller if mounted, else the
/// v2 root with the memory controller enabled for its children (it is enabled if it can be).
fn memory_cgroup_parent() -> Result<(PathBuf, CgroupVersion)> {
    let v1 = Path::new(CGROUP_V1_MEMORY);
    if v1.join("memory.limit_in_bytes").exists() {
        return Ok((v1.to_path_buf(), CgroupVersion::V1));
    }
    for root in CGROUP_V2_ROOTS.iter().map(Path::new) {
        let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) else {
            continue;
        };
        if !controllers.split_whitespace().any(|c| c == "memory") {
            continue;
        }
        let subtree = root.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree)
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
        if !enabled {
            std::fs::write(&subtree, "+memory")
                .map_err(|e| BenchError::io("enabling the memory controller in", &subtree, e))?;
        }
        return Ok((root.to_path_buf(), CgroupVersion::V2));
    }
    Err(BenchError::Usage(format!(
        "no memory cgroup controller: neither cgroup v1 at {CGROUP_V1_MEMORY} nor cgroup v2 with \
         the memory controller at {}",
        CGROUP_V2_ROOTS.join(" or ")
    )))
}

impl MemoryCgroup {
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemoryCgroup> {
        let (parent, version) = memory_cgroup_parent()?;
        let path = parent.join(name);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).map_err(|e| BenchError::io("creating", &path, e))?;
        let cgroup = MemoryCgroup { path, version };
        cgroup.write(version.limit_file(), &limit_bytes.to_string())?;
        if version == CgroupVersion::V2 {
            // As v1's limit does, make the group reclaim (and finally OOM-kill) rather than swap.
            let _ = cgroup.write("memory.swap.max", "0");
        }
        Ok(cgroup)
    }

    /// "cgroup v1" or "cgroup v2", for reports.
    pub fn describe(&self) -> &'static str {
        match self.version {
            CgroupVersion::V1 => "cgroup v1",
            CgroupVersion::V2 => "cgroup v2",
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.path.join(file);
        std::fs::write(&path, value)
            .map_err(|e| BenchError::io(format!("writing {value} to"), path, e))
    }

    fn read_u64(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.path.join(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The file a process writes its pid to to join the group.
    pub fn procs_path(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    pub fn max_usage_bytes(&self) -> u64 {
        self.read_u64(self.version.peak_file())
    }

    /// The file holding the group's current usage (heap + page cache).
    pub fn usage_path(&self) -> PathBuf {
        self.path.join(self.version.usage_file())
    }

    /// Processes of this group the kernel killed for lack of memory (0 on kernels that do not
    /// report it).
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.path.join(self.version.oom_file()))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.read_u64(self.version.limit_file())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if self.version == CgroupVersion::V1 {
            // Charged page cache may keep the group busy for a moment: move it to the parent.
            let _ = std::fs::write(self.path.join("memory.force_empty"), "0");
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Writes 4x the limit through the page cache inside a cgroup, and reports the cgroup's peak
/// usage: if it stayed at or under the limit, the cgroup caps the page cache.
pub fn check_cgroup_caps_page_cache(dir: &Path, limit_bytes: u64) -> Result<serde_json::Value> {
    let cgroup = MemoryCgroup::create("roamkv-bench-cache-check", limit_bytes)?;
    let file = dir.join("cgroup-check.bin");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read go; dd if=/dev/zero of='{}' bs=1M count={} status=none",
            file.display(),
            4 * (limit_bytes >> 20)
        ))
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::os("spawning dd", e))?;
    cgroup.add(child.id())?;
    child
        .stdin
        .take()
        .map(|mut s| s.write_all(b"go\n"))
        .transpose()
        .map_err(|e| BenchError::os("starting dd", e))?;
    let status = child
        .wait()
        .map_err(|e| BenchError::os("waiting for dd", e))?;
    let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    let peak = cgroup.max_usage_bytes();
    Ok(serde_json::json!({
        "limit_bytes": cgroup.limit_bytes(),
        "bytes_written_through_page_cache": written,
        "cgroup_peak_bytes": peak,
        "caps_page_cache": status.success() && written >= 4 * limit_bytes && peak <= cgroup.limit_bytes(),
    }))
}

/// The disk's sequential write bandwidth through the same stack (loop device, file system):
/// 1 MiB O_DIRECT writes to a new file, then fdatasync. Returns bytes per second.
pub fn raw_sequential_write(fs: FsSpec, image_bytes: u64, total_bytes: u64) -> Result<f64> {
    use std::os::unix::fs::OpenOptionsExt;
    let fixture = Fixture::create(fs, image_bytes)?;
    let path = fixture.mount_dir().join("raw.bin");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .map_err(|e| BenchError::io("opening", &path, e))?;
    // O_DIRECT wants an aligned buffer: over-allocate and pick an aligned 1 MiB window.
    let backing = vec![0x5au8; (2 << 20) + 4096];
    let offset = backing.as_ptr().align_offset(4096);
    let chunk = &backing[offset..offset + (1 << 20)];
    let started = Instant::now();
    let mut written = 0;
    while written < total_bytes {
        file.write_all(chunk)
            .map_err(|e| BenchError::io("writing", &path, e))?;
        written += chunk.len() as u64;
    }
    file.sync_data()
        .map_err(|e| BenchError::io("syncing", &path, e))?;
    Ok(written as f64 / started.elapsed().as_secs_f64())
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RunOutcome {
    pub worker: WorkerResult,
    pub device: DevStat,
    pub space_bytes_end: u64,
    pub cgroup_peak_bytes: u64,
    pub memory_capped: bool,
}

/// Where and how long one measurement runs (the same for every engine of a sweep).
#[derive(Debug, Clone, Copy)]
pub struct Measurement {
    pub fs: FsSpec,
    pub image_bytes: u64,
    pub threads: usize,
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub memory_limit_bytes: u64,
}

/// One measurement, from mkfs to unmount.
pub fn run_one(
    m: Measurement,
    engine: EngineConfig,
    workload: WorkloadConfig,
) -> Result<RunOutcome> {
    let Measurement {
        fs,
        image_bytes,
        threads,
        warmup_ms,
        duration_ms,
        memory_limit_bytes,
    } = m;
    let fixture = Fixture::create(fs, image_bytes)?;
    let spec = WorkerSpec {
        engine,
        workload,
        threads,
        warmup_ms,
        duration_ms,
        dir: fixture.mount_dir().join("db"),
        device_name: Some(fixture.device_name().to_string()),
        tick_ms: None,
    };
    fixture.quiesce()?;
    let before = DevStat::read(fixture.device_name())?;
    let worker = RunningWorker::start(&spec, memory_limit_bytes)?;
    let memory_capped = worker.memory_capped;
    let (worker, cgroup) = worker.finish(|_| {});
    let worker = worker?;

    fixture.quiesce()?;
    let after = DevStat::read(fixture.device_name())?;
    // Bill the device writes of the measured phase (and the final sync), not of the warm-up.
    let before = match worker.device_at_measure_start {
        Some((writes, sectors_written, flushes)) => DevStat {
            writes,
            sectors_written,
            flushes,
            ..before
        },
        None => before,
    };
    let space_bytes_end = disk_usage(fixture.mount_dir());
    let cgroup_peak_bytes = cgroup.as_ref().map_or(0, |c| c.max_usage_bytes());
    drop(cgroup);
    Ok(RunOutcome {
        worker,
        device: after.delta(&before),
        space_bytes_end,
        cgroup_peak_bytes,
        memory_capped,
    })
}

/// A worker child process (`roamkv bench worker`) in its memory cgroup.
pub struct RunningWorker {
    child: std::process::Child,
    cgroup: Result<MemoryCgroup>,
    pub memory_capped: bool,
    engine_name: &'static str,
}

impl RunningWorker {
    /// Spawns the worker, places it in a fresh memory cgroup, then lets it start.
    pub fn start(spec: &WorkerSpec, memory_limit_bytes: u64) -> Result<RunningWorker> {
        let spec_json = serde_json::to_string(spec)?;
        let name = format!("roamkv-bench-{}", std::process::id());
        let cgroup = MemoryCgroup::create(&name, memory_limit_bytes);
        let exe =
            std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
        let mut child = Command::new(exe)
            .args(["bench", "worker", "--spec"])
            .arg(&spec_json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::os("spawning the worker", e))?;
        // Ctrl-C terminates it before the file system under it is unmounted.
        roamkv_testbed::fixture::set_waited_child(child.id());
        let memory_capped = match &cgroup {
            Ok(c) => c.add(child.id()).is_ok(),
            Err(_) => false,
        };
        if !memory_capped {
            let why = match &cgroup {
                Ok(c) => format!("could not join the {} memory group", c.describe()),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "\n*** WARNING: the {} worker runs WITHOUT a memory cap ({why}): its page cache is \
                 unbounded, so its figures measure the page cache, not the device. ***\n",
                spec.engine.kind.name()
            );
        }
        child
            .stdin
            .take()
            .map(|mut s| s.write_all(b"go\n"))
            .transpose()
            .map_err(|e| BenchError::os("starting the worker", e))?;
        Ok(RunningWorker {
            child,
            cgroup,
            memory_capped,
            engine_name: spec.engine.kind.name(),
        })
    }

    /// The file that holds the cgroup's current usage (heap + page cache), to read while
    /// `finish` owns the worker.
    pub fn cgroup_usage_path(&self) -> Option<PathBuf> {
        self.cgroup.as_ref().ok().map(MemoryCgroup::usage_path)
    }

    /// Reads the worker's output until it exits, handing every `TICK` line's JSON to `on_tick`,
    /// and returns its result (or why it failed: its exit status and stderr) with its cgroup.
    pub fn finish(
        mut self,
        mut on_tick: impl FnMut(&str),
    ) -> (Result<WorkerResult>, Result<MemoryCgroup>) {
        let result = (|| {
            let stderr = self.child.stderr.take();
            // Read stderr on its own thread so that a chatty worker cannot fill the pipe.
            let stderr_reader = std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut e) = stderr {
                    let _ = e.read_to_string(&mut text);
                }
                text
            });
            let stdout = self
                .child
                .stdout
                .take()
                .ok_or_else(|| BenchError::Run("no worker stdout".into()))?;
            let mut last_line = None;
            for line in BufReader::new(stdout)
                .lines()
                .map_while(std::result::Result::ok)
            {
                match line.strip_prefix("TICK ") {
                    Some(tick) => on_tick(tick),
                    None => last_line = Some(line),
                }
            }
            let stderr_text = stderr_reader.join().unwrap_or_default();
            let status = self.child.wait().map_err(|e| {
                BenchError::os(format!("waiting for the {} worker", self.engine_name), e)
            })?;
            roamkv_testbed::fixture::set_waited_child(0);
            if !status.success() {
                use std::os::unix::process::ExitStatusExt;
                let killed = match status.signal() {
                    Some(libc::SIGKILL) if self.cgroup_oom_kills() > 0 => {
                        " (killed by the memory cgroup: out of memory)"
                    }
                    Some(_) => " (killed by a signal)",
                    None => "",
                };
                return Err(BenchError::Run(format!(
                    "{} worker failed ({status}){killed}: {}",
                    self.engine_name,
                    stderr_text.trim()
                )));
            }
            last_line
                .as_deref()
                .ok_or("the worker printed nothing")
                .and_then(|l| {
                    serde_json::from_str(l).map_err(|_| "the worker's last line is not a result")
                })
                .map_err(|e| BenchError::Run(format!("{e}: {}", stderr_text.trim())))
        })();
        (result, self.cgroup)
    }

    fn cgroup_oom_kills(&self) -> u64 {
        self.cgroup.as_ref().map_or(0, |c| c.oom_kills())
    }
}

/// Bytes allocated on disk under `dir` (st_blocks, so sparse and preallocated space count as
/// the file system accounts them).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

/// How to run RocksDB's own db_bench fillrandom beside our RocksDB adapter.
#[derive(Debug, Clone, Copy)]
pub struct DbBenchSpec {
    pub fs: FsSpec,
    pub image_bytes: u64,
    /// Keys each thread writes.
    pub num_per_thread: u64,
    pub threads: usize,
    pub value_bytes: usize,
    /// The adapter's engine memory (write buffers and block cache are derived as for it).
    pub memory_bytes: u64,
    /// Run inside a memory cgroup of this limit (page cache included), as the adapter's worker.
    pub cgroup_limit_bytes: Option<u64>,
    pub sync: bool,
}

/// The db_bench binary (Debian's rocksdb-tools names it either way).
fn find_db_bench() -> Result<&'static str> {
    ["db_bench", "rocksdb_db_bench"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--help")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .ok_or_else(|| {
            BenchError::Usage("db_bench not found (Debian package rocksdb-tools)".into())
        })
}

/// RocksDB's own db_bench (Debian's rocksdb-tools, RocksDB 7.8) on the same file system with
/// the same value size and comparable buffers: a cross-check that our plain-RocksDB setup is
/// not misconfigured. Returns (command, ops/s) or why it could not run.
pub fn db_bench_crosscheck(spec: DbBenchSpec) -> Result<(String, f64)> {
    let DbBenchSpec {
        fs,
        image_bytes,
        num_per_thread,
        threads,
        value_bytes,
        memory_bytes,
        cgroup_limit_bytes,
        sync,
    } = spec;
    let binary = find_db_bench()?;
    let fixture = Fixture::create(fs, image_bytes)?;
    let db = fixture.mount_dir().join("dbbench");
    let args = vec![
        "--benchmarks=fillrandom".to_string(),
        format!("--db={}", db.display()),
        format!("--num={num_per_thread}"),
        format!("--value_size={value_bytes}"),
        "--key_size=32".into(),
        format!("--threads={threads}"),
        // Our writers put batches of 16 readings (one WriteBatch each): so does db_bench here.
        "--batch_size=16".into(),
        format!("--sync={}", sync as u8),
        "--compression_type=none".into(),
        format!("--write_buffer_size={}", memory_bytes / 4),
        "--max_write_buffer_number=2".into(),
        format!("--cache_size={}", memory_bytes / 2),
        "--max_background_jobs=2".into(),
        "--bloom_bits=10".into(),
    ];
    let cgroup = cgroup_limit_bytes
        .map(|limit| {
            MemoryCgroup::create(&format!("roamkv-db-bench-{}", std::process::id()), limit)
        })
        .transpose()?;
    let command = match &cgroup {
        Some(c) => format!(
            "{binary} {} (in a {} MiB {} memory group)",
            args.join(" "),
            c.limit_bytes() >> 20,
            c.describe()
        ),
        None => format!("{binary} {}", args.join(" ")),
    };
    // The child joins the group before it execs db_bench, so all of its memory is charged.
    let procs = cgroup
        .as_ref()
        .map(|c| c.procs_path().display().to_string())
        .unwrap_or_else(|| "/dev/null".into());
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$@""#)
        .arg(&procs)
        .arg(binary)
        .args(&args)
        .output()
        .map_err(|e| BenchError::os(format!("running {binary}"), e))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ops = parse_db_bench_ops(&text).ok_or_else(|| {
        let killed = cgroup.as_ref().is_some_and(|c| c.oom_kills() > 0);
        BenchError::Run(format!(
            "could not read db_bench's result{}: {}",
            if killed {
                " (killed by its memory cgroup)"
            } else {
                ""
            },
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok((command, ops))
}

/// Reads "fillrandom : 12.567 micros/op 79255 ops/sec ..." (RocksDB 7.8; older ones end "ops/sec;").
pub fn parse_db_bench_ops(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("fillrandom"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_end_matches(';') == "ops/sec")?;
    words.get(at.checked_sub(1)?)?.parse().ok()
}

pub fn engine_config(
    kind: EngineKind,
    durability: Durability,
    engine_memory_bytes: u64,
    management_time_ms: u64,
) -> EngineConfig {
    EngineConfig {
        kind,
        durability,
        engine_memory_bytes,
        management_time_ms,
        lazy_move_rule: false,
        index_after_ack: false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn db_bench_lines_parse() {
        let new = "fillrandom   :      12.567 micros/op 79255 ops/sec 0.025 seconds 2000 operations;   97.1 MB/s";
        let old = "fillrandom   :       1.234 micros/op 810372 ops/sec;   89.6 MB/s";
        assert_eq!(super::parse_db_bench_ops(new), Some(79255.0));
        assert_eq!(super::parse_db_bench_ops(old), Some(810372.0));
        assert_eq!(super::parse_db_bench_ops("nothing"), None);
    }
}
