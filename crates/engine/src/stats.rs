//! What the engine reports about itself: enough to compute write amplification exactly.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierStats {
    pub devices: u64,
    pub records: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Bytes the callers handed in: device + sensor + 8 (timestamp) + value, per record.
    pub user_bytes: u64,
    pub user_records: u64,
    /// Commit-log record bytes written (all kinds, headers included).
    pub log_bytes_written: u64,
    /// Bytes written to make segments: zero-fill of new ones, headers of recycled ones.
    pub log_preallocated_bytes: u64,
    /// Bytes the lower tier wrote itself: ingested runs, flushes, compactions, its own log.
    pub lower_bytes_written: u64,
    /// Upper-tier bytes of departed devices, freed without writing anything but a DEPART record.
    pub reclaimed_bytes_without_write: u64,
    pub upper: TierStats,
    /// Devices exact; records and bytes are the LSM's own estimates (RocksDB: estimate-num-keys
    /// and live SST bytes; LevelDB reports no key count).
    pub lower: TierStats,
    /// Memory held by the upper-tier index (measured allocations + per-sensor bookkeeping).
    pub index_bytes: u64,
    pub index_bytes_max: u64,
    pub migrations: u64,
    /// Of `migrations`, devices settled before their management time ended: the log was near
    /// its budget (or the index near its cap).
    pub early_migrations: u64,
    pub migrated_records: u64,
    /// Migration passes that failed and were rolled back (their devices stay in the upper tier
    /// and are retried).
    pub migration_failures: u64,
    /// Upper-tier devices whose management time has ended but that have not settled yet, and
    /// their record bytes: the maintenance debt.
    pub migration_backlog_devices: u64,
    pub migration_backlog_bytes: u64,
    pub departures: u64,
    /// TRIM records written (`Engine::trim_before` calls that had readings to delete).
    pub trims: u64,
    pub fdatasyncs: u64,
    pub group_commits: u64,
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
    /// Encoded bytes queued for the next group commit, and the bound past which writers wait.
    pub pending_bytes: u64,
    pub pending_bytes_max: u64,
    /// Devices in the mapping table (upper and settled), and the limit.
    pub devices: u64,
    pub devices_max: u64,
    /// Values one migration pass may hold in memory.
    pub migration_run_bytes_max: u64,
    /// Bound on the log's dirty page cache in `none`/`periodic` mode (two write-back windows).
    pub log_dirty_bytes_max: u64,
    /// Lower-tier persists (memtable flushes) made so that segments could retire.
    pub lower_persists: u64,
    pub recovery_ms: u64,
    pub recovered_records: u64,
    pub recovery_buffer_bytes_max: u64,
    /// Where recovery cut a torn tail, if it did: "file@offset".
    pub recovery_cut: Option<String>,
    /// The last background maintenance failure, if any (maintenance retries every interval).
    pub last_maintenance_error: Option<String>,
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

/// Counters updated without the state lock.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub user_bytes: AtomicU64,
    pub user_records: AtomicU64,
    pub log_bytes_written: AtomicU64,
    pub log_preallocated_bytes: AtomicU64,
    pub reclaimed_bytes_without_write: AtomicU64,
    pub migrations: AtomicU64,
    pub early_migrations: AtomicU64,
    pub migration_failures: AtomicU64,
    pub migrated_records: AtomicU64,
    pub write_stalls: AtomicU64,
    pub write_stall_ms: AtomicU64,
    pub no_space_errors: AtomicU64,
    pub segments_retired: AtomicU64,
    pub lower_persists: AtomicU64,
    pub departures: AtomicU64,
    pub trims: AtomicU64,
    pub fdatasyncs: AtomicU64,
    pub group_commits: AtomicU64,
    pub segments_recycled: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
