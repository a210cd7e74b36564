//! Engine options, with their defaults and what each costs.

use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::limits;
use crate::lower::LowerTierKind;

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

#[derive(Clone)]
pub struct Options {
    pub durability: Durability,
    /// How long a new device stays in the upper tier before it is migrated (if still present).
    pub management_time_ms: u64,
    /// Size of each preallocated log segment. Space returns in units of segments.
    pub segment_bytes: u64,
    /// Cap on the upper tier's index memory; above it the oldest devices migrate early and
    /// writers wait for that migration (back-pressure).
    pub index_bytes_max: u64,
    /// Lower tier for a new data directory. An existing directory keeps the one it was made
    /// with (recorded in its ROAMKV file), whatever this says.
    pub lower_tier: LowerTierKind,
    /// Memtable + block-cache budget of the lower tier.
    pub lower_memory_bytes: u64,
    /// Run migrations and segment retirement on a background thread.
    pub background_maintenance: bool,
    pub maintenance_interval_ms: u64,
    pub clock: Arc<dyn Clock>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            management_time_ms: 60_000,
            segment_bytes: limits::SEGMENT_BYTES_DEFAULT,
            index_bytes_max: limits::INDEX_BYTES_MAX_DEFAULT,
            lower_tier: LowerTierKind::RocksDb,
            lower_memory_bytes: 64 << 20,
            background_maintenance: true,
            maintenance_interval_ms: 100,
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("durability", &self.durability)
            .field("management_time_ms", &self.management_time_ms)
            .field("segment_bytes", &self.segment_bytes)
            .field("index_bytes_max", &self.index_bytes_max)
            .field("lower_tier", &self.lower_tier)
            .field("lower_memory_bytes", &self.lower_memory_bytes)
            .field("background_maintenance", &self.background_maintenance)
            .field("maintenance_interval_ms", &self.maintenance_interval_ms)
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
        if self.maintenance_interval_ms == 0 {
            return bad("maintenance_interval_ms must be > 0".into());
        }
        if let Durability::Periodic { interval_ms: 0 } = self.durability {
            return bad("periodic durability needs an interval > 0 ms".into());
        }
        Ok(())
    }
}
