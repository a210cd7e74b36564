//! The group commit (LevelDB's `BuildBatchGroup`, pipelined as RocksDB's pipelined write is).
//! Writers encode and checksum their records outside the state lock, then take it briefly to
//! make room, place and queue them (`make_room`, `place`, `LogState::enqueue`), and call
//! `wait_for`. Two roles are then taken by whichever waiting writer finds them free:
//!
//! - the **writer** takes everything queued as one group, releases the lock and writes it
//!   (`Group::write`: one pwritev per segment touched), then hands it on, in log order;
//! - the **syncer** takes every group written so far, releases the lock, fdatasyncs their
//!   segments once (`Sync` mode; the other modes sync elsewhere), retakes the lock, marks the
//!   groups committed and has them applied to the mapping table and the indexes (`index_apply`:
//!   before their writers wake, by default, or after).
//!
//! So the next group is written while this one's fdatasync runs, and one fdatasync covers every
//! group written before it. `Periodic` and `None` modes sync here too (`sync_unsynced`): on the
//! flush thread's interval, before a pass drops windows, and at close.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::commit::index_apply;
use crate::commit_log::log_state::{self, Group};
use crate::commit_log::segment::Segment;
use crate::commit_log::waiters::{CommitWaiters, Roles, Step};
use crate::model::error::{Error, Result};
use crate::model::limits::{COMMIT_PARK_RECHECK_MS, WRITE_STALL_POLL_MS, WRITER_YIELD_US};
use crate::options::{Durability, IndexApply};
use crate::state::{Inner, State};
use crate::stats::Counters;
use crate::stats::timed_mutex::TimedGuard;

/// A write's time waiting for log room, over all its attempts.
#[derive(Default)]
pub(crate) struct Stall {
    started: Option<Instant>,
}

/// Poisons the engine if a writer or syncer unwinds (a panic while it holds a role would leave
/// the role taken and every waiter waiting forever).
struct RoleGuard<'a> {
    inner: &'a Inner,
}

impl Drop for RoleGuard<'_> {
    fn drop(&mut self) {
        // Only reached by unwinding: the normal path forgets the guard. The role's own state
        // guard was made after this one, so unwinding has already released it.
        let mut st = self.inner.state.lock();
        st.log.writer_active = false;
        st.log.syncer_active = false;
        self.inner
            .poison(&mut st, "a group commit panicked; reopen to recover");
    }
}

/// Makes sure the active segment has `len` free bytes, moving to a ready spare if it lacks
/// them. When the log is at its budget, waits (the write stall, bounded by
/// `write_stall_ms_max` over the whole write) for maintenance to retire segments, and fails
/// with `Error::NoSpace` past the bound. Returns false when it released the lock to wait: the
/// caller must then re-check what it read under the lock. Never waits with the lock held: a
/// spare not ready yet is waited for with the lock released.
pub(crate) fn make_room(
    inner: &Inner,
    st: &mut TimedGuard<'_, State>,
    len: usize,
    stall: &mut Stall,
) -> Result<bool> {
    if st.log.has_room(len) {
        return Ok(true);
    }
    // A hold past its cap (or any hold, near the budget) goes now, before a writer could wait
    // for the segments it keeps; maintenance retires them.
    if crate::commit::hold::enforce_cap(inner, st) {
        inner.wake_maintenance();
    }
    let live_bytes = inner.spares.live_bytes.load(Ordering::Relaxed);
    if live_bytes + inner.options.segment_bytes > inner.spares.budget_bytes {
        return stall_for_room(inner, st, stall, None);
    }
    let segment = match inner.spares.try_take() {
        Ok(Some(segment)) => Arc::new(segment),
        Ok(None) => {
            // None ready yet: wait for the preparer without the state lock (a writer holding
            // it would stop every reader and writer for the whole zero-fill).
            st.unlocked(|| inner.spares.wait_ready());
            return Ok(false);
        }
        // The preparer found no room for a new segment (the budget, or the file system) when
        // it last tried: maintenance may have retired segments since, or may now. The writer
        // stalls as for a full budget, within the same bound.
        Err(e @ Error::NoSpace { .. }) => return stall_for_room(inner, st, stall, Some(e)),
        Err(e) => return Err(e),
    };
    if let Some(started) = stall.started.take() {
        Counters::add(
            &inner.counters.write_stall_ms,
            started.elapsed().as_millis() as u64,
        );
    }
    st.log.activate(segment, inner.options.clock.now_ms());
    Ok(true)
}

/// A writer waits for log room: maintenance is woken and the writer waits for a retirement,
/// for at most `write_stall_ms_max` over the whole write; past it, `NoSpace` (`refused`: the
/// preparer's own refusal, if that is what stopped it). `Ok(false)`: try again.
fn stall_for_room(
    inner: &Inner,
    st: &mut TimedGuard<'_, State>,
    stall: &mut Stall,
    refused: Option<Error>,
) -> Result<bool> {
    let started = *stall.started.get_or_insert_with(|| {
        Counters::add(&inner.counters.write_stalls, 1);
        Instant::now()
    });
    let waited = started.elapsed();
    let bound = Duration::from_millis(inner.options.write_stall_ms_max);
    if waited >= bound {
        Counters::add(&inner.counters.write_stall_ms, waited.as_millis() as u64);
        Counters::add(&inner.counters.no_space_errors, 1);
        return Err(refused.unwrap_or_else(|| {
            inner
                .spares
                .no_space("the log budget is full and maintenance freed no segment in time")
        }));
    }
    inner.wake_maintenance();
    let timeout = (bound - waited).min(Duration::from_millis(WRITE_STALL_POLL_MS));
    st.wait_for(&inner.space_freed, timeout);
    Ok(false)
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
    if st.log.active_since_ms.is_none() {
        st.log.active_since_ms = Some(inner.options.clock.now_ms());
    }
    (segment, offset)
}

/// Seals the active segment once it has held records for half a management time (the log moves
/// to a ready spare): a segment's readings leave the log one management time after it is
/// sealed, so every reading leaves between one and one and a half management times after it was
/// written, however slowly the log fills. Called by maintenance, which waits for a ready spare
/// (without the state lock) if there is none yet.
/// `force`: seal it now if it holds records, whatever its age (its readings must leave the log
/// early: the index is over its cap).
pub(crate) fn seal_if_old(inner: &Inner, force: bool) -> Result<()> {
    let now_ms = inner.options.clock.now_ms();
    let is_old = |st: &State| {
        !st.log.sealed
            && st.log.active_since_ms.is_some_and(|since| {
                force || now_ms >= since.saturating_add(inner.options.management_time_ms / 2)
            })
    };
    if !is_old(&inner.state.lock()) {
        return Ok(());
    }
    let live_bytes = inner.spares.live_bytes.load(Ordering::Relaxed);
    if live_bytes + inner.options.segment_bytes > inner.spares.budget_bytes {
        return Ok(()); // the log is at its budget: passes must free a segment first
    }
    inner.spares.wait_ready();
    let mut st = inner.state.lock();
    inner.check_poisoned(&st)?;
    if !is_old(&st) {
        return Ok(()); // a writer moved the log on meanwhile
    }
    let Some(segment) = inner.spares.try_take()? else {
        return Ok(());
    };
    st.log.activate(Arc::new(segment), now_ms);
    // The SEGMENT_END is queued: write it (as any writer would), so the segment is sealed on disk.
    let ticket = st.log.next_ticket;
    wait_for(inner, st, ticket)
}

/// Waits until `ticket` is committed, writing or syncing groups while the roles are free.
/// With nothing to do, a writer first yields its CPU for up to `WRITER_YIELD_US` (RocksDB's write
/// thread does the same) and only then parks: a group commits in tens of microseconds, and
/// parking and waking every waiter of every group cost a third of the write path's CPU on 2
/// cores (docs/BENCHMARKS.md, "Diagnosis"). The yield is adaptive: while commits take longer
/// than the yield on average (an fdatasync each, under `Sync`), yielding only burns the CPU
/// the other writers need (issue 23: 30 -> 60 µs per reading at one reading per commit), and a
/// writer parks at once.
pub(crate) fn wait_for<'a>(
    inner: &'a Inner,
    mut st: TimedGuard<'a, State>,
    ticket: u64,
) -> Result<()> {
    let started = Instant::now();
    let mut yielded = false;
    loop {
        if st.log.committed_ticket < ticket {
            inner.check_poisoned(&st)?;
        }
        // Its own group synced first, then the queue written, then groups written ahead of
        // it synced (syncing them is the way to its own).
        match Roles::of(&st.log).step(ticket) {
            Step::Committed => {
                drop(st);
                note_commit_wait(inner, started);
                return Ok(());
            }
            Step::Sync => st = sync_and_commit(inner, st, ticket)?,
            Step::Write => st = write_group(inner, st, ticket)?,
            Step::Wait => {
                if !yielded && commits_are_quick(inner) {
                    yielded = true;
                    let epoch = inner.group_epoch.load(Ordering::Acquire);
                    st.unlocked(|| yield_while_unchanged(inner, epoch));
                    continue;
                }
                park(inner, &mut st, ticket);
                yielded = false;
            }
        }
    }
}

/// Parks a waiting writer until a change of the group commit wakes it (commit_log/waiters.rs),
/// re-checking every `COMMIT_PARK_RECHECK_MS`: a re-check that finds work it was not woken
/// for is a missed wake, counted (`commit_wakes_missed`) and taken up.
fn park(inner: &Inner, st: &mut TimedGuard<'_, State>, ticket: u64) {
    let wake = st.commit_waiters.register(ticket);
    st.unlocked(|| wake.park(Duration::from_millis(COMMIT_PARK_RECHECK_MS)));
    if !wake.is_woken() {
        st.commit_waiters.forget(&wake);
        if CommitWaiters::has_work(&Roles::of(&st.log), ticket) {
            Counters::add(&inner.counters.commit_wakes_missed, 1);
        }
    }
}

/// Whether a commit takes, on average, no longer than a writer yields before it parks.
fn commits_are_quick(inner: &Inner) -> bool {
    inner.commit_wait_us_avg.load(Ordering::Relaxed) <= WRITER_YIELD_US
}

/// Folds one writer's wait for its commit into the running average (weight 1/8: a few dozen
/// commits follow a change of load). Writers race on it; an estimate is all it needs to be.
fn note_commit_wait(inner: &Inner, started: Instant) {
    let waited_us = started.elapsed().as_micros().min(u64::MAX as u128) as u64;
    let avg = inner.commit_wait_us_avg.load(Ordering::Relaxed);
    let next = avg - avg / 8 + waited_us / 8;
    inner.commit_wait_us_avg.store(next, Ordering::Relaxed);
}

/// Yields the CPU until the group commit's state changes (`group_epoch` moves on) or
/// `WRITER_YIELD_US` passes.
fn yield_while_unchanged(inner: &Inner, epoch: u64) {
    let started = Instant::now();
    while inner.group_epoch.load(Ordering::Acquire) == epoch
        && started.elapsed() < Duration::from_micros(WRITER_YIELD_US)
    {
        std::thread::yield_now();
    }
}

/// The writer's role: takes everything queued, writes it without the lock, hands it to the
/// syncer.
fn write_group<'a>(
    inner: &'a Inner,
    mut st: TimedGuard<'a, State>,
    ticket: u64,
) -> Result<TimedGuard<'a, State>> {
    let group = st.log.take_group();
    let sync = inner.options.durability == Durability::Sync;
    drop(st);
    let guard = RoleGuard { inner };
    let written = group.write(sync, inner.options.log_writeback_bytes, &inner.counters);
    let mut st = inner.state.lock();
    st.log.writer_active = false;
    std::mem::forget(guard);
    match written {
        Ok(()) => {
            st.log.written.push_back(group);
            inner.groups_changed(&mut st, ticket);
            Ok(st)
        }
        Err(e) => {
            // A failed write leaves the file's state unknown: refuse every later write;
            // reopening recovers from what reached the disk.
            inner.poison(&mut st, &e.to_string());
            Err(e)
        }
    }
}

/// The syncer's role: takes every written group, fdatasyncs their segments once (Sync mode),
/// marks them committed and has them applied to the index: under the lock before their writers
/// return (`IndexApply::BeforeAck`), or after, without the syncer's role, so that the next
/// fdatasync may start as soon as this one returns (`IndexApply::AfterAck`).
fn sync_and_commit<'a>(
    inner: &'a Inner,
    mut st: TimedGuard<'a, State>,
    ticket: u64,
) -> Result<TimedGuard<'a, State>> {
    let groups: Vec<Group> = st.log.written.drain(..).collect();
    st.log.syncer_active = true;
    let sync = inner.options.durability == Durability::Sync;
    drop(st);
    let guard = RoleGuard { inner };
    inner.options.fail_points.delay_group_commit();
    let synced = if sync {
        log_state::sync_segments(&log_state::segments_to_sync(&groups), &inner.counters)
    } else {
        Ok(Vec::new())
    };
    let mut st = inner.state.lock();
    st.log.syncer_active = false;
    inner.options.fail_points.check_group_commit_panic();
    std::mem::forget(guard);
    match synced {
        Ok(synced) => {
            st.log.groups_committed(groups, &synced);
            match inner.options.index_apply {
                IndexApply::BeforeAck => {
                    // The lock is held from the commit through the apply: no writer sees its
                    // ticket committed before its records are indexed.
                    index_apply::apply_all_locked(inner, &mut st)?;
                    inner.groups_changed(&mut st, ticket);
                }
                IndexApply::AfterAck => {
                    inner.groups_changed(&mut st, ticket);
                    index_apply::apply_committed(inner, &mut st)?;
                }
            }
            Ok(st)
        }
        Err(e) => {
            // A failed fdatasync may have dropped the pages it could not write (fsyncgate): it
            // is never retried into a success. Refuse every later write.
            inner.poison(&mut st, &e.to_string());
            Err(e)
        }
    }
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
            inner.poison(&mut st, &e.to_string());
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
