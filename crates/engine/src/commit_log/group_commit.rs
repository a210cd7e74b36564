//! The group commit's hand-off (LevelDB's `BuildBatchGroup`): room for a write, placing it,
//! waiting for it, and leading a group. Writers encode and checksum their records outside the
//! state lock, then take it briefly to make room, place and queue them (`make_room`, `place`,
//! `LogState::enqueue`), and call `wait_for`. The first queued writer that finds no leader
//! leads: it takes every queued record, releases the lock, writes them (`Group::write`: one
//! pwrite per segment touched and, in `Sync` mode, one fdatasync), retakes the lock, applies
//! them in log order and wakes the others. `Periodic` and `None` modes sync here too
//! (`sync_unsynced`): on the flush thread's interval, before a migration's ingest, before a
//! lower-tier persist, and at close.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::commit_log::log_state::{self, Chunk, QueuedRecord};
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::record::{self, Decode};
use crate::segment::Segment;
use crate::state::{Inner, State};
use crate::stats::Counters;
use crate::timed_mutex::TimedGuard;
use crate::upper::LogPosition;

/// A write's time waiting for log room, over all its attempts.
#[derive(Default)]
pub(crate) struct Stall {
    started: Option<Instant>,
}

/// Poisons the engine if a group commit's leader unwinds (see `lead_group`).
struct LeaderGuard<'a> {
    inner: &'a Inner,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        // Only reached by unwinding: the normal path forgets the guard. The leader's own state
        // guard was made after this one, so unwinding has already released it.
        let mut st = self.inner.state.lock();
        st.log.leader_active = false;
        st.poisoned
            .get_or_insert_with(|| "a group commit panicked; reopen to recover".to_string());
        self.inner.group_done.notify_all();
    }
}

/// Makes sure the active segment has `len` free bytes, moving to a ready spare if it lacks
/// them. When the log is at its budget, waits (the write stall, bounded by
/// `write_stall_ms_max` over the whole write) for maintenance to retire segments, and fails
/// with `Error::NoSpace` past the bound. Returns false when it released the lock to wait:
/// the caller must then re-check what it read under the lock.
pub(crate) fn make_room(
    inner: &Inner,
    st: &mut TimedGuard<'_, State>,
    len: usize,
    stall: &mut Stall,
) -> Result<bool> {
    if st.log.has_room(len) {
        return Ok(true);
    }
    let live_bytes = inner.spares.live_bytes.load(Ordering::Relaxed);
    if live_bytes + inner.options.segment_bytes > inner.spares.budget_bytes {
        let started = *stall.started.get_or_insert_with(|| {
            Counters::add(&inner.counters.write_stalls, 1);
            Instant::now()
        });
        let waited = started.elapsed();
        let bound = Duration::from_millis(inner.options.write_stall_ms_max);
        if waited >= bound {
            Counters::add(&inner.counters.write_stall_ms, waited.as_millis() as u64);
            Counters::add(&inner.counters.no_space_errors, 1);
            return Err(inner
                .spares
                .no_space("the log budget is full and maintenance freed no segment in time"));
        }
        inner.wake_maintenance();
        let timeout = (bound - waited).min(Duration::from_millis(50));
        st.wait_for(&inner.space_freed, timeout);
        return Ok(false);
    }
    let segment = match inner.spares.take() {
        Ok(segment) => Arc::new(segment),
        Err(e) => {
            if matches!(e, Error::NoSpace { .. }) {
                Counters::add(&inner.counters.no_space_errors, 1);
            }
            return Err(e);
        }
    };
    if let Some(started) = stall.started.take() {
        Counters::add(
            &inner.counters.write_stall_ms,
            started.elapsed().as_millis() as u64,
        );
    }
    st.log.activate(segment);
    Ok(true)
}

/// Reserves `len` contiguous bytes of the active segment (`make_room` made sure they are
/// there, under the same lock).
pub(crate) fn place(
    inner: &Inner,
    st: &mut TimedGuard<'_, State>,
    len: usize,
) -> (Arc<Segment>, u64) {
    let (segment, offset, want_spare) = st.log.place(len);
    if want_spare {
        inner.spares.want();
    }
    (segment, offset)
}

/// Waits until `ticket` is committed, leading a group commit when no one else is.
pub(crate) fn wait_for<'a>(
    inner: &'a Inner,
    mut st: TimedGuard<'a, State>,
    ticket: u64,
) -> Result<()> {
    loop {
        if st.log.committed_ticket >= ticket {
            return Ok(());
        }
        inner.check_poisoned(&st)?;
        if st.log.leader_active {
            st.wait(&inner.group_done);
        } else {
            st = lead_group(inner, st)?;
        }
    }
}

/// Leads one group commit: takes everything queued, writes it without the lock
/// (`Group::write`), then applies it in log order and wakes its writers.
fn lead_group<'a>(
    inner: &'a Inner,
    mut st: TimedGuard<'a, State>,
) -> Result<TimedGuard<'a, State>> {
    let group = st.log.take_group();
    let sync = inner.options.durability == Durability::Sync;
    drop(st);
    // A panic from here to the end (in the write, or while applying under the lock) would
    // leave `leader_active` set and the group's writers waiting forever, or let a later
    // leader acknowledge records never applied: the guard poisons the engine instead.
    let guard = LeaderGuard { inner };
    let written = group.write(sync, inner.options.log_writeback_bytes, &inner.counters);
    let mut st = inner.state.lock();
    st.log.leader_active = false;
    inner.options.fail_points.check_group_commit_panic();
    let outcome = written.and_then(|synced| {
        apply_group(inner, &mut st, &group.chunks, &group.records)?;
        Ok(synced)
    });
    std::mem::forget(guard);
    match outcome {
        Ok(synced) => {
            st.log.group_committed(&group, &synced);
            inner.group_done.notify_all();
            Ok(st)
        }
        Err(e) => {
            // A failed write or sync leaves the file's state unknown (fsyncgate): refuse
            // every later write; reopening recovers from what reached the disk.
            st.poisoned = Some(e.to_string());
            inner.group_done.notify_all();
            Err(e)
        }
    }
}

/// Applies a written group to the mapping table and indexes, in log order (settled devices'
/// records become lower-tier writes).
fn apply_group(
    inner: &Inner,
    st: &mut State,
    chunks: &[Chunk],
    records: &[QueuedRecord],
) -> Result<()> {
    let mut lower_ops = Vec::new();
    for queued in records {
        let chunk = &chunks[queued.chunk];
        let bytes = &chunk.bytes[queued.at..queued.at + queued.len];
        let Decode::Record(decoded) = record::decode(bytes, chunk.segment.seq_low()) else {
            return Err(Error::Poisoned(format!(
                "internal: a record the engine just encoded for {} at {} does not decode",
                chunk.segment.path.display(),
                chunk.offset + queued.at as u64
            )));
        };
        let position = LogPosition {
            segment_seq: chunk.segment.seq,
            offset: chunk.offset + queued.at as u64,
        };
        let lower_ops_before = lower_ops.len();
        st.apply(
            &inner.counters,
            &mut lower_ops,
            queued.device,
            &decoded.body,
            position,
            queued.len as u32,
        );
        if lower_ops.len() > lower_ops_before {
            st.log.mark_lower_write(position.segment_seq);
        }
    }
    inner.write_lower(st, &lower_ops)
}

/// fdatasyncs every segment written since its last sync (Periodic and None modes). A failure
/// poisons the engine: the kernel may have dropped the pages it could not write, and a
/// retried fdatasync would report success for data that is gone (fsyncgate).
pub(crate) fn sync_unsynced(inner: &Inner) -> Result<()> {
    let segments = inner.state.lock().log.take_unsynced();
    if segments.is_empty() {
        return Ok(());
    }
    match log_state::sync_segments(&segments, &inner.counters) {
        Ok(synced) => {
            inner.state.lock().log.mark_synced(&synced);
            Ok(())
        }
        Err(e) => {
            let mut st = inner.state.lock();
            st.poisoned.get_or_insert_with(|| e.to_string());
            inner.group_done.notify_all();
            Err(e)
        }
    }
}

/// The `roamkv-flush` thread of `Durability::Periodic`: syncs the log every `interval_ms`
/// until shutdown or poison.
pub(crate) fn run_periodic_sync(inner: &Inner, interval_ms: u64) {
    let interval = Duration::from_millis(interval_ms);
    loop {
        {
            let mut stop = inner.shutdown.lock();
            if !*stop {
                inner.shutdown_signal.wait_for(&mut stop, interval);
            }
            if *stop {
                return;
            }
        }
        if sync_unsynced(inner).is_err() {
            return; // poisoned: nothing more to sync
        }
    }
}
