//! Ready segments for the log, made ahead of need by one background thread, so that moving to
//! a new segment costs a commit nothing: no file creation, no allocation, no zero-fill; and the
//! log's space accounting against its budget (live segments + spares on disk).
//!
//! This thread is the only one that assigns segment sequence numbers after open, so segments
//! become ready — and active — in sequence order. It prefers recycling a retired segment (a
//! rename and a header write) to creating one (a full zero-fill).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::commit_log::segment::Segment;
use crate::commit_log::storage::{Storage, StorageFile};
use crate::model::error::{Error, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{READY_SEGMENTS_TARGET, SEGMENT_HEADER_BYTES, SPARE_SEGMENTS_MAX};
use crate::stats::Counters;

pub(crate) struct Retired {
    pub file: Arc<dyn StorageFile>,
    pub path: PathBuf,
    pub bytes: u64,
}

pub(crate) struct SpareState {
    pub ready: VecDeque<Segment>,
    pub retired: Vec<Retired>,
    pub next_seq: SegmentSeq,
    /// Set once the log needs segments beyond the ones it has (the active one is half full):
    /// until then a read-only open makes no segment.
    pub wanted: bool,
    pub shutdown: bool,
    /// The last attempt to make a segment failed (handed to the next `take`, then retried).
    pub error: Option<Error>,
    /// Writers waiting in `take` for a ready segment: while there are any, the preparer
    /// zero-fills at full speed instead of paced.
    pub takers_waiting: usize,
}

/// The spare pool and the log's space accounting against its budget.
pub(crate) struct Spares {
    pub state: Mutex<SpareState>,
    pub changed: Condvar,
    /// The log budget in force (Options::log_bytes_max, or the derived default).
    pub budget_bytes: u64,
    /// Bytes of live segment files (kept by the engine under its state lock, read here without
    /// it: the preparer must never wait for the state lock, which a writer holds in `take`).
    pub live_bytes: AtomicU64,
    /// Bytes of spare files: ready and retired, and a file being made. Counted before a file
    /// exists and after it is gone, so that the total is never understated.
    pub spare_bytes: AtomicU64,
    plan: SegmentPlan,
    counters: Arc<Counters>,
}

/// How new segments are made.
pub(crate) struct SegmentPlan {
    pub storage: Arc<dyn Storage>,
    pub log_dir: PathBuf,
    pub segment_bytes: u64,
    /// Write zeros over new segments (see `Segment::create`): whenever commits fdatasync.
    pub zero_fill: bool,
}

impl Spares {
    pub fn new(
        ready: VecDeque<Segment>,
        next_seq: SegmentSeq,
        budget_bytes: u64,
        plan: SegmentPlan,
        counters: Arc<Counters>,
    ) -> Spares {
        let spare_bytes = ready.iter().map(|s| s.bytes).sum();
        Spares {
            state: Mutex::new(SpareState {
                ready,
                retired: Vec::new(),
                next_seq,
                wanted: false,
                shutdown: false,
                error: None,
                takers_waiting: 0,
            }),
            changed: Condvar::new(),
            budget_bytes,
            live_bytes: AtomicU64::new(0),
            spare_bytes: AtomicU64::new(spare_bytes),
            plan,
            counters,
        }
    }

    /// Bytes the log's files occupy: live segments and spares.
    pub fn log_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed) + self.spare_bytes.load(Ordering::Relaxed)
    }

    /// Spares kept for reuse: at most SPARE_SEGMENTS_MAX and a quarter of the budget.
    fn pool_max(&self, segment_bytes: u64) -> usize {
        let quarter = (self.budget_bytes / 4 / segment_bytes.max(1)) as usize;
        SPARE_SEGMENTS_MAX.min(quarter.max(1))
    }

    /// The next ready segment, now counted as live; None if none is ready yet (the preparer is
    /// asked for one: `wait_ready` waits for it). A failure to make one (the file system is
    /// full, or over the budget) is returned once, not kept: the next call tries again.
    pub fn try_take(&self) -> Result<Option<Segment>> {
        let mut st = self.state.lock();
        if let Some(segment) = st.ready.pop_front() {
            // The spare becomes live (counted as live first: never understated).
            self.live_bytes.fetch_add(segment.bytes, Ordering::Relaxed);
            self.spare_bytes.fetch_sub(segment.bytes, Ordering::Relaxed);
            self.changed.notify_all();
            return Ok(Some(segment));
        }
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        if st.shutdown {
            return Err(Error::Poisoned("the engine is shutting down".into()));
        }
        st.wanted = true;
        self.changed.notify_all();
        Ok(None)
    }

    /// Waits until a segment is ready, making one failed, or shutdown (then `try_take` says
    /// which). While someone waits, the preparer zero-fills at full speed.
    pub fn wait_ready(&self) {
        let mut st = self.state.lock();
        st.wanted = true;
        self.changed.notify_all();
        while st.ready.is_empty() && st.error.is_none() && !st.shutdown {
            st.takers_waiting += 1;
            self.changed.wait(&mut st);
            st.takers_waiting -= 1;
        }
    }

    /// Hands over a retired segment (already renamed out of the log) for reuse, or deletes it
    /// when the pool is full or keeping it would put the log over its budget.
    pub fn retire(&self, retired: Retired) {
        let mut st = self.state.lock();
        let pooled = st.ready.len() + st.retired.len();
        let fits = self.log_bytes() + retired.bytes <= self.budget_bytes;
        // Space came back: an earlier failure to make a segment is stale now.
        st.error = None;
        if pooled < self.pool_max(retired.bytes) && fits {
            self.spare_bytes.fetch_add(retired.bytes, Ordering::Relaxed);
            st.retired.push(retired);
            self.changed.notify_all();
        } else {
            self.changed.notify_all();
            drop(st);
            let _ = self.plan.storage.remove(&retired.path);
        }
    }

    /// Asks the preparer to have the next segment ready.
    pub fn want(&self) {
        let mut st = self.state.lock();
        if !st.wanted {
            st.wanted = true;
            self.changed.notify_all();
        }
    }

    pub fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.changed.notify_all();
    }
}

impl Spares {
    /// The preparer thread's loop: whenever a segment is wanted and none is ready, recycle a
    /// retired one or, within the budget, create one. A failure is handed to the next `take`.
    pub(crate) fn run_preparer(&self) {
        loop {
            let (seq, retired) = {
                let mut st = self.state.lock();
                while !st.shutdown
                    && (!st.wanted || st.ready.len() >= READY_SEGMENTS_TARGET || st.error.is_some())
                {
                    self.changed.wait(&mut st);
                }
                if st.shutdown {
                    for r in st.retired.drain(..) {
                        let _ = self.plan.storage.remove(&r.path);
                    }
                    return;
                }
                // A recycled file stays counted as a spare throughout.
                let retired = st.retired.pop();
                if retired.is_none() {
                    if self.log_bytes() + self.plan.segment_bytes > self.budget_bytes {
                        // The writer that wants it gets NoSpace (and waits for maintenance).
                        st.error = Some(self.no_space("a new segment would exceed the log budget"));
                        st.wanted = false;
                        self.changed.notify_all();
                        continue;
                    }
                    self.spare_bytes
                        .fetch_add(self.plan.segment_bytes, Ordering::Relaxed);
                }
                let seq = st.next_seq;
                st.next_seq = seq.next();
                (seq, retired)
            };
            let recycled_bytes = retired.as_ref().map(|r| r.bytes);
            let made = self.make_segment(seq, retired);
            let mut st = self.state.lock();
            match made {
                Ok(segment) => st.ready.push_back(segment),
                Err(e) => {
                    // The file is gone (a failed creation deletes it; a failed recycling leaves a
                    // name that open() deletes).
                    let bytes = recycled_bytes.unwrap_or(self.plan.segment_bytes);
                    self.spare_bytes.fetch_sub(bytes, Ordering::Relaxed);
                    // The number is given again to the next segment: only this thread assigns
                    // them, so the log's sequence numbers stay contiguous (recovery checks it).
                    st.next_seq = SegmentSeq(st.next_seq.0 - 1);
                    st.error = Some(if is_no_space(&e) {
                        self.no_space(&format!("the file system is full: {e}"))
                    } else {
                        e
                    });
                    st.wanted = false;
                }
            }
            self.changed.notify_all();
        }
    }

    /// The error a write gets when the log cannot grow.
    pub(crate) fn no_space(&self, reason: &str) -> Error {
        Error::NoSpace {
            reason: reason.to_string(),
            log_bytes: self.log_bytes(),
            log_bytes_max: self.budget_bytes,
        }
    }

    fn make_segment(&self, seq: SegmentSeq, retired: Option<Retired>) -> Result<Segment> {
        let plan = &self.plan;
        match retired {
            Some(r) => {
                let segment =
                    Segment::recycle(&plan.storage, r.file, &r.path, r.bytes, &plan.log_dir, seq)?;
                Counters::add(&self.counters.segments_recycled, 1);
                Counters::add(&self.counters.log_preallocated_bytes, SEGMENT_HEADER_BYTES);
                Ok(segment)
            }
            None => {
                // Paced while no writer waits for this segment (a gentler neighbour for the
                // commits' fdatasyncs), at full speed once one does.
                let nobody_waiting = || self.state.lock().takers_waiting == 0;
                let (segment, written) = Segment::create_paced(
                    &plan.storage,
                    &plan.log_dir,
                    seq,
                    plan.segment_bytes,
                    plan.zero_fill,
                    &nobody_waiting,
                )?;
                Counters::add(&self.counters.log_preallocated_bytes, written);
                Ok(segment)
            }
        }
    }
}

/// ENOSPC (or EDQUOT) from the file system.
pub(crate) fn is_no_space(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}
