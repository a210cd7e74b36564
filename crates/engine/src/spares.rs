//! Ready segments for the log, made ahead of need by one background thread, so that moving to
//! a new segment costs a commit nothing: no file creation, no allocation, no zero-fill.
//!
//! This thread is the only one that assigns segment sequence numbers after open, so segments
//! become ready — and active — in sequence order. It prefers recycling a retired segment (a
//! rename and a header write) to creating one (a full zero-fill).

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};

use parking_lot::{Condvar, Mutex};

use crate::engine::Inner;
use crate::error::{Error, Result};
use crate::limits::{SEGMENT_HEADER_BYTES, SPARE_SEGMENTS_MAX};
use crate::segment::Segment;
use crate::stats::Counters;

/// Segments kept ready ahead of the active one.
const READY_SEGMENTS_TARGET: usize = 1;

pub(crate) struct Retired {
    pub file: File,
    pub path: PathBuf,
    pub bytes: u64,
}

pub(crate) struct SpareState {
    pub ready: VecDeque<Segment>,
    pub retired: Vec<Retired>,
    pub next_seq: u64,
    /// Set once the log needs segments beyond the ones it has (the active one is half full):
    /// until then a read-only open makes no segment.
    pub wanted: bool,
    pub shutdown: bool,
    pub error: Option<String>,
}

pub(crate) struct Spares {
    pub state: Mutex<SpareState>,
    pub changed: Condvar,
}

impl Spares {
    pub fn new(ready: VecDeque<Segment>, next_seq: u64) -> Spares {
        Spares {
            state: Mutex::new(SpareState {
                ready,
                retired: Vec::new(),
                next_seq,
                wanted: false,
                shutdown: false,
                error: None,
            }),
            changed: Condvar::new(),
        }
    }

    /// The next ready segment, waiting for the preparer if none is ready yet.
    pub fn take(&self) -> Result<Segment> {
        let mut st = self.state.lock();
        st.wanted = true;
        loop {
            if let Some(segment) = st.ready.pop_front() {
                self.changed.notify_all();
                return Ok(segment);
            }
            if let Some(e) = &st.error {
                return Err(Error::Poisoned(format!(
                    "preparing a log segment failed: {e}"
                )));
            }
            if st.shutdown {
                return Err(Error::Poisoned("the engine is shutting down".into()));
            }
            self.changed.wait(&mut st);
        }
    }

    /// Hands over a retired segment (already renamed out of the log) for reuse, or deletes it
    /// when enough are kept.
    pub fn retire(&self, retired: Retired) {
        let mut st = self.state.lock();
        if st.ready.len() + st.retired.len() < SPARE_SEGMENTS_MAX {
            st.retired.push(retired);
            self.changed.notify_all();
        } else {
            drop(st);
            let _ = std::fs::remove_file(&retired.path);
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

impl Inner {
    pub(crate) fn run_segment_preparer(&self) {
        let log_dir = self.dir.log_dir();
        loop {
            let (seq, retired) = {
                let mut st = self.spares.state.lock();
                while !st.shutdown && (!st.wanted || st.ready.len() >= READY_SEGMENTS_TARGET) {
                    self.spares.changed.wait(&mut st);
                }
                if st.shutdown {
                    for r in st.retired.drain(..) {
                        let _ = std::fs::remove_file(&r.path);
                    }
                    return;
                }
                st.next_seq += 1;
                (st.next_seq - 1, st.retired.pop())
            };
            let made = self.make_segment(&log_dir, seq, retired);
            let mut st = self.spares.state.lock();
            match made {
                Ok(segment) => st.ready.push_back(segment),
                Err(e) => {
                    st.error = Some(e.to_string());
                    self.spares.changed.notify_all();
                    return;
                }
            }
            self.spares.changed.notify_all();
        }
    }

    fn make_segment(&self, log_dir: &Path, seq: u64, retired: Option<Retired>) -> Result<Segment> {
        match retired {
            Some(r) => {
                let segment = Segment::recycle(r.file, &r.path, r.bytes, log_dir, seq)?;
                Counters::add(&self.counters.segments_recycled, 1);
                Counters::add(&self.counters.log_preallocated_bytes, SEGMENT_HEADER_BYTES);
                Ok(segment)
            }
            None => {
                let (segment, written) = Segment::create(
                    log_dir,
                    seq,
                    self.options.segment_bytes,
                    self.zero_fill_segments(),
                )?;
                Counters::add(&self.counters.log_preallocated_bytes, written);
                Ok(segment)
            }
        }
    }
}
