//! What bounds a steady run's figures, measured in the same run on the same stack (a fresh file
//! system of the run's kind and size on a loop device), so that every engine's figure can be set
//! against it: the disk's sustained sequential write bandwidth (O_DIRECT, 2 GiB, far past any
//! cache the first seconds of a write fill), the latency of one fdatasync of a 4 KiB write into
//! an allocated file (what one `sync` commit of a single writer costs at the least), and the
//! machine's cores (the CPU ceiling, against which each run's `cpu_cores` is set).

use std::os::unix::fs::FileExt;
use std::time::Instant;

use hdrhistogram::Histogram;
use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::{BenchError, Result};
use crate::mobility::runner;

/// The disk probe's volume: sustained, not the first burst a cache absorbs.
pub const DISK_PROBE_BYTES: u64 = 2 << 30;
/// fdatasyncs the latency probe times.
const FDATASYNC_PROBES: u64 = 2000;
/// The file the latency probe overwrites (allocated and synced first, as a log segment is).
const FDATASYNC_FILE_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Ceilings {
    /// CPUs online: `cpu_cores` of a run can reach at most this.
    pub cpus: usize,
    pub disk_probe_bytes: u64,
    pub disk_write_bytes_per_sec: f64,
    /// One 4 KiB pwrite + fdatasync into an allocated, synced file, `fdatasync_probes` times.
    pub fdatasync_probes: u64,
    pub fdatasync_p50_us: u64,
    pub fdatasync_p99_us: u64,
    pub fdatasync_max_us: u64,
}

/// Measures the ceilings on fresh file systems of the run's kind and size.
pub fn measure(fs: FsSpec, image_bytes: u64) -> Result<Ceilings> {
    let disk_probe_bytes = DISK_PROBE_BYTES.min(image_bytes / 2);
    let disk_write_bytes_per_sec = runner::raw_sequential_write(fs, image_bytes, disk_probe_bytes)?;
    let latency = fdatasync_latency(fs, image_bytes)?;
    Ok(Ceilings {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        disk_probe_bytes,
        disk_write_bytes_per_sec,
        fdatasync_probes: FDATASYNC_PROBES,
        fdatasync_p50_us: latency.value_at_quantile(0.5),
        fdatasync_p99_us: latency.value_at_quantile(0.99),
        fdatasync_max_us: latency.max(),
    })
}

/// Times `FDATASYNC_PROBES` rounds of a 4 KiB write at the next offset of an allocated file
/// followed by fdatasync: the data write and the device flush, no metadata to journal.
fn fdatasync_latency(fs: FsSpec, image_bytes: u64) -> Result<Histogram<u64>> {
    let fixture = Fixture::create(fs, image_bytes)?;
    fdatasync_latency_in(fixture.mount_dir(), FDATASYNC_PROBES, None)
}

/// The fdatasync probe in a directory of an existing file system (the file removed after):
/// `probes` rounds, or fewer if `time_max` passes first.
pub fn fdatasync_latency_in(
    dir: &std::path::Path,
    probes: u64,
    time_max: Option<std::time::Duration>,
) -> Result<Histogram<u64>> {
    let path = dir.join("fdatasync.probe");
    let latency = probe_file(&path, probes, time_max);
    let _ = std::fs::remove_file(&path);
    latency
}

fn probe_file(
    path: &std::path::Path,
    probes: u64,
    time_max: Option<std::time::Duration>,
) -> Result<Histogram<u64>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| BenchError::io("creating", path, e))?;
    let zeros = vec![0u8; 1 << 20];
    for at in (0..FDATASYNC_FILE_BYTES).step_by(zeros.len()) {
        file.write_all_at(&zeros, at)
            .map_err(|e| BenchError::io("writing", path, e))?;
    }
    file.sync_all()
        .map_err(|e| BenchError::io("syncing", path, e))?;
    let mut latency =
        Histogram::new_with_bounds(1, 60_000_000, 3).map_err(|e| BenchError::Run(e.to_string()))?;
    let block = vec![0x5au8; 4096];
    let begun = Instant::now();
    for i in 0..probes {
        if time_max.is_some_and(|max| begun.elapsed() >= max) {
            break;
        }
        let at = (i * 4096) % FDATASYNC_FILE_BYTES;
        let started = Instant::now();
        file.write_all_at(&block, at)
            .map_err(|e| BenchError::io("writing", path, e))?;
        file.sync_data()
            .map_err(|e| BenchError::io("fdatasync", path, e))?;
        latency.saturating_record(started.elapsed().as_micros() as u64);
    }
    Ok(latency)
}

/// One line for the terminal and the report.
pub fn describe(c: &Ceilings) -> String {
    format!(
        "ceilings on this stack: {} CPUs; disk {:.0} MB/s sequential (O_DIRECT, {:.1} GiB); \
         fdatasync of a 4 KiB write p50/p99/max {}/{}/{} µs ({} probes)",
        c.cpus,
        c.disk_write_bytes_per_sec / 1e6,
        c.disk_probe_bytes as f64 / (1u64 << 30) as f64,
        c.fdatasync_p50_us,
        c.fdatasync_p99_us,
        c.fdatasync_max_us,
        c.fdatasync_probes
    )
}
