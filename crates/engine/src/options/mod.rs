//! Engine options, with their defaults and what each costs.
//!
//! Also the other things a caller or a test plugs in: the clock (`clock`), the fail points
//! (`failpoints`), and how a background copy yields to ingest (`background`: its thread's
//! priority, its rate). It holds values and acts on nothing: it may not touch the state, the log's
//! contents or the lower tier.

pub mod background;
pub(crate) mod clock;
pub(crate) mod failpoints;

use std::sync::Arc;

use crate::commit_log::storage::{PlainFiles, Storage};
use crate::dir::LowerTierKind;
use crate::model::error::{Error, Result};
use crate::model::limits;
use crate::options::clock::{Clock, SystemClock};
use crate::options::failpoints::FailPoints;

/// When a write is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After the group's fdatasync: survives power loss. The default.
    #[default]
    Sync,
    /// After the write reaches the OS; a background thread fdatasyncs every `interval_ms`.
    /// Survives a process crash at once, power loss after at most `interval_ms`.
    Periodic { interval_ms: u64 },
    /// After the write reaches the OS; synced only on close. Survives a process crash.
    None,
}

impl Durability {
    /// Parses "sync", "none", "periodic" (100 ms) or "periodic:MS".
    pub fn parse(text: &str) -> Option<Durability> {
        match text {
            "sync" => Some(Durability::Sync),
            "none" => Some(Durability::None),
            "periodic" => Some(Durability::Periodic { interval_ms: 100 }),
            _ => {
                let ms = text
                    .strip_prefix("periodic:")
                    .or_else(|| text.strip_prefix("periodic("))?;
                let ms = ms.trim_end_matches(')').trim_end_matches("ms");
                ms.parse()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(|interval_ms| Durability::Periodic { interval_ms })
            }
        }
    }
}

/// When readings leave the log (docs/ENGINE.md, "Leaving the log"; each rule's write
/// amplification floor is there too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoveRule {
    /// A segment's readings leave the log one management time after it was sealed (so a reading
    /// leaves about one management time after it was written), if its device is still here; or
    /// earlier, when the log nears its budget or the index its cap. The default.
    #[default]
    AtManagementTime,
    /// Only when the log nears its budget or the index its cap: the fewest bytes moved (devices
    /// that leave within the budget's span cost nothing), the longest recovery.
    Lazy,
}

impl MoveRule {
    pub fn parse(text: &str) -> Option<MoveRule> {
        match text {
            "management-time" => Some(MoveRule::AtManagementTime),
            "lazy" => Some(MoveRule::Lazy),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub struct Options {
    pub durability: Durability,
    /// How long readings stay in the log before they move to the lower tier (if their device
    /// is still here); a new device is in the upper tier this long.
    pub management_time_ms: u64,
    /// When readings leave the log.
    pub move_rule: MoveRule,
    /// Size of each preallocated log segment. Space returns in units of segments.
    pub segment_bytes: u64,
    /// Cap on the log's index memory; above it the oldest segments leave the log early and
    /// writers wait for that (back-pressure).
    pub index_bytes_max: u64,
    /// The log budget: bytes the upper tier's segment files (live and spare) may occupy.
    /// `None` derives it at open: two management times of ingest at the engine's peak rate,
    /// capped at half the file system's free space (limits.rs). Near it the engine retires,
    /// then settles devices early, then stalls writers (`write_stall_ms_max`), then fails writes
    /// with `Error::NoSpace` until space returns.
    pub log_bytes_max: Option<u64>,
    /// How long a write may wait for log space before it fails with `Error::NoSpace`.
    pub write_stall_ms_max: u64,
    /// `None`/`Periodic` durability: start write-back of the log every this many bytes, so dirty
    /// log pages stay bounded (RocksDB's bytes_per_sync). 0 turns it off.
    pub log_writeback_bytes: u64,
    /// Devices the mapping table may hold; one more fails with `Error::TooManyDevices`.
    pub devices_max: u64,
    /// Lower tier for a new data directory. An existing directory keeps the one it was made
    /// with (recorded in its ROAMKV file), whatever this says.
    pub lower_tier: LowerTierKind,
    /// Memtable + block-cache budget of the lower tier (LevelDB: also bounds its runs' batches).
    pub lower_memory_bytes: u64,
    /// Windows a device may have readings in before it is consolidated (at most
    /// `limits::WINDOWS_PER_DEVICE_MAX`, the default; tests lower it to exercise consolidation).
    #[doc(hidden)]
    pub windows_per_device_max: usize,
    /// Dead bytes window files may hold before their space bound applies (at most
    /// `limits::WINDOW_DEAD_BYTES_MIN`, the default; tests lower it so that small stores are
    /// held to the bound).
    #[doc(hidden)]
    pub window_dead_bytes_min: u64,
    /// Run maintenance (readings leaving the log, consolidation, retirement) on a background
    /// thread.
    pub background_maintenance: bool,
    /// Open an existing directory without writing to it: nothing in it is created, changed or
    /// removed (the lower tier by RocksDB's read-only open, the log's segments read-only, no
    /// spare segments, no torn tail cut: reads stop where the log's valid records do), and no
    /// background thread runs. Every write returns `Error::ReadOnly`. A directory another
    /// process has open is refused (`Error::Locked`). LevelDB has no read-only open: a LevelDB
    /// directory is refused with `Error::ReadOnly`. For the tools that only read (`roamkv
    /// stats --data`, ...).
    pub read_only: bool,
    pub maintenance_interval_ms: u64,
    pub clock: Arc<dyn Clock>,
    /// Test hooks (make a background step fail once). Not for production use.
    #[doc(hidden)]
    pub fail_points: Arc<FailPoints>,
    /// Where the commit log's files live: the kernel's file system (`PlainFiles`), or a
    /// fault-injecting implementation in tests (storage.rs).
    #[doc(hidden)]
    pub storage: Arc<dyn Storage>,
    /// Cap on the bytes of log segments that feed slots keep from retiring (segments that
    /// would have retired without them). Past it, or when the log nears its budget, the oldest
    /// slot's hold is released (its reader finds a gap) rather than make writers wait. `None`: a
    /// quarter of the log budget.
    pub feed_hold_bytes_max: Option<u64>,
    /// When a committed group reaches the in-memory index: before its writers return (the
    /// default) or after (docs/ENGINE.md, "The index and the acknowledgement").
    pub index_apply: IndexApply,
}

/// When a committed group is applied to the in-memory index (index_apply.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexApply {
    /// The syncer applies the groups under the state lock, then their writers return. Reads
    /// never wait. On two cores this measured fastest: docs/BENCHMARKS.md, "The index off the
    /// writer's path".
    #[default]
    BeforeAck,
    /// Writers return once their group is written (and fdatasync'd, under `Sync`); the syncer
    /// applies it after, if the applier's role is free, or leaves it to the `roamkv-index`
    /// thread. The next fdatasync does not wait for the index; a read waits until its device's
    /// acknowledged writes are applied (read-your-writes).
    AfterAck,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            management_time_ms: 60_000,
            move_rule: MoveRule::AtManagementTime,
            segment_bytes: limits::SEGMENT_BYTES_DEFAULT,
            index_bytes_max: limits::INDEX_BYTES_MAX_DEFAULT,
            log_bytes_max: None,
            write_stall_ms_max: limits::WRITE_STALL_MS_MAX_DEFAULT,
            log_writeback_bytes: limits::LOG_WRITEBACK_BYTES_DEFAULT,
            devices_max: limits::DEVICES_MAX_DEFAULT,
            windows_per_device_max: limits::WINDOWS_PER_DEVICE_MAX,
            window_dead_bytes_min: limits::WINDOW_DEAD_BYTES_MIN,
            lower_tier: LowerTierKind::RocksDb,
            lower_memory_bytes: 64 << 20,
            background_maintenance: true,
            read_only: false,
            maintenance_interval_ms: 100,
            clock: Arc::new(SystemClock),
            fail_points: Arc::default(),
            storage: PlainFiles::shared(),
            feed_hold_bytes_max: None,
            index_apply: IndexApply::BeforeAck,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("durability", &self.durability)
            .field("management_time_ms", &self.management_time_ms)
            .field("move_rule", &self.move_rule)
            .field("segment_bytes", &self.segment_bytes)
            .field("index_bytes_max", &self.index_bytes_max)
            .field("log_bytes_max", &self.log_bytes_max)
            .field("write_stall_ms_max", &self.write_stall_ms_max)
            .field("log_writeback_bytes", &self.log_writeback_bytes)
            .field("devices_max", &self.devices_max)
            .field("lower_tier", &self.lower_tier)
            .field("lower_memory_bytes", &self.lower_memory_bytes)
            .field("background_maintenance", &self.background_maintenance)
            .field("read_only", &self.read_only)
            .field("maintenance_interval_ms", &self.maintenance_interval_ms)
            .field("feed_hold_bytes_max", &self.feed_hold_bytes_max)
            .finish_non_exhaustive()
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidOptions(m));
        if !(limits::SEGMENT_BYTES_MIN..=limits::SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return bad(format!(
                "segment_bytes {} is outside [{}, {}]",
                self.segment_bytes,
                limits::SEGMENT_BYTES_MIN,
                limits::SEGMENT_BYTES_MAX
            ));
        }
        if !self.segment_bytes.is_multiple_of(4096) {
            return bad(format!(
                "segment_bytes {} is not a multiple of 4096",
                self.segment_bytes
            ));
        }
        if self.index_bytes_max < 1 << 20 {
            return bad(format!(
                "index_bytes_max {} is below 1 MiB",
                self.index_bytes_max
            ));
        }
        if let Some(max) = self.log_bytes_max
            && max < limits::LOG_SEGMENTS_MIN * self.segment_bytes
        {
            return bad(format!(
                "log_bytes_max {max} is below {} segments of {} bytes",
                limits::LOG_SEGMENTS_MIN,
                self.segment_bytes
            ));
        }
        if self.devices_max == 0 {
            return bad("devices_max must be > 0".into());
        }
        if self.window_dead_bytes_min > limits::WINDOW_DEAD_BYTES_MIN {
            return Err(Error::InvalidOptions(format!(
                "window_dead_bytes_min {} is over {}",
                self.window_dead_bytes_min,
                limits::WINDOW_DEAD_BYTES_MIN
            )));
        }
        if !(1..=limits::WINDOWS_PER_DEVICE_MAX).contains(&self.windows_per_device_max) {
            return bad(format!(
                "windows_per_device_max {} is outside 1..={}",
                self.windows_per_device_max,
                limits::WINDOWS_PER_DEVICE_MAX
            ));
        }
        if self.maintenance_interval_ms == 0 {
            return bad("maintenance_interval_ms must be > 0".into());
        }
        if let Durability::Periodic { interval_ms: 0 } = self.durability {
            return bad("periodic durability needs an interval > 0 ms".into());
        }
        Ok(())
    }

    /// The log budget in force for a log on a file system with `free_bytes` free (see
    /// `log_bytes_max`).
    pub(crate) fn log_budget_bytes(&self, free_bytes: u64) -> u64 {
        let floor = limits::LOG_SEGMENTS_MIN * self.segment_bytes;
        match self.log_bytes_max {
            Some(max) => max,
            None => {
                let wanted = (self.management_time_ms.saturating_mul(2) / 1000)
                    .max(1)
                    .saturating_mul(limits::LOG_INGEST_BYTES_PER_SEC_ASSUMED);
                wanted.min(free_bytes / 2).max(floor)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_log_budget_follows_management_time_and_free_space() {
        let options = Options {
            management_time_ms: 4_000,
            ..Options::default()
        };
        let gib = 1u64 << 30;
        // Two management times at the assumed peak rate: 8 s x 384 MiB/s = 3 GiB.
        assert_eq!(options.log_budget_bytes(100 * gib), 3 * gib);
        // Never more than half the free space...
        assert_eq!(options.log_budget_bytes(4 * gib), 2 * gib);
        // ...and never under LOG_SEGMENTS_MIN segments.
        assert_eq!(
            options.log_budget_bytes(0),
            limits::LOG_SEGMENTS_MIN * options.segment_bytes
        );
        let set = Options {
            log_bytes_max: Some(5 * gib),
            ..options
        };
        assert_eq!(set.log_budget_bytes(0), 5 * gib);
    }
}
