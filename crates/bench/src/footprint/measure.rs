//! One system's footprint: a fresh ext4 on its own loop device, the system on it, the stream
//! sent, and three counter reads — before ingest, right after it, and once settled — each after a
//! `sync` of the file system (so the bytes the page cache still held are counted where they were
//! written). With a warm-up, the stream's first half goes in and settles before the first read,
//! and every figure is of the second half: device bytes and roamkv's counters over it, on-disk
//! bytes as what the files grew by. Beside the device's counter: the bytes the files take (allocated blocks, `du`), and
//! for roamkv its own counters (`Stats`), which say where each byte went.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use roamkv_engine::Stats;
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::Result;
use crate::footprint::readback::{self, ReadBack};
use crate::footprint::stream::StreamSpec;
use crate::footprint::systems::{self, Running, Settings, System};

/// A phase's bytes: what the device was asked to write, what the files take at its end.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Phase {
    pub device_written_bytes: u64,
    pub on_disk_bytes: u64,
}

/// Where roamkv's written bytes went, by its own counters (cumulative at the settled point).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Breakdown {
    /// Commit-log records (every kind, headers included).
    pub log_record_bytes: u64,
    /// The whole 4 KiB blocks the log's group commits wrote (records, the block's earlier bytes
    /// again, padding), and the group commits.
    pub log_block_bytes: u64,
    pub group_commits: u64,
    /// Segment preparation: zero-fill of new segments, headers of recycled ones.
    pub segment_preparation_bytes: u64,
    /// The lower tier's own writes: ingested runs, catalog batches, flushes, compaction.
    pub lower_tier_bytes: u64,
    /// Of those, the readings moved out of the log (sorted runs) and consolidated.
    pub moved_bytes: u64,
    pub consolidated_bytes: u64,
    /// The caller's bytes (device + sensor + 8 + value per reading).
    pub user_bytes: u64,
    /// What the files hold at that point: the log's (live segments and the spares kept for
    /// reuse, preallocated whole), of them the spares, and the lower tier's (windows and the
    /// settled space).
    pub log_file_bytes: u64,
    pub spare_segments_bytes: u64,
    pub lower_file_bytes: u64,
}

impl Breakdown {
    /// What changed since `earlier`: the counters' bytes over the interval, and what the files
    /// grew by.
    fn since(self, earlier: &Breakdown) -> Breakdown {
        Breakdown {
            log_record_bytes: self
                .log_record_bytes
                .saturating_sub(earlier.log_record_bytes),
            log_block_bytes: self.log_block_bytes.saturating_sub(earlier.log_block_bytes),
            group_commits: self.group_commits.saturating_sub(earlier.group_commits),
            segment_preparation_bytes: self
                .segment_preparation_bytes
                .saturating_sub(earlier.segment_preparation_bytes),
            lower_tier_bytes: self
                .lower_tier_bytes
                .saturating_sub(earlier.lower_tier_bytes),
            moved_bytes: self.moved_bytes.saturating_sub(earlier.moved_bytes),
            consolidated_bytes: self
                .consolidated_bytes
                .saturating_sub(earlier.consolidated_bytes),
            user_bytes: self.user_bytes.saturating_sub(earlier.user_bytes),
            log_file_bytes: self.log_file_bytes.saturating_sub(earlier.log_file_bytes),
            spare_segments_bytes: self
                .spare_segments_bytes
                .saturating_sub(earlier.spare_segments_bytes),
            lower_file_bytes: self
                .lower_file_bytes
                .saturating_sub(earlier.lower_file_bytes),
        }
    }

    fn of(stats: &Stats) -> Breakdown {
        Breakdown {
            log_record_bytes: stats.log_bytes_written,
            log_block_bytes: stats.log_block_bytes_written,
            group_commits: stats.group_commits,
            segment_preparation_bytes: stats.log_preallocated_bytes,
            lower_tier_bytes: stats.lower_bytes_written,
            moved_bytes: stats.moved_bytes,
            consolidated_bytes: stats.consolidated_bytes,
            user_bytes: stats.user_bytes,
            log_file_bytes: stats.log_bytes,
            spare_segments_bytes: stats.spare_segments_bytes,
            lower_file_bytes: stats.window_file_bytes + stats.settled_file_bytes,
        }
    }
}

/// One system's measurement.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Footprint {
    pub system: System,
    /// The readings measured (with a warm-up, the second half's).
    pub readings: u64,
    /// The readings sent and settled before the counters began (`--warm-up`), else 0.
    pub warm_up_readings: u64,
    pub ingest_seconds: f64,
    pub readings_per_sec: f64,
    pub ingest: Phase,
    /// From the end of ingest to settled (device bytes of this phase alone).
    pub settle: Phase,
    pub settle_seconds: f64,
    pub settled_how: String,
    pub breakdown_after_ingest: Option<Breakdown>,
    pub breakdown_settled: Option<Breakdown>,
    pub read_back: ReadBack,
    pub mkfs: String,
}

impl Footprint {
    pub fn per_reading(&self, bytes: u64) -> f64 {
        bytes as f64 / self.readings.max(1) as f64
    }
    pub fn device_written_bytes(&self) -> u64 {
        self.ingest.device_written_bytes + self.settle.device_written_bytes
    }
}

/// Runs `system` through ingest, settling and the read-back on a file system of its own.
pub fn measure(
    system: System,
    spec: &StreamSpec,
    settings: &Settings,
    fs_bytes: u64,
    say: &dyn Fn(String),
) -> Result<Footprint> {
    let fixture = Fixture::create(FsSpec::Ext4, fs_bytes)?;
    if let Some(profile) = &settings.disk {
        fixture.throttle(&profile.limits())?;
    }
    let mkfs = fixture.mkfs_command().to_string();
    let running = systems::start(system, fixture, settings)?;
    let (measured, whole) = warm_up(&running, system, spec, settings, say)?;
    let start = counters(&running)?;
    // roamkv's counters run from the server's start: after a warm-up, read where they stand.
    let first = if settings.warm_up {
        running.engine_stats()?
    } else {
        None
    };
    let began = Instant::now();
    running.ingest(&measured, settings)?;
    let ingest_seconds = began.elapsed().as_secs_f64();
    say(format!(
        "{}: {} readings in {ingest_seconds:.1} s; settling",
        system.name(),
        measured.readings()
    ));
    let ingested = counters(&running)?;
    let stats_ingested = running.engine_stats()?;
    let began = Instant::now();
    let settled_how = running.settle(&measured, settings)?;
    let settle_seconds = began.elapsed().as_secs_f64();
    let settled = counters(&running)?;
    let stats_settled = running.engine_stats()?;
    say(format!(
        "{}: {settled_how}; reading every reading back",
        system.name()
    ));
    let read_back = read_back(system, &whole, running)?;
    // Without a warm-up the files are counted whole (a fresh directory's fixed costs, the
    // log's preallocated segments, are part of what the stream cost); after one, their growth.
    let baseline = if settings.warm_up {
        start.on_disk_bytes
    } else {
        0
    };
    let breakdown = |stats: Option<Stats>| {
        let now = Breakdown::of(stats.as_ref()?);
        Some(match &first {
            Some(first) => now.since(&Breakdown::of(first)),
            None => now,
        })
    };
    Ok(Footprint {
        system,
        readings: measured.readings(),
        warm_up_readings: whole.readings() - measured.readings(),
        ingest_seconds,
        readings_per_sec: measured.readings() as f64 / ingest_seconds.max(1e-9),
        ingest: phase(&start, &ingested, baseline),
        settle: phase(&ingested, &settled, baseline),
        settle_seconds,
        settled_how,
        breakdown_after_ingest: breakdown(stats_ingested),
        breakdown_settled: breakdown(stats_settled),
        read_back,
        mkfs,
    })
}

/// With a warm-up, sends and settles the stream as asked (the first half of one twice as long)
/// and returns (the second half, to measure; the whole, to read back); else the stream twice.
fn warm_up(
    running: &Running,
    system: System,
    spec: &StreamSpec,
    settings: &Settings,
    say: &dyn Fn(String),
) -> Result<(StreamSpec, StreamSpec)> {
    if !settings.warm_up {
        return Ok((spec.clone(), spec.clone()));
    }
    say(format!(
        "{}: warm-up, {} readings; settling",
        system.name(),
        spec.readings()
    ));
    running.ingest(spec, settings)?;
    running.settle(spec, settings)?;
    let whole = StreamSpec {
        seconds: spec.seconds * 2,
        ..spec.clone()
    };
    let measured = StreamSpec {
        send_from_second: spec.seconds,
        ..whole.clone()
    };
    Ok((measured, whole))
}

/// The device's counters and the files' allocated bytes, read between two syncs.
struct Counters {
    device: DevStat,
    on_disk_bytes: u64,
}

fn counters(running: &Running) -> Result<Counters> {
    let fixture = running.fixture();
    fixture.quiesce()?;
    let device = DevStat::read(fixture.device_name())?;
    let on_disk_bytes = allocated_bytes(fixture.mount_dir());
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    Ok(Counters {
        device,
        on_disk_bytes,
    })
}

fn phase(earlier: &Counters, later: &Counters, on_disk_baseline: u64) -> Phase {
    Phase {
        device_written_bytes: later.device.delta(&earlier.device).bytes_written(),
        on_disk_bytes: later.on_disk_bytes.saturating_sub(on_disk_baseline),
    }
}

/// Blocks allocated to the files under `dir` (st_blocks x 512: what `du` counts), lost+found
/// and the file system's own metadata aside.
fn allocated_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name() != "lost+found")
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => m.blocks() * 512 + allocated_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Reads every reading back: peers and RocksDB while they run, roamkv from its data directory
/// once the server has stopped; then the system is stopped and its file system removed.
fn read_back(system: System, spec: &StreamSpec, running: Running) -> Result<ReadBack> {
    let check = match (system, running.address(), running.rocks()) {
        (System::Rocksdb, _, Some(engine)) => Some(readback::rocksdb(spec, engine)?),
        (System::Questdb, Some(addr), _) => Some(readback::questdb(spec, addr)?),
        (System::Influxdb, Some(addr), _) => Some(readback::influxdb(spec, addr)?),
        _ => None,
    };
    let fixture = running.stop()?;
    match check {
        Some(check) => Ok(check),
        None => readback::roamkv(
            spec,
            &fixture.mount_dir().join("data"),
            system == System::RoamkvEdgex,
        ),
    }
}
