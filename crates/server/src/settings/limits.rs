//! The bounds of what the server takes: request sizes and counts, timeouts and intervals,
//! retention's default age, and what the engine may take of the disk and of memory.

use std::path::Path;
use std::time::Duration;

use super::args::{FileConfig, ServeArgs};

/// Request limits, each at least 1.
pub(super) struct Limits {
    pub(super) body_bytes_max: usize,
    pub(super) batch_readings_max: usize,
    pub(super) concurrent_requests_max: usize,
    pub(super) query_readings_max: usize,
    pub(super) max_result_count: usize,
}

impl Limits {
    pub(super) fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Limits, String> {
        let positive =
            |name: &str, value: Option<usize>, default: usize| match value.unwrap_or(default) {
                0 => Err(format!("{name} must be at least 1")),
                n => Ok(n),
            };
        Ok(Limits {
            body_bytes_max: positive(
                "body_bytes_max",
                args.body_bytes_max.or(file.body_bytes_max),
                4 << 20,
            )?,
            batch_readings_max: positive(
                "batch_readings_max",
                args.batch_readings_max.or(file.batch_readings_max),
                10_000,
            )?
            // One record of an event's batch is its entry in the index of event ids.
            .min(roamkv_engine::limits::BATCH_RECORDS_MAX - 1),
            concurrent_requests_max: positive(
                "concurrent_requests_max",
                args.concurrent_requests_max
                    .or(file.concurrent_requests_max),
                256,
            )?,
            query_readings_max: positive(
                "query_readings_max",
                args.query_readings_max.or(file.query_readings_max),
                200_000,
            )?,
            max_result_count: positive(
                "max_result_count",
                args.max_result_count.or(file.max_result_count),
                1024,
            )?,
        })
    }
}

/// The longest a small group of writes waits for company under `sync` (`--commit-delay-us`,
/// ingest/writers.rs): 2 ms, the clients' round trip on this project's machine; at most
/// `COMMIT_DELAY_US_MAX`, beyond which it is a stall, not a wait.
pub(super) fn commit_delay(args: &ServeArgs, file: &FileConfig) -> Result<Duration, String> {
    match args
        .commit_delay_us
        .or(file.commit_delay_us)
        .unwrap_or(2_000)
    {
        us if us > COMMIT_DELAY_US_MAX => Err(format!(
            "commit_delay_us must be at most {COMMIT_DELAY_US_MAX} (100 ms), not {us}"
        )),
        us => Ok(Duration::from_micros(us)),
    }
}

const COMMIT_DELAY_US_MAX: u64 = 100_000;

/// Timeouts and intervals, each at least one second.
pub(super) struct Timeouts {
    pub(super) header: Duration,
    pub(super) body: Duration,
    pub(super) drain: Duration,
    pub(super) retention_interval: Duration,
}

impl Timeouts {
    pub(super) fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Timeouts, String> {
        let seconds = |name: &str, value: Option<u64>, default: u64| match value.unwrap_or(default)
        {
            0 => Err(format!("{name} must be at least 1 second")),
            n => Ok(Duration::from_secs(n)),
        };
        Ok(Timeouts {
            header: seconds(
                "header_timeout_s",
                args.header_timeout_s.or(file.header_timeout_s),
                10,
            )?,
            body: seconds(
                "body_timeout_s",
                args.body_timeout_s.or(file.body_timeout_s),
                30,
            )?,
            drain: seconds(
                "drain_timeout_s",
                args.drain_timeout_s.or(file.drain_timeout_s),
                30,
            )?,
            retention_interval: seconds(
                "retention_interval_s",
                args.retention_interval_s.or(file.retention_interval_s),
                60,
            )?,
        })
    }
}

/// `--retention-default-h` in milliseconds; 0 (or not given) is none.
pub(super) fn retention_default_ms(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<u64>, String> {
    match args
        .retention_default_h
        .or(file.retention_default_h)
        .unwrap_or(0)
    {
        0 => Ok(None),
        // Past ~1000 years no reading has a timestamp old enough to go; refuse it as a typo.
        h if h > 24 * 365 * 1000 => Err(format!(
            "retention_default_h {h} is more than 1000 years (0 keeps readings until deleted)"
        )),
        h => Ok(Some(h * 3_600_000)),
    }
}

/// A backup's read rate by default, MiB/s: a gateway's eMMC or SSD reads 100-500 MB/s, and a
/// backup at full speed took 61 % of ingest on the 2-core benchmark machine
/// (docs/BENCHMARKS.md, "Backup during ingest"); at this rate a nightly backup of 10 GiB takes
/// 80 s.
pub const BACKUP_RATE_MIB_DEFAULT: u64 = 128;

/// An export's output rate while ingest runs by default, MiB/s (docs/BENCHMARKS.md, "Ingest
/// during exports, paced"): unpaced, back-to-back Parquet exports of everything took 40 % of
/// full ingest on the 2-core benchmark machine; at 2 MiB/s (~500,000 readings/s of Parquet
/// with 16-byte values) an export of a day of 1,000 readings/s (86 M readings) takes ~3 min.
pub const EXPORT_RATE_MIB_DEFAULT: u64 = 2;

/// `--backup-rate-mib` in bytes per second; 0: no limit.
pub(super) fn backup_bytes_per_sec(args: &ServeArgs, file: &FileConfig) -> Result<u64, String> {
    let mib = args
        .backup_rate_mib
        .or(file.backup_rate_mib)
        .unwrap_or(BACKUP_RATE_MIB_DEFAULT);
    mib.checked_mul(1 << 20)
        .ok_or_else(|| format!("backup_rate_mib {mib} MiB/s is too large"))
}

/// What an export writes per second while ingest runs (`--export-rate-mib`; 0: no limit).
pub(super) fn export_bytes_per_sec(args: &ServeArgs, file: &FileConfig) -> Result<u64, String> {
    let mib = args
        .export_rate_mib
        .or(file.export_rate_mib)
        .unwrap_or(EXPORT_RATE_MIB_DEFAULT);
    mib.checked_mul(1 << 20)
        .ok_or_else(|| format!("export_rate_mib {mib} MiB/s is too large"))
}

/// The defaults are sized for a gateway with 2-4 GB of RAM and 8-32 GB of eMMC (a Raspberry
/// Pi 4 or CM4 with 16 GB, EdgeX's usual class of box), not for the benchmark machine the
/// engine's own defaults assume (a 45 GiB log): a log of 1 GiB holds one 60 s management time
/// of ingest up to ~17 MiB/s, and when it fills, maintenance settles devices early rather than
/// refusing writes. Memory: at most ~200 MiB for the index and the lower tier together.
pub const SEGMENT_MIB_DEFAULT: u64 = 8;
pub const LOG_BUDGET_MIB_DEFAULT: u64 = 1024;
pub const INDEX_MEMORY_MIB_DEFAULT: u64 = 128;
pub const LOWER_MEMORY_MIB_DEFAULT: u64 = 64;

/// What the engine may take of the disk and of memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub segment_bytes: u64,
    /// The log's space budget (`Options::log_bytes_max`).
    pub log_budget_bytes: u64,
    pub index_memory_bytes: u64,
    pub lower_memory_bytes: u64,
}

impl Sizes {
    /// Each size in MiB, at least 1; the segment within the engine's bounds; the default log
    /// budget at most half the free space where the data goes (a budget the disk cannot hold
    /// would end in ENOSPC instead of early settling).
    pub(super) fn resolve(
        args: &ServeArgs,
        file: &FileConfig,
        data: &Path,
    ) -> Result<Sizes, String> {
        let mib = |name: &str, value: Option<u64>, default: u64| -> Result<u64, String> {
            match value.unwrap_or(default) {
                0 => Err(format!("{name} must be at least 1 (MiB)")),
                n => n
                    .checked_mul(1 << 20)
                    .ok_or_else(|| format!("{name} {n} MiB is too large")),
            }
        };
        let segment_bytes = mib(
            "segment_mib",
            args.segment_mib.or(file.segment_mib),
            SEGMENT_MIB_DEFAULT,
        )?;
        let segment_range =
            roamkv_engine::limits::SEGMENT_BYTES_MIN..=roamkv_engine::limits::SEGMENT_BYTES_MAX;
        if !segment_range.contains(&segment_bytes) {
            return Err(format!(
                "segment_mib must be between {} and {}",
                segment_range.start() >> 20,
                segment_range.end() >> 20
            ));
        }
        let log_budget_bytes = match args.log_budget_mib.or(file.log_budget_mib) {
            Some(set) => mib("log_budget_mib", Some(set), 0)?,
            None => {
                let free = free_bytes_at(data).unwrap_or(u64::MAX);
                (LOG_BUDGET_MIB_DEFAULT << 20)
                    .min(free / 2)
                    .max(roamkv_engine::limits::LOG_SEGMENTS_MIN * segment_bytes)
            }
        };
        Ok(Sizes {
            segment_bytes,
            log_budget_bytes,
            index_memory_bytes: mib(
                "index_memory_mib",
                args.index_memory_mib.or(file.index_memory_mib),
                INDEX_MEMORY_MIB_DEFAULT,
            )?,
            lower_memory_bytes: mib(
                "lower_memory_mib",
                args.lower_memory_mib.or(file.lower_memory_mib),
                LOWER_MEMORY_MIB_DEFAULT,
            )?,
        })
    }
}

/// Bytes free for an unprivileged file at `path`, or at its nearest existing ancestor (the data
/// directory is created at open, after the settings are resolved): the engine's own statvfs.
pub(super) fn free_bytes_at(path: &Path) -> Option<u64> {
    use roamkv_engine::storage::{PlainFiles, Storage};
    let existing = path.ancestors().find(|p| p.exists())?;
    PlainFiles.free_bytes(existing).ok()
}
