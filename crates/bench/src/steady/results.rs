//! What a steady run records: a point per second of each engine (timeseries.csv), each engine's
//! run (results.json) and its diagnosis. Types only, so that sampling, the verdict and the
//! reports share them without importing one another.

/// The label of roamkv's run with no device staying (`--with-log-only`).
pub const LOG_ONLY_LABEL: &str = "roamkv-log-only";

/// One second of one engine's run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Point {
    /// The run's label (SteadyRun::engine).
    pub engine: String,
    /// Cumulative puts since the worker started.
    pub puts: u64,
    pub t_s: f64,
    pub phase: String,
    pub ops_per_sec: f64,
    pub device_write_bytes_per_sec: f64,
    /// Bytes the file system has allocated beyond what it held right after mkfs.
    pub space_bytes: u64,
    pub live_user_bytes: u64,
    /// roamkv: bytes of upper-tier records, the lower tier's size, the log's files and budget,
    /// the maintenance debt (overdue log bytes). RocksDB: live SST bytes as `lower_bytes`, pending compaction
    /// bytes as the backlog.
    pub upper_bytes: u64,
    pub lower_bytes: u64,
    pub log_bytes: u64,
    pub log_bytes_max: u64,
    pub backlog_bytes: u64,
    /// roamkv: the lower tier's live bytes (window files' live bytes + the settled space's live
    /// estimate) and the rest of its files (dead: not reclaimed yet), and the rates at which it
    /// reclaims (window files dropped whole) and rewrites (consolidation) per second.
    pub lower_live_bytes: u64,
    pub lower_dead_bytes: u64,
    pub lower_reclaim_bytes_per_sec: f64,
    pub consolidation_write_bytes_per_sec: f64,
    pub rss_bytes: u64,
    pub cgroup_bytes: u64,
    /// What the device read, and of it what maintenance read from the log (roamkv).
    pub device_read_bytes_per_sec: f64,
    pub maintenance_read_bytes_per_sec: f64,
    /// The lower tier's own writes (RocksDB statistics; roamkv's lower tier and the baseline).
    pub flush_write_bytes_per_sec: f64,
    pub compaction_write_bytes_per_sec: f64,
    /// roamkv: the state lock's longest hold in this second (a histogram bucket's bound) and
    /// its 99th percentile.
    pub lock_hold_p99_us: f64,
    pub lock_hold_max_us: f64,
}

/// One engine's long run, as results.json lists it.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SteadyRun {
    /// The engine, with its thread count when threads are swept (`roamkv 4t`).
    pub engine: String,
    pub engine_kind: String,
    pub depart_probability: f64,
    /// Whether the worker ran inside its memory cgroup (if not, the page cache was unbounded).
    pub memory_capped: bool,
    pub durability: String,
    pub threads: usize,
    pub completed: bool,
    pub failure: Option<String>,
    /// Readings + queries per second over the measured phase.
    pub ops_per_sec: f64,
    pub write_amplification: f64,
    pub space_bytes_end: u64,
    pub space_bytes_max: u64,
    pub live_user_bytes_end: u64,
    pub log_budget_bytes: Option<u64>,
    /// roamkv: seconds in which bytes on disk exceeded 1.3 x live user bytes + the log budget.
    pub space_bound_violations: Option<u64>,
    /// Least-squares slope of bytes on disk over the second half of the measured phase: ~0 when
    /// space is flat. Also as a share of the mean bytes on disk in that half.
    pub space_trend_bytes_per_min: f64,
    pub space_trend_percent_per_min: f64,
    /// roamkv: seconds in which the lower tier's files exceeded their bound (1.5 x their live
    /// bytes, past 64 MiB dead: limits.rs), and the most dead bytes it held in any second.
    pub lower_bound_violations: Option<u64>,
    pub lower_dead_bytes_max: Option<u64>,
    /// Why the run's space failed, if it did: a trend over `SPACE_TREND_PERCENT_PER_MIN_MAX`,
    /// or seconds over a bound.
    pub space_failure: Option<String>,
    pub memory_bytes_max: u64,
    pub memory_limit_bytes: u64,
    pub put_p99_us: u64,
    pub query_p50_us: u64,
    pub query_p99_us: u64,
    /// CPU time of the worker process (all its threads, user + system) per reading or query of
    /// the measured phase, and the cores it kept busy on average: set against the machine's
    /// cores (`Ceilings::cpus`), the CPU ceiling.
    pub cpu_us_per_op: f64,
    pub cpu_cores: f64,
    pub queries: u64,
    pub user_bytes: u64,
    pub device_bytes_written: u64,
    pub read_checks: u64,
    pub read_check_failures: u64,
    pub config: String,
    pub diagnosis: Diagnosis,
}

/// Where the measured phase's work went: what the device read beside what it wrote, the lower
/// tier's own writes, where ingested runs landed, the state lock, the maintenance passes.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Diagnosis {
    pub device_bytes_read: u64,
    /// Device bytes read / device bytes written.
    pub read_write_ratio: f64,
    /// roamkv: bytes maintenance read from the log, and per user byte.
    pub maintenance_read_bytes: u64,
    pub maintenance_read_per_user_byte: f64,
    pub flush_write_bytes: u64,
    pub compaction_read_bytes: u64,
    pub compaction_write_bytes: u64,
    pub lower_write_stall_us: u64,
    /// roamkv: group commits, fdatasyncs of the log, and writes that read their first block
    /// back before writing it whole (at most once after open: docs/FORMAT.md, "Whole blocks").
    pub group_commits: u64,
    pub fdatasyncs: u64,
    pub log_head_reads: u64,
    /// roamkv: files ingested per level over the whole run (index = level).
    pub ingested_files_by_level: Vec<u64>,
    pub lock_holds: u64,
    pub lock_hold_p50_us: f64,
    pub lock_hold_p99_us: f64,
    pub lock_hold_p999_us: f64,
    /// Bound of the longest hold in the measured phase (its histogram bucket's upper bound).
    pub lock_hold_max_us: f64,
    /// Share of wall time the lock was held.
    pub lock_held_share: f64,
    /// Call sites that held the lock over 1 ms (whole run): "file:line holds max_us".
    pub lock_long_holds: Vec<String>,
    pub passes: u64,
    pub pass_ms_mean: f64,
    pub pass_ms_max: f64,
    /// Share of pass time per step: snapshot, read, write, catalog, commit, retire.
    pub pass_step_shares: Vec<(String, f64)>,
    pub put_p50_us: u64,
    pub put_p999_us: u64,
}
