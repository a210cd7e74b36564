//! What the engine reports about itself: enough to compute write amplification exactly, to see
//! where maintenance spends its time, and every limit beside its current value.
//!
//! Owns the counters and the timed state lock (`timed_mutex`); it imports no other room, so every
//! room may count.

pub(crate) mod timed_mutex;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::stats::timed_mutex::HoldTimes;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TierStats {
    pub devices: u64,
    /// The upper tier: readings in the log's indexes. The lower tier: the entries the LSM
    /// estimates it holds, each a block of up to 1,024 readings (lower/blocks/).
    pub records: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stats {
    /// Bytes the callers handed in: device + sensor + 8 (timestamp) + value, per record.
    pub user_bytes: u64,
    pub user_records: u64,
    /// Commit-log record bytes written (all kinds, headers included).
    pub log_bytes_written: u64,
    /// Bytes the log's group commits wrote as whole 4 KiB blocks (docs/FORMAT.md, "Whole
    /// blocks"): their records, the bytes of the first block before them written again, and
    /// the zeros after them to the block's end. Over `log_bytes_written`, what small group
    /// commits cost in block rewrites (a device writes a block once per flush, so two groups
    /// in one fdatasync may cost it less).
    #[cfg_attr(feature = "serde", serde(default))]
    pub log_block_bytes_written: u64,
    /// Bytes written to make segments: zero-fill of new ones, headers of recycled ones.
    pub log_preallocated_bytes: u64,
    /// Bytes the lower tier wrote itself: ingested runs, catalog batches, flushes,
    /// compactions, its own log.
    pub lower_bytes_written: u64,
    /// Log bytes of departed devices' readings, freed without writing anything but a DEPART
    /// record.
    pub reclaimed_bytes_without_write: u64,
    /// The upper tier: devices inside their management time with no reading in the lower tier
    /// yet; `records` and `bytes`: every reading in the log (of any device) and its record
    /// bytes.
    pub upper: TierStats,
    /// The lower tier: devices with a place in it; records and bytes are the LSM's own
    /// estimates (RocksDB: estimate-num-keys and live SST bytes; LevelDB reports no key count).
    pub lower: TierStats,
    /// Windows (runs) in the lower tier, their files' bytes and the bytes of them live devices
    /// still read.
    pub windows: u64,
    pub window_file_bytes: u64,
    pub window_live_bytes: u64,
    /// The bound consolidation keeps the windows of any one device under (a device's
    /// `DeviceInfo::lower_runs` is its count now).
    pub windows_per_device_max: u64,
    /// Window file bytes per live byte, in percent, and the bound (limits.rs).
    pub window_space_amplification_percent: u64,
    pub window_space_amplification_percent_max: u64,
    /// Memory held by the log's index (measured allocations + per-sensor bookkeeping).
    pub index_bytes: u64,
    pub index_bytes_max: u64,
    /// Segments whose readings left the log (passes), and of them those taken early (the log
    /// near its budget or the index over its cap).
    pub segments_aged: u64,
    pub early_passes: u64,
    /// Readings moved out of the log, and the bytes of the runs they made (keys + values).
    pub aged_records: u64,
    pub moved_bytes: u64,
    /// Passes that failed and were rolled back (their segment stays in the log and is taken
    /// again).
    pub pass_failures: u64,
    /// Devices consolidated (their windowed readings rewritten into a new window, or into the
    /// settled space once they are old), the bytes written for it (keys + values), and of those
    /// the bytes written into the settled space.
    pub consolidations: u64,
    pub consolidated_bytes: u64,
    pub consolidated_to_settled_bytes: u64,
    /// Windows dropped whole because no live device read them any more, and their files' bytes:
    /// what the lower tier reclaimed without writing anything.
    pub windows_dropped: u64,
    pub windows_dropped_bytes: u64,
    /// The settled space: its files' bytes, of them what the LSM estimates is live (LevelDB
    /// estimates none: both are its table bytes), and the deleted ranges reclaimed from its
    /// files (`LowerTier::reclaim`).
    pub settled_file_bytes: u64,
    pub settled_live_bytes: u64,
    pub settled_reclaims: u64,
    /// The lower tier as a whole: window files' live bytes + the settled space's live estimate,
    /// and the rest of its files' bytes (dead: departed, trimmed or consolidated readings not
    /// yet reclaimed).
    pub lower_live_bytes: u64,
    pub lower_dead_bytes: u64,
    /// Sealed segments whose management time ended but whose readings are still in the log, and
    /// their bytes: the maintenance debt.
    pub overdue_segments: u64,
    pub overdue_bytes: u64,
    pub departures: u64,
    /// TRIM records written (`Engine::trim_before` calls that had readings to delete).
    pub trims: u64,
    pub fdatasyncs: u64,
    pub group_commits: u64,
    /// Group writes that read the bytes of their first block before writing it whole: only
    /// the first write into a block this process did not write (once after open, when the log
    /// resumes mid-block). Every other group write reads nothing (`Segment::write_blocks`).
    pub log_head_reads: u64,
    pub live_segments: u64,
    /// Bytes of the log's files on disk (live segments + spares) and the budget they must stay in.
    pub log_bytes: u64,
    pub log_bytes_max: u64,
    /// Of `log_bytes`, spare segments kept for reuse.
    pub spare_segments_bytes: u64,
    pub segments_recycled: u64,
    pub segments_retired: u64,
    /// Writes that waited for log room, the total time they waited, and writes refused with
    /// `Error::NoSpace` after the bound.
    pub write_stalls: u64,
    pub write_stall_ms: u64,
    pub no_space_errors: u64,
    /// Writers parked for their commit that found, at a periodic re-check, work they had not
    /// been woken for (commit_log/waiters.rs): 0 unless the wake rules miss a case.
    pub commit_wakes_missed: u64,
    /// Encoded bytes queued for the next group commit, and the bound past which writers wait.
    pub pending_bytes: u64,
    pub pending_bytes_max: u64,
    /// Bytes of the groups committed (acknowledged) and not yet applied to the index by its own
    /// thread, and the bound past which writers wait (`INDEX_LAG_BYTES_MAX`).
    pub index_lag_bytes: u64,
    pub index_lag_bytes_max: u64,
    /// Reads (and listings, stats, passes) that waited for the index to apply an acknowledged
    /// write, and writers that waited for the index's lag to fall under its bound.
    pub index_waits: u64,
    pub index_lag_waits: u64,
    /// Devices in the mapping table, and the limit.
    pub devices: u64,
    pub devices_max: u64,
    /// Walks over the whole mapping table (device listings, `check`); maintenance never walks
    /// it, so its cost does not grow with the devices present.
    pub mapping_table_scans: u64,
    /// Values one run (one pass's window, one consolidation) holds in memory.
    pub window_bytes_max: u64,
    /// Bound on the log's dirty page cache in `none`/`periodic` mode (two write-back windows).
    pub log_dirty_bytes_max: u64,
    pub recovery_ms: u64,
    /// Log records replayed by the open, a PUTS record counted as its readings (as the PUT
    /// record per reading of segment format 2 was).
    pub recovered_records: u64,
    pub recovery_buffer_bytes_max: u64,
    /// Where recovery cut a torn tail, if it did: "file@offset (why)".
    pub recovery_cut: Option<String>,
    /// The last background maintenance failure, if any (maintenance retries every interval).
    pub last_maintenance_error: Option<String>,
    /// How long the state lock was held, and which lines held it over a millisecond.
    pub state_lock: HoldTimes,
    /// Maintenance passes and where their time went.
    pub passes: PassTimes,
    /// Bytes maintenance read from the log (to move readings out of it).
    pub maintenance_read_bytes: u64,
    /// What the lower tier did by itself: flushes, compactions, write stalls, and the level each
    /// ingested run landed in.
    pub lower_diagnostics: LowerDiagnostics,
}

impl Stats {
    /// (log + preallocation + lower-tier bytes) / user bytes. Device-level write amplification
    /// (file-system journal and metadata included) is what the benchmark measures.
    pub fn write_amplification(&self) -> f64 {
        if self.user_bytes == 0 {
            return 0.0;
        }
        (self.log_bytes_written + self.log_preallocated_bytes + self.lower_bytes_written) as f64
            / self.user_bytes as f64
    }
}

/// Maintenance passes, and the microseconds spent in each step of them (summed over passes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PassTimes {
    pub passes: u64,
    pub total_us: u64,
    pub max_us: u64,
    /// Choosing what to move, under the state lock.
    pub snapshot_us: u64,
    /// Reading it from the log.
    pub read_us: u64,
    /// Sorting it and writing the run, and handing the run to the lower tier.
    pub write_us: u64,
    /// The pass's bookkeeping in the lower tier (what moved where, what left).
    pub catalog_us: u64,
    /// Switching the in-memory state over, under the state lock.
    pub commit_us: u64,
    /// Retiring log segments and dropping dead runs.
    pub retire_us: u64,
    /// Mapping-table entries the passes looked at (a segment's holders and events, the devices
    /// a pass moved or consolidated): a pass costs what its segment holds, not how many devices
    /// exist (crates/engine/tests/pass_cost.rs).
    pub devices_visited: u64,
}

/// The lower tier's own work, from its statistics (zeros where it reports none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LowerDiagnostics {
    pub flush_write_bytes: u64,
    pub compaction_read_bytes: u64,
    pub compaction_write_bytes: u64,
    pub write_stall_us: u64,
    /// Files ingested per level (index = level): runs that land above the last level are
    /// rewritten by compaction later.
    pub ingested_files_by_level: Vec<u64>,
}

/// Counters updated without the state lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub user_bytes: AtomicU64,
    pub user_records: AtomicU64,
    pub log_bytes_written: AtomicU64,
    pub log_block_bytes_written: AtomicU64,
    pub log_preallocated_bytes: AtomicU64,
    pub reclaimed_bytes_without_write: AtomicU64,
    pub segments_aged: AtomicU64,
    pub early_passes: AtomicU64,
    pub pass_failures: AtomicU64,
    pub aged_records: AtomicU64,
    pub moved_bytes: AtomicU64,
    pub consolidations: AtomicU64,
    pub consolidated_bytes: AtomicU64,
    pub consolidated_to_settled_bytes: AtomicU64,
    pub windows_dropped: AtomicU64,
    pub windows_dropped_bytes: AtomicU64,
    pub settled_reclaims: AtomicU64,
    pub write_stalls: AtomicU64,
    pub write_stall_ms: AtomicU64,
    pub commit_wakes_missed: AtomicU64,
    pub no_space_errors: AtomicU64,
    pub segments_retired: AtomicU64,
    pub departures: AtomicU64,
    pub trims: AtomicU64,
    pub fdatasyncs: AtomicU64,
    pub group_commits: AtomicU64,
    pub log_head_reads: AtomicU64,
    pub index_waits: AtomicU64,
    pub index_lag_waits: AtomicU64,
    pub segments_recycled: AtomicU64,
    pub maintenance_read_bytes: AtomicU64,
    pub passes: AtomicU64,
    pub pass_us_total: AtomicU64,
    pub pass_us_max: AtomicU64,
    pub pass_snapshot_us: AtomicU64,
    pub pass_read_us: AtomicU64,
    pub pass_write_us: AtomicU64,
    pub pass_catalog_us: AtomicU64,
    pub pass_commit_us: AtomicU64,
    pub pass_retire_us: AtomicU64,
    pub pass_devices_visited: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
    /// Adds the microseconds since `since` to `counter`; returns now, the next step's start.
    pub fn add_us_since(counter: &AtomicU64, since: Instant) -> Instant {
        let now = Instant::now();
        Counters::add(counter, now.duration_since(since).as_micros() as u64);
        now
    }
    /// Counts one finished pass that began at `started`.
    pub fn pass_done(&self, started: Instant) {
        let us = started.elapsed().as_micros() as u64;
        Counters::add(&self.passes, 1);
        Counters::add(&self.pass_us_total, us);
        self.pass_us_max.fetch_max(us, Ordering::Relaxed);
    }
    pub fn pass_times(&self) -> PassTimes {
        PassTimes {
            passes: Counters::get(&self.passes),
            total_us: Counters::get(&self.pass_us_total),
            max_us: Counters::get(&self.pass_us_max),
            snapshot_us: Counters::get(&self.pass_snapshot_us),
            read_us: Counters::get(&self.pass_read_us),
            write_us: Counters::get(&self.pass_write_us),
            catalog_us: Counters::get(&self.pass_catalog_us),
            commit_us: Counters::get(&self.pass_commit_us),
            retire_us: Counters::get(&self.pass_retire_us),
            devices_visited: Counters::get(&self.pass_devices_visited),
        }
    }
}
