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
//!
//! This file holds one measurement from mkfs to unmount (`run_one`), the disk's own sequential
//! bandwidth and the space a run leaves. The parts: `cgroup` (the memory cgroup and the check
//! that it caps the page cache), `running_worker` (the worker child process, from spawn to its
//! result), `db_bench` (RocksDB's own db_bench as a cross-check).
mod cgroup;
mod db_bench;
mod running_worker;

pub use cgroup::{MemoryCgroup, check_cgroup_caps_page_cache};
pub use db_bench::{DbBenchSpec, db_bench_crosscheck, parse_db_bench_ops};
pub use running_worker::RunningWorker;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::{BenchError, Result};
use crate::mobility::engines::{Durability, EngineConfig, EngineKind};
use crate::mobility::worker::{WorkerResult, WorkerSpec};
use crate::mobility::workload::WorkloadConfig;

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
