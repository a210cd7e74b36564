//! Applying committed groups to the mapping table and the devices' indexes, in log order, one
//! applier at a time (`LogState::applier_active`). `Options::index_apply` says when:
//!
//! - `IndexApply::BeforeAck` (default): the syncer applies the groups it commits under the same
//!   hold of the state lock, and their writers wake after (`apply_all_locked`). Reads never wait.
//! - `IndexApply::AfterAck`: writers return once their group is written (and fdatasync'd, under
//!   `Sync`); the syncer, its role given up (the next fdatasync may start), applies the groups
//!   if the applier's role is free and leaves them to the `roamkv-index` thread if not
//!   (`apply_committed`, `run`). The CPU of indexing is then off the acknowledgement of every
//!   writer but the syncer's own, and off the next fdatasync's path (issue 31).
//!
//! **Read-your-writes** (`AfterAck`). Every device entry keeps the ticket of its newest queued
//! record (`DeviceEntry::last_ticket`). A read of a device waits until the index has applied
//! `min(last_ticket, committed_ticket)`: every write to the device acknowledged before the read
//! began is applied, and the read never waits for a write that is not acknowledged yet
//! (`wait_for_device`). Calls that look at every device (listing, stats, maintenance) wait for
//! everything committed (`wait_for_committed`). A reader (or a writer over the lag bound) that
//! finds the applier's role free applies the next group itself rather than wait for a thread
//! to be scheduled.
//!
//! **The lock.** After the acknowledgement, records are decoded outside the state lock and
//! applied under it a slice at a time (`APPLY_SLICE_RECORDS`, cut only between batches, so a
//! batch is seen whole). Writers apply or wait while the groups not yet applied hold more than
//! `INDEX_LAG_BYTES_MAX`.
//!
//! **Crashes.** Nothing here touches a file: what is durable is the log, and recovery rebuilds
//! the index from it (recovery/), however far the index lagged when the process died.
//! Maintenance takes a segment only once it is applied whole (`LogState::oldest_unaged`), and
//! the change feed reads only as far as the index has applied (`LogState::applied_end`).

use std::sync::atomic::Ordering;

use crate::commit_log::log_state::Group;
use crate::commit_log::position::LogPosition;
use crate::commit_log::record::{self, Body, Decode};
use crate::model::error::{Error, Result};
use crate::model::ids::DeviceId;
use crate::model::limits::APPLY_SLICE_RECORDS;
use crate::state::{Inner, State};
use crate::stats::Counters;
use crate::stats::timed_mutex::TimedGuard;

/// One decoded record of a group, ready to apply.
struct Decoded<'g> {
    device: DeviceId,
    body: Body<'g>,
    position: LogPosition,
    len: u32,
    /// Which writer's buffer it came from (chunk, piece): a batch is one piece, never split
    /// between slices.
    piece: (usize, usize),
}

/// Poisons the engine if the index's thread unwinds: readers would otherwise wait forever for
/// a group it will never apply.
struct ApplierGuard<'a> {
    inner: &'a Inner,
}

impl Drop for ApplierGuard<'_> {
    fn drop(&mut self) {
        fail(self.inner, "the index's thread panicked; reopen to recover");
    }
}

/// The index can go no further: the engine is poisoned (writes refused) and the thread stops
/// (reads that need more than it applied fail).
fn fail(inner: &Inner, reason: &str) {
    let mut st = inner.state.lock();
    inner.poison(&mut st, reason);
    inner.index_stopped.store(true, Ordering::Relaxed);
    inner.index_applied.notify_all();
}

/// The `roamkv-index` thread: applies committed groups until the engine stops. A poisoned
/// engine (a failed write or fdatasync) still has its acknowledged groups applied: reads go on.
pub(crate) fn run(inner: &Inner) {
    let guard = ApplierGuard { inner };
    let mut st = inner.state.lock();
    while !inner.index_stopped.load(Ordering::Relaxed) {
        match help_apply(inner, &mut st) {
            Ok(true) => {}
            Ok(false) => st.wait(&inner.index_wanted),
            // help_apply poisoned the engine and stopped the index.
            Err(_) => break,
        }
    }
    drop(st);
    std::mem::forget(guard);
}

/// Takes the applier's role and the oldest committed group not yet applied, if the role is free
/// and there is one. Whoever holds the role applies the group and gives the role back
/// (`apply_group`): the index's thread, or a reader that would otherwise wait for it.
fn take_group(st: &mut TimedGuard<'_, State>) -> Option<Group> {
    if st.log.applier_active {
        return None;
    }
    let group = st.log.unapplied.pop_front()?;
    st.log.applier_active = true;
    Some(group)
}

/// Stops the index's thread (at engine close or abandon): groups not applied stay so, as in a
/// killed process; recovery applies them from the log at the next open.
pub(crate) fn stop(inner: &Inner) {
    let _st = inner.state.lock();
    inner.index_stopped.store(true, Ordering::Relaxed);
    inner.index_wanted.notify_all();
    inner.index_applied.notify_all();
}

/// Applies one group (the caller holds the applier's role, not the lock): decodes its records
/// without the lock, applies them a slice at a time under it, and marks the group applied and
/// gives the role back with its last slice.
fn apply_group(inner: &Inner, group: &Group) -> Result<()> {
    inner
        .options
        .fail_points
        .delay_index_apply(|| inner.index_stopped.load(Ordering::Relaxed));
    let decoded = decode_group(group)?;
    let mut start = 0;
    loop {
        // About APPLY_SLICE_RECORDS readings (a PUTS record counts its readings), then on to
        // the end of the batch.
        let mut end = start;
        let mut readings = 0;
        while end < decoded.len() && readings < APPLY_SLICE_RECORDS {
            readings += match decoded[end].body {
                Body::Puts { readings, .. } => readings.len(),
                _ => 1,
            };
            end += 1;
        }
        while end < decoded.len() && decoded[end].piece == decoded[end - 1].piece {
            end += 1;
        }
        let mut st = inner.state.lock();
        for d in &decoded[start..end] {
            st.apply(&inner.counters, d.device, &d.body, d.position, d.len);
        }
        if end == decoded.len() {
            st.log.group_applied(group);
            st.log.applier_active = false;
            inner.index_applied.notify_all();
            if !st.log.unapplied.is_empty() {
                inner.index_wanted.notify_one();
            }
            return Ok(());
        }
        drop(st);
        start = end;
    }
}

/// The group's records, decoded. They were sealed by this process: their checksums are not
/// computed again (`decode_trusted`).
fn decode_group(group: &Group) -> Result<Vec<Decoded<'_>>> {
    group
        .records
        .iter()
        .map(|queued| {
            let segment = &group.chunks[queued.chunk].segment;
            let position = group.position(queued);
            match record::decode_trusted(group.record(queued), segment.seq_low()) {
                Decode::Record(decoded) => Ok(Decoded {
                    device: queued.device,
                    body: decoded.body,
                    position,
                    len: queued.len as u32,
                    piece: (queued.chunk, queued.piece),
                }),
                _ => Err(Error::Poisoned(format!(
                    "internal: a record the engine just encoded for {} at {} does not decode",
                    segment.path.display(),
                    position.offset
                ))),
            }
        })
        .collect()
}

/// Waits until every acknowledged write to `device` is applied (see the module's doc). An
/// unknown device has nothing to wait for.
pub(crate) fn wait_for_device(
    inner: &Inner,
    st: &mut TimedGuard<'_, State>,
    device: &str,
) -> Result<()> {
    let Some((_, entry)) = st.map.lookup(device) else {
        return Ok(());
    };
    let ticket = entry.last_ticket.min(st.log.committed_ticket);
    wait_applied(inner, st, ticket)
}

/// Waits until every group committed so far is applied.
pub(crate) fn wait_for_committed(inner: &Inner, st: &mut TimedGuard<'_, State>) -> Result<()> {
    let ticket = st.log.committed_ticket;
    wait_applied(inner, st, ticket)
}

/// `wait_for_committed`, taking the lock.
pub(crate) fn catch_up(inner: &Inner) -> Result<()> {
    wait_for_committed(inner, &mut inner.state.lock())
}

/// `IndexApply::BeforeAck`: the syncer applies every committed group at once, holding the state
/// lock throughout (the groups were committed under the same hold: their writers wake after).
pub(crate) fn apply_all_locked(inner: &Inner, st: &mut TimedGuard<'_, State>) -> Result<()> {
    while let Some(group) = take_group(st) {
        let decoded = match decode_group(&group) {
            Ok(decoded) => decoded,
            Err(e) => {
                st.log.applier_active = false;
                inner.poison(st, &e.to_string());
                return Err(e);
            }
        };
        for d in &decoded {
            st.apply(&inner.counters, d.device, &d.body, d.position, d.len);
        }
        st.log.group_applied(&group);
        st.log.applier_active = false;
    }
    inner.index_applied.notify_all();
    Ok(())
}

/// `IndexApply::AfterAck`: the syncer, once its groups are committed (their writers are on their way): applies the
/// groups committed so far on its own thread if the applier's role is free — at one writer the
/// whole group commit stays on one thread, with no hand-off — and leaves what it cannot apply
/// (the role is busy) to the index's thread.
pub(crate) fn apply_committed(inner: &Inner, st: &mut TimedGuard<'_, State>) -> Result<()> {
    let waiting = st.log.unapplied.len();
    for _ in 0..waiting {
        if !help_apply(inner, st)? {
            break;
        }
    }
    if !st.log.unapplied.is_empty() {
        inner.index_wanted.notify_one();
    }
    Ok(())
}

/// Applies the next group on the caller's thread if the applier's role is free and a group is
/// waiting; false if not.
fn help_apply(inner: &Inner, st: &mut TimedGuard<'_, State>) -> Result<bool> {
    let Some(group) = take_group(st) else {
        return Ok(false);
    };
    let guard = ApplierGuard { inner };
    let applied = st.unlocked(|| apply_group(inner, &group));
    std::mem::forget(guard);
    if let Err(e) = applied {
        let reason = e.to_string();
        st.unlocked(|| fail(inner, &reason));
        return Err(e);
    }
    Ok(true)
}

/// Waits until `ticket` is applied. A reader that finds the applier's role free applies the
/// next group itself rather than wait for the index's thread to be scheduled (on two cores
/// busy with writers, that wait was the most of a read's time).
fn wait_applied(inner: &Inner, st: &mut TimedGuard<'_, State>, ticket: u64) -> Result<()> {
    if st.log.applied_ticket >= ticket {
        return Ok(());
    }
    Counters::add(&inner.counters.index_waits, 1);
    while st.log.applied_ticket < ticket {
        if inner.index_stopped.load(Ordering::Relaxed) {
            inner.check_poisoned(st)?;
            return Err(Error::Poisoned(
                "the engine is closing: the index's thread has stopped".into(),
            ));
        }
        if help_apply(inner, st)? {
            continue;
        }
        st.wait(&inner.index_applied);
    }
    Ok(())
}

/// Writers, before queueing: while the index lags by more than `INDEX_LAG_BYTES_MAX`, a writer
/// applies the next group itself if the applier's role is free, and waits for it otherwise. So
/// when writers outrun the index's thread (on two cores they can), they lend it their CPU, and
/// a read never waits for more than about the bound's worth of applying.
pub(crate) fn wait_for_lag(inner: &Inner, st: &mut TimedGuard<'_, State>) -> Result<()> {
    while st.log.unapplied_bytes > crate::model::limits::INDEX_LAG_BYTES_MAX {
        inner.check_poisoned(st)?;
        if inner.index_stopped.load(Ordering::Relaxed) {
            return Ok(());
        }
        Counters::add(&inner.counters.index_lag_waits, 1);
        if help_apply(inner, st)? {
            continue;
        }
        st.wait(&inner.index_applied);
    }
    Ok(())
}
