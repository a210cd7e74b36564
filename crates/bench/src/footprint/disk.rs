//! The gateway-class disk: each system's loop device throttled like an SD card or an eMMC
//! (write and read bandwidth, write requests per second) by the kernel's block-layer throttle
//! (`Fixture::throttle`, cgroup I/O), and a probe that measures what the throttled device does
//! before any system runs on it, so the report says what bound the systems, not what was asked.
//!
//! Why requests per second and not a fixed fdatasync latency: blk-throttle has no per-request
//! delay, and the device-mapper's `delay` target (dm-delay) that has one is not in every kernel
//! (not in this machine's). Under a stream of synced writes, a limit of N write requests a second
//! spaces them 1/N s apart: what an SD card's small-write rate does to group commits.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use clap::{Args, ValueEnum};
use roamkv_testbed::fixture::{Fixture, FsSpec, IoLimits};

use crate::error::{BenchError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiskPreset {
    /// 30 MB/s write, 60 MB/s read, 500 write requests/s: an SD card of the A1 class (its
    /// sustained random-write floor is 500 IOPS of 4 KiB) or a low-end eMMC.
    SdCard,
}

#[derive(Args, Debug, Clone, Default)]
pub struct DiskArgs {
    /// Run every system on a gateway-class disk: the preset's values, each overridden by the
    /// flags below. Without it and the flags, the disk is not throttled.
    #[arg(long)]
    pub disk_profile: Option<DiskPreset>,
    /// Writes to each system's device at most this many MB/s (10^6 bytes).
    #[arg(long)]
    pub disk_write_mbps: Option<f64>,
    /// Reads from each system's device at most this many MB/s (10^6 bytes).
    #[arg(long)]
    pub disk_read_mbps: Option<f64>,
    /// Write requests (data writes and cache flushes: an fdatasync is at least one of each) per
    /// second to each system's device.
    #[arg(long)]
    pub disk_write_iops: Option<u64>,
}

/// The throttle a run asked for (0: that direction unlimited).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct DiskProfile {
    pub write_mbps: f64,
    pub read_mbps: f64,
    pub write_iops: u64,
}

impl DiskArgs {
    /// The profile, or `None` when the disk runs as it is.
    pub fn profile(&self) -> Result<Option<DiskProfile>> {
        let preset = self.disk_profile.map(|p| match p {
            DiskPreset::SdCard => DiskProfile {
                write_mbps: 30.0,
                read_mbps: 60.0,
                write_iops: 500,
            },
        });
        let flags = [self.disk_write_mbps, self.disk_read_mbps];
        if preset.is_none() && flags.iter().all(Option::is_none) && self.disk_write_iops.is_none() {
            return Ok(None);
        }
        if flags.iter().flatten().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err(BenchError::Usage("a disk's MB/s must be above 0".into()));
        }
        let base = preset.unwrap_or(DiskProfile {
            write_mbps: 0.0,
            read_mbps: 0.0,
            write_iops: 0,
        });
        Ok(Some(DiskProfile {
            write_mbps: self.disk_write_mbps.unwrap_or(base.write_mbps),
            read_mbps: self.disk_read_mbps.unwrap_or(base.read_mbps),
            write_iops: self.disk_write_iops.unwrap_or(base.write_iops),
        }))
    }
}

impl DiskProfile {
    pub fn limits(&self) -> IoLimits {
        IoLimits {
            write_bytes_per_sec: (self.write_mbps * 1e6) as u64,
            read_bytes_per_sec: (self.read_mbps * 1e6) as u64,
            write_iops: self.write_iops,
            read_iops: 0,
        }
    }
}

/// What the throttled device did, measured with dd on a fresh ext4 of its own.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub mechanism: String,
    /// 64 MiB in 1 MiB writes with O_DIRECT.
    pub direct_write_mbps: f64,
    /// 64 MiB written through the page cache, then one fdatasync (written back by the kernel).
    pub buffered_fdatasync_write_mbps: f64,
    /// The first file read back in 1 MiB reads with O_DIRECT.
    pub direct_read_mbps: f64,
    /// 4 KiB overwrites with O_DSYNC, one at a time: the mean time of one (a write + a flush).
    pub dsync_write_ms: f64,
}

const PROBE_BYTES: u64 = 64 << 20;
const DSYNC_WRITES: u64 = 200;

/// Measures `profile` on a throttled 1 GiB ext4 of its own (removed on return).
pub fn probe(profile: &DiskProfile) -> Result<Probe> {
    let fixture = Fixture::create(FsSpec::Ext4, 1 << 30)?;
    let mechanism = fixture.throttle(&profile.limits())?;
    let dir = fixture.mount_dir();
    let mib = (PROBE_BYTES >> 20).to_string();
    let (of_a, of_b, of_s) = (path_arg(dir, "a"), path_arg(dir, "b"), path_arg(dir, "s"));
    let direct = dd(&["if=/dev/zero", &of_a, "bs=1M", &count(&mib), "oflag=direct"])?;
    let buffered = dd(&[
        "if=/dev/zero",
        &of_b,
        "bs=1M",
        &count(&mib),
        "conv=fdatasync",
    ])?;
    let read = dd(&[&if_arg(dir, "a"), "of=/dev/null", "bs=1M", "iflag=direct"])?;
    let n = DSYNC_WRITES.to_string();
    dd(&["if=/dev/zero", &of_s, "bs=4k", &count(&n), "conv=fsync"])?;
    let dsync = dd(&[
        "if=/dev/zero",
        &of_s,
        "bs=4k",
        &count(&n),
        "conv=notrunc",
        "oflag=dsync",
    ])?;
    let mbps = |secs: f64| PROBE_BYTES as f64 / secs.max(1e-9) / 1e6;
    Ok(Probe {
        mechanism,
        direct_write_mbps: mbps(direct),
        buffered_fdatasync_write_mbps: mbps(buffered),
        direct_read_mbps: mbps(read),
        dsync_write_ms: dsync * 1e3 / DSYNC_WRITES as f64,
    })
}

fn path_arg(dir: &Path, name: &str) -> String {
    format!("of={}", dir.join(name).display())
}

fn if_arg(dir: &Path, name: &str) -> String {
    format!("if={}", dir.join(name).display())
}

fn count(n: &str) -> String {
    format!("count={n}")
}

/// Runs dd with `args`; its wall time in seconds.
fn dd(args: &[&str]) -> Result<f64> {
    let began = Instant::now();
    let output = Command::new("dd")
        .args(args)
        .arg("status=none")
        .output()
        .map_err(|e| BenchError::os("running dd", e))?;
    if !output.status.success() {
        return Err(BenchError::Run(format!(
            "dd {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(began.elapsed().as_secs_f64())
}
