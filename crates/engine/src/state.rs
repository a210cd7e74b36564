//! What the engine's threads share (`Inner`) and what its one lock guards (`State`), and how a
//! logged record changes that state (`State::apply`, the same on the live path and in recovery).
//!
//! Concurrency: one `Mutex<State>` guards the mapping table, the upper-tier indexes and the
//! log's bookkeeping. It is never held across file I/O (docs/ARCHITECTURE.md, "Locks and
//! threads"). The modules that act on the engine (commit_log, query, trim, maintenance,
//! recovery) are functions over `&Inner`; `Inner`'s own methods are only the few below.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::timed_mutex::TimedMutex;

use crate::commit_log::log_state::LogState;
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::key;
use crate::lower::{LowerOp, LowerTier};
use crate::mapping::{DeviceId, MappingTable, Tier};
use crate::options::Options;
use crate::record::Body;
use crate::spares::Spares;
use crate::stats::Counters;
use crate::upper::{IndexEntry, LogPosition};

pub(crate) struct State {
    pub map: MappingTable,
    pub log: LogState,
    pub poisoned: Option<String>,
    /// The lower tier has writes that are not yet persisted (its WAL is off).
    pub lower_dirty: bool,
    pub index_bytes: u64,
    pub last_maintenance_error: Option<String>,
    /// When the lower tier was last made durable, on the engine's clock (retirement persists it
    /// at most every LOWER_PERSIST_INTERVAL_MS unless the log is under pressure).
    pub lower_persisted_at_ms: u64,
}

pub(crate) struct Recovery {
    pub ms: u64,
    pub records: u64,
    /// The largest read buffer recovery held (one segment at a time).
    pub buffer_bytes_max: u64,
    pub cut: Option<String>,
}

pub(crate) struct Inner {
    pub dir: DataDir,
    pub options: Options,
    pub state: TimedMutex<State>,
    /// Signalled when a group is committed (or the engine is poisoned).
    pub group_done: Condvar,
    /// Signalled when segments retire (writers stalled for log room wait on it).
    pub space_freed: Condvar,
    /// A writer is stalled or the log is under pressure: maintenance should run now.
    pub maintenance_wanted: AtomicBool,
    pub spares: Spares,
    pub lower: Box<dyn LowerTier>,
    pub counters: Arc<Counters>,
    /// Held for the whole of a migration pass: one at a time.
    pub migration: Mutex<()>,
    pub shutdown: Mutex<bool>,
    pub shutdown_signal: Condvar,
    pub recovery: Recovery,
}

impl Inner {
    pub(crate) fn check_poisoned(&self, st: &State) -> Result<()> {
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Asks the maintenance thread to run now rather than at its next interval.
    pub(crate) fn wake_maintenance(&self) {
        if !self.maintenance_wanted.swap(true, Ordering::Relaxed) {
            let _guard = self.shutdown.lock();
            self.shutdown_signal.notify_all();
        }
    }

    /// Hands writes to the lower tier (unsynced: the log covers them until the next persist).
    pub(crate) fn write_lower(&self, st: &mut State, ops: &[LowerOp]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        st.lower_dirty = true;
        self.lower.write(ops)
    }
}

impl State {
    /// Applies one logged record to the in-memory state (live path and recovery alike). Writes
    /// the record asks of the lower tier (a settled device's put, departure or trim) are added
    /// to `lower_ops` for the caller to write.
    pub(crate) fn apply(
        &mut self,
        counters: &Counters,
        lower_ops: &mut Vec<LowerOp>,
        id: DeviceId,
        body: &Body<'_>,
        position: LogPosition,
        len: u32,
    ) {
        let State {
            map,
            log,
            index_bytes,
            ..
        } = self;
        let Some(entry) = map.entry_mut(id) else {
            return; // the incarnation is gone (departed and already dropped)
        };
        match *body {
            Body::Register { .. } => {
                if entry.tier != Tier::Lower {
                    let before = entry.index.index_bytes();
                    entry.index.hold_segment(position.segment_seq);
                    *index_bytes += entry.index.index_bytes() - before;
                    log.hold(position.segment_seq);
                }
            }
            Body::Put {
                sensor,
                ts_ms,
                value,
                ..
            } => match entry.tier {
                Tier::Upper | Tier::Migrating => {
                    let index_entry = IndexEntry {
                        ts_ms,
                        segment_seq: position.segment_seq,
                        offset: u32::try_from(position.offset).expect("segment offsets fit in u32"),
                        len,
                    };
                    let before = entry.index.index_bytes();
                    entry.index.insert(sensor, index_entry);
                    entry.index.hold_segment(position.segment_seq);
                    *index_bytes += entry.index.index_bytes() - before;
                    log.hold(position.segment_seq);
                }
                Tier::Lower => lower_ops.push(LowerOp::Put(
                    key::reading_key(entry.lower_id, sensor, ts_ms),
                    value.to_vec(),
                )),
            },
            Body::Depart { .. } => match entry.tier {
                Tier::Upper => {
                    let Some(entry) = map.remove(id) else { return };
                    Counters::add(
                        &counters.reclaimed_bytes_without_write,
                        entry.index.record_bytes,
                    );
                    *index_bytes -= entry.index.index_bytes();
                    log.release(&entry.index);
                }
                Tier::Migrating => entry.departed = true,
                Tier::Lower => {
                    let (start, end) = key::device_reading_range(entry.lower_id);
                    lower_ops.push(LowerOp::DeleteRange(start, end));
                    lower_ops.push(LowerOp::Delete(key::device_key(entry.lower_id)));
                    map.remove(id);
                }
            },
            Body::Trim { before_ms, .. } => {
                entry.apply_trim(index_bytes, lower_ops, before_ms, position);
            }
            // Not a device's record: it only closes its segment (never queued for `apply`).
            Body::SegmentEnd { .. } => {}
        }
    }
}
