//! The engine's state lock, timed: every hold is counted in a histogram (how long writers and
//! readers can be kept waiting is the engine's latency floor), and holds over
//! `LONG_HOLD_NS` are attributed to the line that took the lock, so a slow site names itself.
//!
//! A condition-variable wait releases the lock: `TimedGuard::wait`/`wait_for` end the hold
//! before waiting and start a new one after, so waiting is never counted as holding.

use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard, WaitTimeoutResult};

/// Holds longer than this are attributed to their call site (`Stats::state_lock.long_holds`).
pub const LONG_HOLD_NS: u64 = 1_000_000;
/// Sub-buckets per power of two: hold times are kept to within 12.5 %.
const SUB_BUCKET_BITS: u32 = 3;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Buckets for every u64 nanosecond value (the last octave is 2^63..2^64).
const BUCKETS: usize = ((64 - SUB_BUCKET_BITS) as usize + 1) * SUB_BUCKETS as usize;

/// The bucket of a value: exact below 8, then 8 buckets per power of two.
fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS {
        return ns as usize;
    }
    let octave = 63 - ns.leading_zeros(); // >= SUB_BUCKET_BITS
    let sub = (ns >> (octave - SUB_BUCKET_BITS)) & (SUB_BUCKETS - 1);
    (((octave - SUB_BUCKET_BITS + 1) as u64) * SUB_BUCKETS + sub) as usize
}

/// The largest value a bucket holds.
pub fn bucket_upper_ns(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < SUB_BUCKETS {
        return bucket;
    }
    let octave = bucket / SUB_BUCKETS + SUB_BUCKET_BITS as u64 - 1;
    let sub = bucket % SUB_BUCKETS;
    let low = (1u64 << octave) | (sub << (octave - SUB_BUCKET_BITS as u64));
    low.saturating_add((1u64 << (octave - SUB_BUCKET_BITS as u64)) - 1)
}

/// A snapshot of the hold times: what `Stats` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HoldTimes {
    pub holds: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// (bucket, holds) for every non-empty bucket, ascending; `bucket_upper_ns` gives a bucket's
    /// upper bound.
    pub buckets: Vec<(usize, u64)>,
    /// Holds over `LONG_HOLD_NS` by call site: (file:line, holds, longest ns).
    pub long_holds: Vec<(String, u64, u64)>,
}

impl HoldTimes {
    /// The hold time at or below which `fraction` (0..=1) of the holds fall (a bucket's upper
    /// bound: at most 12.5 % above the true value). 0 without holds.
    pub fn percentile_ns(&self, fraction: f64) -> u64 {
        let wanted = (self.holds as f64 * fraction.clamp(0.0, 1.0))
            .ceil()
            .max(1.0) as u64;
        let mut seen = 0;
        for (bucket, holds) in &self.buckets {
            seen += holds;
            if seen >= wanted {
                return bucket_upper_ns(*bucket);
            }
        }
        0
    }

    /// What happened between `earlier` and this snapshot (max and long holds: since open).
    pub fn since(&self, earlier: &HoldTimes) -> HoldTimes {
        let before = |bucket: usize| {
            earlier
                .buckets
                .iter()
                .find(|(b, _)| *b == bucket)
                .map_or(0, |(_, n)| *n)
        };
        HoldTimes {
            holds: self.holds.saturating_sub(earlier.holds),
            total_ns: self.total_ns.saturating_sub(earlier.total_ns),
            max_ns: self.max_ns,
            buckets: self
                .buckets
                .iter()
                .map(|(b, n)| (*b, n.saturating_sub(before(*b))))
                .filter(|(_, n)| *n > 0)
                .collect(),
            long_holds: self.long_holds.clone(),
        }
    }

    /// The largest bucket bound with a hold in it: an upper bound of the longest hold in an
    /// interval made with `since` (whose `max_ns` is since open).
    pub fn max_bucket_ns(&self) -> u64 {
        self.buckets
            .last()
            .map_or(0, |(bucket, _)| bucket_upper_ns(*bucket))
    }
}

struct Histogram {
    buckets: Box<[AtomicU64]>,
    holds: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    long_holds: Mutex<Vec<(&'static Location<'static>, u64, u64)>>,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            holds: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            long_holds: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, held: Duration, site: &'static Location<'static>) {
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.holds.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        if ns > LONG_HOLD_NS {
            let mut long = self.long_holds.lock();
            match long.iter_mut().find(|(s, _, _)| *s == site) {
                Some((_, holds, max)) => {
                    *holds += 1;
                    *max = (*max).max(ns);
                }
                None => long.push((site, 1, ns)),
            }
        }
    }

    fn snapshot(&self) -> HoldTimes {
        let mut long_holds: Vec<(String, u64, u64)> = self
            .long_holds
            .lock()
            .iter()
            .map(|(site, holds, max)| (format!("{}:{}", site.file(), site.line()), *holds, *max))
            .collect();
        long_holds.sort_by_key(|h| std::cmp::Reverse(h.2));
        HoldTimes {
            holds: self.holds.load(Ordering::Relaxed),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(b, n)| (b, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            long_holds,
        }
    }
}

/// A mutex whose holds are timed (see the module doc).
pub(crate) struct TimedMutex<T> {
    mutex: Mutex<T>,
    histogram: Histogram,
}

impl<T> TimedMutex<T> {
    pub fn new(value: T) -> TimedMutex<T> {
        TimedMutex {
            mutex: Mutex::new(value),
            histogram: Histogram::new(),
        }
    }

    #[track_caller]
    pub fn lock(&self) -> TimedGuard<'_, T> {
        let site = Location::caller();
        let guard = self.mutex.lock();
        TimedGuard {
            guard,
            since: Instant::now(),
            site,
            histogram: &self.histogram,
        }
    }

    pub fn hold_times(&self) -> HoldTimes {
        self.histogram.snapshot()
    }
}

/// A held `TimedMutex`: the hold ends (and is recorded) when this is dropped.
pub(crate) struct TimedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    since: Instant,
    site: &'static Location<'static>,
    histogram: &'a Histogram,
}

impl<T> TimedGuard<'_, T> {
    /// Waits on `condvar`, releasing the lock meanwhile (the wait is not a hold).
    pub fn wait(&mut self, condvar: &Condvar) {
        self.histogram.record(self.since.elapsed(), self.site);
        condvar.wait(&mut self.guard);
        self.since = Instant::now();
    }

    /// Runs `f` with the lock released (the time is not a hold), then takes it again.
    pub fn unlocked<R>(&mut self, f: impl FnOnce() -> R) -> R {
        self.histogram.record(self.since.elapsed(), self.site);
        let result = MutexGuard::unlocked(&mut self.guard, f);
        self.since = Instant::now();
        result
    }

    /// `wait`, for at most `timeout`.
    pub fn wait_for(&mut self, condvar: &Condvar, timeout: Duration) -> WaitTimeoutResult {
        self.histogram.record(self.since.elapsed(), self.site);
        let result = condvar.wait_for(&mut self.guard, timeout);
        self.since = Instant::now();
        result
    }
}

impl<T> std::ops::Deref for TimedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for TimedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for TimedGuard<'_, T> {
    fn drop(&mut self) {
        self.histogram.record(self.since.elapsed(), self.site);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_within_an_eighth() {
        let mut last = 0;
        for ns in (0..10_000u64).chain([1 << 20, (1 << 40) + 12345, u64::MAX]) {
            let bucket = bucket_of(ns);
            assert!(bucket < BUCKETS, "{ns} -> {bucket}");
            assert!(bucket >= last || ns > 10_000, "buckets ascend with values");
            last = bucket;
            let upper = bucket_upper_ns(bucket);
            assert!(upper >= ns, "{ns} above its bucket's bound {upper}");
            assert!(
                upper as f64 <= ns as f64 * 1.125 + 1.0,
                "{ns}: bound {upper} too loose"
            );
        }
    }

    #[test]
    fn holds_and_percentiles_are_recorded_and_waits_are_not_holds() {
        let m = TimedMutex::new(0u32);
        for _ in 0..99 {
            *m.lock() += 1;
        }
        {
            let _held = m.lock();
            std::thread::sleep(Duration::from_millis(3));
        }
        let cv = Condvar::new();
        {
            let mut g = m.lock();
            let _ = g.wait_for(&cv, Duration::from_millis(20));
        }
        let t = m.hold_times();
        assert_eq!(t.holds, 102, "the wait splits its guard's hold in two");
        assert!(t.max_ns >= 3_000_000 && t.max_ns < 20_000_000, "{t:?}");
        assert!(t.percentile_ns(0.5) < 1_000_000);
        assert!(t.percentile_ns(1.0) >= 3_000_000);
        assert_eq!(t.long_holds.len(), 1, "one site held it over 1 ms");
        assert!(t.long_holds[0].0.contains("timed_mutex.rs"));
        let later = m.hold_times().since(&t);
        assert_eq!((later.holds, later.buckets.len()), (0, 0));
    }
}
