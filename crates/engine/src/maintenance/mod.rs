//! Maintenance: readings leave the log, sorted and in bulk, and the lower tier is kept within
//! its bounds (docs/ENGINE.md, "Leaving the log").
//!
//! - `age_out`: a pass takes the oldest sealed segment once it is due, reads it once, and
//!   writes the readings of devices still here as one sorted run (a window) into the lower
//!   tier's last level. The segment then retires. This is the only way data leaves the log.
//! - `consolidate`: a device's windowed readings move into the settled space when it has more
//!   windows than a read should touch, and windows mostly dead are emptied the same way, so
//!   that window files stay within their space bound.
//! - Here: which work is due (`next_work`), retirement of segments that left the log, and the
//!   dropping of windows no live device reads.
//!
//! **When a segment is due** (`Options::move_rule`):
//! - `MoveRule::AtManagementTime` (default): one management time after it was sealed, or
//!   earlier when the log is over `LOG_PRESSURE_PERCENT` of its budget or the index over its
//!   cap. A reading leaves the log about one management time after it was written, if its
//!   device is still here; a device that left by then costs nothing more.
//! - `MoveRule::Lazy`: only under that pressure. Readings stay in the log as long as its budget
//!   allows: the fewest bytes moved, the longest recovery.
//!
//! It may not take writes or answer queries; it touches the state only under the lock rule and
//! the commit path only to sync what a pass depends on.

pub(crate) mod age_out;
pub(crate) mod consolidate;

use age_out::Reason;
use consolidate::Scope;

use parking_lot::MutexGuard;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::commit::group_commit;
use crate::commit::index_apply;
use crate::commit_log::spares::Retired;
use crate::lower::CatalogOp;
use crate::lower::Space;
use crate::model::error::Result;
use crate::model::ids::{DeviceId, LowerId, SegmentSeq, WindowId};
use crate::model::limits::{
    CONSOLIDATION_BYTES_MAX, INDEX_LOW_WATER_PERCENT, LOG_PRESSURE_PERCENT,
    WINDOW_RECLAIM_START_PERCENT, WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX,
};
use crate::options::MoveRule;
use crate::options::failpoints::PassStep;
use crate::state::{Inner, State};
use crate::stats::Counters;

/// What maintenance should do next.
enum Work {
    AgeOut { seq: SegmentSeq, reason: Reason },
    Consolidate(BTreeMap<DeviceId, Scope>),
    Nothing,
}

/// One round of maintenance: segments that are due leave the log, then consolidations, each
/// followed by retirement and window drops, until nothing is due.
///
/// **Reclaim keeps pace with ingest.** While window files are due for reclaim, a round starts
/// with a consolidation that empties the windows with the least live data, and every pass
/// that moves readings out of the log (and so makes windows) is followed by another, before
/// the next pass: at any ingest rate the lower tier reclaims as fast as it grows. Without the
/// turn, passes at a high ingest rate are always due and consolidation, which ran only when
/// nothing was due, never ran (issue 29).
pub(crate) fn maintain(inner: &Inner) -> Result<()> {
    let mut outcome = Ok(());
    // Reclaim first: windows that became due while the last round ran (devices keep leaving)
    // do not wait behind the passes that are due now.
    let mut reclaim_turn = true;
    loop {
        // One step at a time: the lock is taken for each step and handed on fairly after it,
        // not held for the round. A round lasts while work is due, which at a high ingest rate
        // is as long as the writers write, and a backup's snapshot (`backup::Snapshot::take`)
        // and a writer aging the log for memory wait for this lock between steps: held for the
        // round, it kept a backup during ingest waiting for more than 13 minutes (CI, after
        // 6b0b6b1's PUTS records made ingest cheaper than the moves behind it).
        let one_at_a_time = inner.maintenance.lock();
        // Shutdown does not wait for every due segment: they stay in the log and leave it
        // after the next open.
        if *inner.shutdown.lock() {
            break;
        }
        // What was sealed is taken once the index holds it whole: catching up first keeps a
        // round's work what the log holds, not what the index's thread has reached.
        if let Err(e) =
            group_commit::seal_if_old(inner, false).and_then(|()| index_apply::catch_up(inner))
        {
            outcome = Err(e);
            break;
        }
        let work = next_work(inner, false, reclaim_turn);
        reclaim_turn = !matches!(work, Work::Consolidate(_));
        let done = match work {
            Work::AgeOut { seq, reason } => age_out::pass(inner, seq, reason).map(|()| true),
            Work::Consolidate(devices) => consolidate::pass(inner, &devices),
            Work::Nothing => break,
        };
        let tidied = tidy(inner);
        match done.and_then(|progressed| tidied.map(|()| progressed)) {
            Ok(true) => {}
            // Nothing the consolidation asked for could move now (its devices left, or wait
            // for a trim): asking again this round would ask the same.
            Ok(false) => break,
            Err(e) => {
                // The step was rolled back or will be retried at the next round. Other work
                // this round would pick the same step again: stop here.
                outcome = Err(e);
                break;
            }
        }
        MutexGuard::unlock_fair(one_at_a_time);
    }
    let _one_at_a_time = inner.maintenance.lock();
    outcome.and(tidy(inner))
}

/// Drops windows nobody reads, retires segments that left the log and compacts away settled
/// readings that died, timing all three.
fn tidy(inner: &Inner) -> Result<()> {
    let started = Instant::now();
    // Windows first: a consolidation's emptied windows hold disk beside their copy until then.
    let dropped = drop_dead_windows(inner);
    let retired = retire_segments(inner);
    let reclaimed = reclaim_settled(inner);
    Counters::add_us_since(&inner.counters.pass_retire_us, started);
    retired.and(dropped).and(reclaimed)
}

/// Settled readings deleted by a durable catalog batch (departures, trims) leave the settled
/// space's files at once: its files that lie wholly in a deleted range are dropped, and the
/// range is compacted (the files it overlaps are rewritten without the dead readings; what
/// that writes counts in the lower tier's bytes written). The LSM would reclaim them only when
/// its own compaction happened to reach them, which a settled space that is rarely written
/// may never do.
fn reclaim_settled(inner: &Inner) -> Result<()> {
    let ranges = std::mem::take(&mut inner.state.lock().lower.settled_dead);
    if ranges.is_empty() {
        return Ok(());
    }
    match inner.lower.reclaim(Space::Settled, &ranges) {
        Ok(()) => {
            Counters::add(&inner.counters.settled_reclaims, ranges.len() as u64);
            Ok(())
        }
        Err(e) => {
            // Tried again at the next round (the readings are deleted and stay so).
            inner.state.lock().lower.settled_dead.extend(ranges);
            Err(e)
        }
    }
}

fn log_under_pressure(inner: &Inner) -> bool {
    inner.spares.log_bytes() > inner.spares.budget_bytes / 100 * LOG_PRESSURE_PERCENT
}

/// The next piece of work, if any (`for_memory`: only what frees index memory; `reclaim_turn`:
/// a pass just made windows, so reclaim comes first if windows are over their bound).
fn next_work(inner: &Inner, for_memory: bool, reclaim_turn: bool) -> Work {
    let now_ms = inner.options.clock.now_ms();
    let pressure = log_under_pressure(inner);
    let mut st = inner.state.lock();
    if reclaim_turn && !for_memory {
        let reclaim = space_candidates(&st, inner.options.window_dead_bytes_min);
        if !reclaim.is_empty() {
            return Work::Consolidate(reclaim);
        }
    }
    let index_over =
        st.index_account.bytes > inner.options.index_bytes_max / 100 * INDEX_LOW_WATER_PERCENT;
    if let Some((seq, live)) = st.log.oldest_unaged() {
        let due = live.sealed_at_ms.is_some_and(|sealed_at| {
            now_ms >= sealed_at.saturating_add(inner.options.management_time_ms)
        });
        // Every device that wrote readings there has left: nothing to read or move, only the
        // catalog's bookkeeping; its space returns at once.
        let dead = live.holders.iter().all(|id| st.map.entry(*id).is_none());
        let reason = match inner.options.move_rule {
            _ if for_memory => index_over.then_some(Reason::Early),
            _ if dead => Some(Reason::Dead),
            MoveRule::AtManagementTime if due => Some(Reason::Due),
            _ if pressure || index_over => Some(Reason::Early),
            _ => None,
        };
        if let Some(reason) = reason {
            return Work::AgeOut { seq, reason };
        }
    }
    if for_memory {
        return Work::Nothing;
    }
    let wanted = consolidation_candidates(&mut st, inner.options.window_dead_bytes_min);
    if wanted.is_empty() {
        Work::Nothing
    } else {
        Work::Consolidate(wanted)
    }
}

/// Devices to consolidate: those with too many windows or trims, then, while window files are
/// over their space bound, the devices of the windows with the least live data.
fn consolidation_candidates(st: &mut State, dead_bytes_min: u64) -> BTreeMap<DeviceId, Scope> {
    let State { map, lower, .. } = st;
    let wanted: BTreeMap<DeviceId, Scope> = std::mem::take(&mut lower.consolidation_wanted)
        .into_iter()
        .filter(|id| map.entry(*id).is_some_and(|e| e.lower.is_some()))
        .map(|id| (id, Scope::AllWindows))
        .collect();
    if !wanted.is_empty() {
        return wanted;
    }
    space_candidates(st, dead_bytes_min)
}

/// Whether window files are due for reclaim: past `WINDOW_RECLAIM_START_PERCENT` of their space
/// bound (more than `WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX` of their live bytes, with more than
/// `dead_bytes_min` dead: `WINDOW_DEAD_BYTES_MIN` unless a test lowers it), in both of its parts:
/// windows keep dying while a consolidation runs, and reclaim that starts at the bound is over it
/// until it ends.
pub(crate) fn windows_due_for_reclaim(
    file_bytes: u64,
    live_bytes: u64,
    dead_bytes_min: u64,
) -> bool {
    let start = |over: u64| over * WINDOW_RECLAIM_START_PERCENT / 100;
    let amplification_start =
        100 + start(WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX.saturating_sub(100));
    file_bytes as u128 * 100 > live_bytes as u128 * amplification_start as u128
        && file_bytes.saturating_sub(live_bytes) > start(dead_bytes_min)
}

/// While window files are due for reclaim: the devices still reading the windows with
/// the least live data per file byte, each with those windows, up to
/// `CONSOLIDATION_BYTES_MAX` of live bytes to move (at least one window). Emptied, the windows
/// drop whole.
fn space_candidates(st: &State, dead_bytes_min: u64) -> BTreeMap<DeviceId, Scope> {
    let (file_bytes, live_bytes) = st.lower.window_bytes();
    if !windows_due_for_reclaim(file_bytes, live_bytes, dead_bytes_min) {
        return BTreeMap::new();
    }
    let mut emptiest: Vec<(WindowId, &crate::state::Window)> = st
        .lower
        .windows
        .iter()
        .filter(|(_, w)| w.live_bytes > 0)
        .map(|(win, w)| (*win, w))
        .collect();
    // Least live per file byte first (a / a_file < b / b_file, without division).
    emptiest.sort_by(|(_, a), (_, b)| {
        (a.live_bytes as u128 * b.file_bytes.max(1) as u128)
            .cmp(&(b.live_bytes as u128 * a.file_bytes.max(1) as u128))
    });
    let mut wanted: BTreeMap<DeviceId, Scope> = BTreeMap::new();
    let mut budget = CONSOLIDATION_BYTES_MAX;
    for (win, window) in emptiest {
        if !wanted.is_empty() && window.live_bytes > budget {
            break;
        }
        budget = budget.saturating_sub(window.live_bytes);
        for id in &window.members {
            let reads_it = st.map.entry(*id).is_some_and(|e| {
                e.lower
                    .as_ref()
                    .is_some_and(|p| p.windows.iter().any(|(w, _)| *w == win))
            });
            if reads_it {
                wanted
                    .entry(*id)
                    .or_insert_with(|| Scope::Windows(BTreeSet::new()))
                    .join(Scope::Windows(BTreeSet::from([win])));
            }
        }
    }
    wanted
}

/// Passes that take segments early until the index is below its low-water mark. Writers that
/// find the index over its cap call this, and so wait for it (back-pressure).
pub(crate) fn age_for_memory(inner: &Inner) -> Result<()> {
    let _one_at_a_time = inner.maintenance.lock();
    let mut sealed = false;
    loop {
        index_apply::catch_up(inner)?;
        match next_work(inner, true, false) {
            Work::AgeOut { seq, reason } => {
                age_out::pass(inner, seq, reason)?;
                tidy(inner)?;
            }
            // The index is over its mark but every reading is in the active segment: seal it
            // (once), so that its readings can leave.
            _ if !sealed && index_over_low_water(inner) => {
                group_commit::seal_if_old(inner, true)?;
                sealed = true;
            }
            _ => return Ok(()),
        }
    }
}

fn index_over_low_water(inner: &Inner) -> bool {
    inner.state.lock().index_account.bytes
        > inner.options.index_bytes_max / 100 * INDEX_LOW_WATER_PERCENT
}

/// Retires the oldest segments whose readings left the log (and that no log reader holds).
/// Segments are retired strictly in order, so the live log is always a suffix of the whole
/// log: replayed in order, it never shows a device's records without the later DEPART that
/// cancels them.
fn retire_segments(inner: &Inner) -> Result<()> {
    let mut st = inner.state.lock();
    crate::commit::hold::enforce_cap(inner, &mut st);
    let seqs = st.log.retirable();
    if seqs.is_empty() {
        return Ok(());
    }
    let retired = st.log.remove(&seqs);
    let retired_bytes: u64 = retired.iter().map(|s| s.bytes).sum();
    inner
        .spares
        .live_bytes
        .fetch_sub(retired_bytes, Ordering::Relaxed);
    drop(st);
    let mut outcome = Ok(());
    for segment in retired {
        Counters::add(&inner.counters.segments_retired, 1);
        match segment.retire() {
            Ok((file, path)) => inner.spares.retire(Retired {
                file,
                path,
                bytes: segment.bytes,
            }),
            Err(e) => outcome = Err(e),
        }
    }
    inner.space_freed.notify_all();
    outcome.and_then(|()| inner.options.fail_points.check(PassStep::Retired))
}

/// Drops windows no live device reads, once the records that killed them are durable (in the
/// log or the catalog): a power cut can then never bring back a device whose windows are gone.
/// Also forgets catalog entries of devices that left before their place was given.
///
/// Deaths that are durable already go first, without waiting for the log's sync: a
/// consolidation's emptied windows (its catalog batch made their deaths durable) would
/// otherwise wait behind an fdatasync of everything written since the last one (under `none`
/// at ~250 K ops/s, up to a second), while both they and their consolidated copy hold disk:
/// the seconds `bench steady` saw over the window bound (issue 29).
fn drop_dead_windows(inner: &Inner) -> Result<()> {
    drop_durable_deaths(inner)?;
    let waiting = {
        let st = inner.state.lock();
        !st.lower.dead.is_empty() || !st.lower.forget.is_empty()
    };
    if waiting {
        group_commit::sync_unsynced(inner)?;
        drop_durable_deaths(inner)?;
    }
    Ok(())
}

/// Drops the dead windows and forgets the departed places whose deaths are durable now.
fn drop_durable_deaths(inner: &Inner) -> Result<()> {
    let (dead, forget) = {
        let mut st = inner.state.lock();
        let durable = st.log.durable_end;
        let State { lower, .. } = &mut *st;
        let (dead, alive): (Vec<_>, Vec<_>) =
            lower.dead.drain(..).partition(|(_, at)| *at <= durable);
        lower.dead = alive;
        let (forget, later): (Vec<_>, Vec<_>) =
            lower.forget.drain(..).partition(|(_, at)| *at <= durable);
        lower.forget = later;
        (
            dead.into_iter().map(|(w, _)| w).collect::<Vec<WindowId>>(),
            forget
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<LowerId>>(),
        )
    };
    if !forget.is_empty() {
        let ops: Vec<CatalogOp> = forget
            .iter()
            .flat_map(|lower_id| CatalogOp::forget_device(*lower_id))
            .collect();
        if let Err(e) = inner.lower.write_catalog(&ops) {
            let at = inner.state.lock().log.applied_end;
            inner
                .state
                .lock()
                .lower
                .forget
                .extend(forget.iter().map(|id| (*id, at)));
            return Err(e);
        }
    }
    if dead.is_empty() {
        return Ok(());
    }
    let dropped = {
        let _no_readers = inner.window_gate.write();
        inner.lower.drop_windows(&dead)
    };
    let mut st = inner.state.lock();
    match dropped {
        Ok(()) => {
            let mut dropped_bytes = 0;
            for win in &dead {
                dropped_bytes += st.lower.windows.remove(win).map_or(0, |w| w.file_bytes);
            }
            Counters::add(&inner.counters.windows_dropped, dead.len() as u64);
            Counters::add(&inner.counters.windows_dropped_bytes, dropped_bytes);
            drop(st);
            inner.options.fail_points.check(PassStep::WindowsDropped)
        }
        Err(e) => {
            // Tried again at the next round (the windows are dead and stay so).
            let at = st.log.durable_end;
            st.lower.dead.extend(dead.iter().map(|w| (*w, at)));
            Err(e)
        }
    }
}

/// The `roamkv-maintain` thread: a round of maintenance every `maintenance_interval_ms`, or at
/// once when a writer asks (`Inner::wake_maintenance`), until shutdown.
pub(crate) fn run(inner: &Inner) {
    let interval = Duration::from_millis(inner.options.maintenance_interval_ms);
    loop {
        {
            let mut stop = inner.shutdown.lock();
            if !*stop && !inner.maintenance_wanted.load(Ordering::Relaxed) {
                inner.shutdown_signal.wait_for(&mut stop, interval);
            }
            if *stop {
                return;
            }
        }
        // Cleared before the round: a writer that stalls during it asks again.
        inner.maintenance_wanted.store(false, Ordering::Relaxed);
        let outcome = maintain(inner);
        inner.state.lock().last_maintenance_error = outcome.err().map(|e| e.to_string());
    }
}
