//! The time series: every second the worker ticks, a point of throughput, device traffic, bytes
//! on disk against live bytes, the engine's own counters and memory. Kept apart from the run
//! loop because it is the part that reads the machine (device counters, statvfs, the cgroup).

use std::path::{Path, PathBuf};
use std::time::Instant;

use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::Fixture;

use crate::mobility::engines::EngineKind;
use crate::mobility::runner::RunningWorker;
use crate::mobility::worker::Tick;

use super::results::Point;

/// One engine's time series, a point per tick of its worker.
pub(super) struct Series<'a> {
    pub(super) kind: EngineKind,
    pub(super) label: &'a str,
    pub(super) fixture: &'a Fixture,
    pub(super) base_used: u64,
    pub(super) before: DevStat,
    pub(super) cgroup: CgroupReader,
    pub(super) bar: indicatif::ProgressBar,
    pub(super) points: Vec<Point>,
    pub(super) previous: Option<(Tick, DevStat, Instant)>,
    /// The tick just before the measured phase began (the nearest to its start).
    pub(super) first_measured: Option<Tick>,
    /// When the next progress line is due, in seconds of the run (only off a terminal).
    pub(super) next_line_s: u64,
}

/// Seconds between progress lines when the bar cannot be drawn.
const PROGRESS_LINE_S: u64 = 60;

impl Series<'_> {
    /// A line the worker printed: a tick becomes a point, and the progress bar moves.
    pub(super) fn tick(&mut self, line: &str) {
        let Ok(tick) = serde_json::from_str::<Tick>(line) else {
            return;
        };
        let now = Instant::now();
        let device = DevStat::read(self.fixture.device_name()).unwrap_or(self.before);
        let point = to_point(
            self.kind,
            self.label,
            &tick,
            self.previous.as_ref(),
            &device,
            used_bytes(self.fixture.mount_dir()).saturating_sub(self.base_used),
            self.cgroup.usage_bytes(),
        );
        let message = format!(
            "{}: {:.0} ops/s, disk {:.2} GB (live {:.2} GB), mem {:.0} MiB",
            tick.phase,
            point.ops_per_sec,
            point.space_bytes as f64 / 1e9,
            point.live_user_bytes as f64 / 1e9,
            point.cgroup_bytes as f64 / 1048576.0
        );
        if self.bar.is_hidden() && tick.t_s >= self.next_line_s as f64 {
            // Not a terminal (a log file, CI): a line a minute instead of the bar.
            eprintln!(
                "{:>14} {:.0}/{} s  {message}",
                self.label,
                tick.t_s,
                self.bar.length().unwrap_or(0)
            );
            self.next_line_s += PROGRESS_LINE_S;
        }
        self.bar.set_position(tick.t_s as u64);
        self.bar.set_message(message);
        self.points.push(point);
        if tick.phase == "measure" && self.first_measured.is_none() {
            self.first_measured = self.previous.as_ref().map(|(t, _, _)| t.clone());
        }
        self.previous = Some((tick, device, now));
    }
}

/// Reads the worker's cgroup usage while `finish` owns the worker.
pub(super) struct CgroupReader {
    usage_file: Option<PathBuf>,
}

impl CgroupReader {
    pub(super) fn new(worker: &RunningWorker) -> CgroupReader {
        CgroupReader {
            usage_file: worker.cgroup_usage_path(),
        }
    }

    pub(super) fn usage_bytes(&self) -> u64 {
        self.usage_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }
}

pub(super) fn to_point(
    kind: EngineKind,
    label: &str,
    tick: &Tick,
    previous: Option<&(Tick, DevStat, Instant)>,
    device: &DevStat,
    space_bytes: u64,
    cgroup_bytes: u64,
) -> Point {
    let field = |name: &str| tick.engine.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    let mut point = Point::default();
    if let Some((p, d, _)) = previous {
        let dt = (tick.t_s - p.t_s).max(1e-3);
        let rate = |name: &str| engine_delta(tick, p, name) as f64 / dt;
        let delta = device.delta(d);
        point.ops_per_sec =
            (tick.puts + tick.queries).saturating_sub(p.puts + p.queries) as f64 / dt;
        point.device_write_bytes_per_sec = delta.bytes_written() as f64 / dt;
        point.device_read_bytes_per_sec = delta.bytes_read() as f64 / dt;
        point.maintenance_read_bytes_per_sec = rate("maintenance_read_bytes");
        point.flush_write_bytes_per_sec = rate("lower_flush_write_bytes");
        point.compaction_write_bytes_per_sec = rate("lower_compaction_write_bytes");
        point.lower_reclaim_bytes_per_sec = rate("windows_dropped_bytes");
        point.consolidation_write_bytes_per_sec = rate("consolidated_bytes");
        let holds = lock_hold_times(&tick.engine).since(&lock_hold_times(&p.engine));
        point.lock_hold_p99_us = holds.percentile_ns(0.99) as f64 / 1e3;
        point.lock_hold_max_us = holds.max_bucket_ns() as f64 / 1e3;
    }
    let (lower_bytes, backlog_bytes) = match kind {
        EngineKind::Rocksdb => (field("live_sst_bytes"), field("pending_compaction_bytes")),
        _ => (field("lower_bytes"), field("overdue_bytes")),
    };
    Point {
        engine: label.into(),
        puts: tick.puts,
        t_s: tick.t_s,
        phase: tick.phase.clone(),
        space_bytes,
        live_user_bytes: tick.live_user_bytes,
        upper_bytes: field("upper_bytes"),
        lower_bytes,
        log_bytes: field("log_bytes"),
        log_bytes_max: field("log_bytes_max"),
        backlog_bytes,
        lower_live_bytes: field("lower_live_bytes"),
        lower_dead_bytes: field("lower_dead_bytes"),
        rss_bytes: tick.rss_bytes,
        cgroup_bytes,
        ..point
    }
}

/// A cumulative counter of the engine's sample, from `earlier` to `later`.
pub(super) fn engine_delta(later: &Tick, earlier: &Tick, name: &str) -> u64 {
    let field = |t: &Tick| t.engine.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    field(later).saturating_sub(field(earlier))
}

/// The state lock's hold times as the roamkv sample carries them (empty for other engines).
pub(super) fn lock_hold_times(sample: &serde_json::Value) -> roamkv_engine::HoldTimes {
    let field = |name: &str| sample.get(name).and_then(|v| v.as_u64()).unwrap_or(0);
    roamkv_engine::HoldTimes {
        holds: field("lock_holds"),
        total_ns: field("lock_hold_ns_total"),
        max_ns: field("lock_hold_ns_max"),
        buckets: sample
            .get("lock_buckets")
            .and_then(|b| serde_json::from_value(b.clone()).ok())
            .unwrap_or_default(),
        long_holds: sample
            .get("lock_long_holds")
            .and_then(|b| serde_json::from_value(b.clone()).ok())
            .unwrap_or_default(),
    }
}

/// Bytes used on the file system holding `dir` (statvfs: blocks - free blocks).
pub(super) fn used_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 0;
    };
    // SAFETY: statvfs is a plain C struct of integers: all-zero bytes are a valid value.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs(3) with a valid C string and a struct we own.
    if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } != 0 {
        return 0;
    }
    (vfs.f_blocks - vfs.f_bfree) as u64 * vfs.f_frsize as u64
}
