//! How a scrape brings a metric to a value read elsewhere (the engine's, the sink's, the
//! process's): counters follow a total, gauges are set; and the labels and sizes those reads
//! share. A leaf of `metrics`: every part of it may use it.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: &'static str,
}

/// Carries a total kept elsewhere (the engine's, the sink's, the handoffs') into a counter:
/// a counter only goes up, by the difference since the last scrape.
pub(super) fn follow(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

pub(super) fn follow_f64(counter: &Counter<f64, AtomicU64>, total: f64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

pub(super) fn set(gauge: &Gauge, value: u64) {
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
}

/// Bytes of the regular files under `dir` (segments are preallocated, so this is space held,
/// not data written). Unreadable entries count as 0.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
