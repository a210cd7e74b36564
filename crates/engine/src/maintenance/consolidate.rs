//! Consolidation: some of a device's windowed readings are rewritten into fewer places, so that
//! a read touches few runs and window files stay within their space bound. Two reasons
//! (maintenance/mod.rs): a device with more than `windows_per_device_max` windows or too many
//! trims, and window files over their space bound (the windows with the least live data are
//! emptied of the devices still reading them, and drop whole).
//!
//! Where the readings go depends on the device's age (`SETTLE_AGE_MANAGEMENT_TIMES`):
//! - **A young device** (most of what a gateway sees: it will leave soon): into one new window,
//!   written and ingested like a pass's. The new window drops whole when its devices leave, as
//!   every window does: nothing is compacted, and space returns as fast as devices die. A
//!   reading moved out of a window that a newer window of the device also holds (an overwrite)
//!   is the newer one's: it is not copied, since the new window sorts above every other.
//! - **An old device** (it stays): its oldest windows into the settled space, an ordinary LSM
//!   range. Its readings there are compacted as any LSM's are; when it leaves, its range is
//!   deleted and compacted away at once (maintenance/mod.rs, `reclaim_settled`).
//!
//! Steps, as a pass's (age_out/): snapshot under the lock (new window ids given out); read the
//! windows (shared window gate, no lock); write and ingest the runs; one synced catalog batch
//! (memberships moved, the device records, the meta with the ids given out); commit under the
//! lock. A crash before the catalog batch leaves the windows as they were (a new window is an
//! orphan recovery drops; settled readings written are ones the windows hold too, and newer
//! windows win over them at read); after it, the catalog names the new places.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::commit_log::position::LogPosition;
use crate::lower::keys::{self, CatalogMeta, DeviceRecord, Place, WindowTrim, trimmed};
use crate::lower::{CatalogOp, PreparedRun, Space};
use crate::model::error::{Error, Result};
use crate::model::ids::{DeviceId, LowerId, WindowId};
use crate::model::limits::{CONSOLIDATION_BYTES_MAX, SETTLE_AGE_MANAGEMENT_TIMES};
use crate::options::failpoints::PassStep;
use crate::state::mapping::{DeviceEntry, LowerPlace};
use crate::state::{Inner, LowerBook, State, Window};
use crate::stats::Counters;

/// What of a device a consolidation is asked to rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Its windows (too many of them, or too many trims over them).
    AllWindows,
    /// Its readings in these windows (they are over the space bound: emptied, they drop).
    Windows(BTreeSet<WindowId>),
}

impl Scope {
    /// Both asks for one device: the wider.
    pub(crate) fn join(&mut self, other: Scope) {
        match (&mut *self, other) {
            (Scope::AllWindows, _) => {}
            (_, Scope::AllWindows) => *self = Scope::AllWindows,
            (Scope::Windows(mine), Scope::Windows(theirs)) => mine.extend(theirs),
        }
    }
}

/// Where a device's consolidated readings go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destination {
    /// One new window (given out at the snapshot).
    Window,
    Settled,
}

/// One device's part of a consolidation.
struct Draining {
    device: DeviceId,
    lower_id: LowerId,
    destination: Destination,
    /// The level of the new window its readings go to (Destination::Window).
    level: u8,
    /// The windows its readings leave, ascending.
    leaving: Vec<(WindowId, u64)>,
    /// Its windows that stay and are newer than one that leaves: a reading they hold too is
    /// theirs (Destination::Window only; the settled space sorts below every window).
    newer_staying: Vec<WindowId>,
    /// Its trims when the snapshot was taken (applied to what moves).
    trims: Vec<WindowTrim>,
    /// Its catalog record after the move.
    record: DeviceRecord,
}

/// What the snapshot took.
struct Snapshot {
    draining: Vec<Draining>,
    /// The new window (for the young devices), and the catalog meta naming it as given out.
    window: Option<WindowId>,
    meta: CatalogMeta,
}

/// The run written for each destination, and each device's bytes in it.
#[derive(Default)]
struct Runs {
    window: Run,
    settled: Run,
    /// Device -> bytes (keys + values) it has in the new window.
    window_bytes: BTreeMap<DeviceId, u64>,
}

/// Consolidates what `wanted` asks, within `CONSOLIDATION_BYTES_MAX` of windowed readings.
/// Returns whether there was anything to do (a device may have left, or be waiting for a trim).
pub(crate) fn pass(inner: &Inner, wanted: &BTreeMap<DeviceId, Scope>) -> Result<bool> {
    let started = Instant::now();
    Counters::add(&inner.counters.pass_devices_visited, wanted.len() as u64);
    let snapshot = take_snapshot(inner, wanted);
    if snapshot.draining.is_empty() {
        return Ok(false);
    }
    let Runs {
        window,
        settled,
        mut window_bytes,
    } = read(inner, &snapshot)?;
    inner.options.fail_points.check(PassStep::Read)?;
    let entry_bytes =
        |run: &[(Vec<u8>, Vec<u8>)]| run.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    let (window_run_bytes, settled_run_bytes): (u64, u64) =
        (entry_bytes(&window), entry_bytes(&settled));
    let window_file_bytes = write(inner, &snapshot, window, settled)?;
    crate::state::scale_to_file(&mut window_bytes, window_file_bytes);
    let cataloged = inner
        .lower
        .write_catalog(&catalog_ops(&snapshot, &window_bytes));
    if let Err(e) = cataloged {
        // The new window is in the lower tier but the catalog does not name it.
        if let Some(win) = snapshot.window {
            let _ = inner.lower.drop_windows(&[win]);
        }
        return Err(e);
    }
    inner.options.fail_points.check(PassStep::Cataloged)?;
    commit(inner, &snapshot, &window_bytes, window_file_bytes);
    let c = &inner.counters;
    Counters::add(&c.consolidations, snapshot.draining.len() as u64);
    Counters::add(&c.consolidated_bytes, window_run_bytes + settled_run_bytes);
    Counters::add(&c.consolidated_to_settled_bytes, settled_run_bytes);
    Counters::add_us_since(&c.pass_write_us, started);
    inner.options.fail_points.check(PassStep::Committed)?;
    Ok(true)
}

/// Under the state lock: each device's windows to rewrite and where, up to
/// `CONSOLIDATION_BYTES_MAX` of windowed bytes in all (at least one device).
fn take_snapshot(inner: &Inner, wanted: &BTreeMap<DeviceId, Scope>) -> Snapshot {
    let now_ms = inner.options.clock.now_ms();
    let settle_age_ms = inner
        .options
        .management_time_ms
        .saturating_mul(SETTLE_AGE_MANAGEMENT_TIMES);
    let mut st = inner.state.lock();
    let mut budget = CONSOLIDATION_BYTES_MAX;
    let mut draining = Vec::new();
    for (&id, scope) in wanted {
        if budget == 0 {
            break;
        }
        let Some(entry) = st.map.entry(id) else {
            continue;
        };
        let Some(place) = &entry.lower else { continue };
        let old = now_ms >= entry.registered_at_ms.saturating_add(settle_age_ms);
        // A settled device with a trim not yet applied to its settled readings waits: what
        // moves there now could not be told from what that trim hides.
        let d = if old && entry.settled_trim_pending.is_none() {
            to_settled(id, entry, place, scope, &mut budget)
        } else if old {
            None
        } else {
            to_window(id, entry, place, scope, &st.lower.windows, &mut budget)
        };
        draining.extend(d);
    }
    let window = draining
        .iter()
        .any(|d| d.destination == Destination::Window)
        .then(|| give_window(&mut st.lower));
    let meta = CatalogMeta {
        next_win: st.lower.next_win,
        next_lower_id: st.lower.next_lower_id,
        last_aged_seq: st.lower.last_aged_seq,
    };
    Snapshot {
        draining,
        window,
        meta,
    }
}

fn give_window(lower: &mut LowerBook) -> WindowId {
    let win = lower.next_win;
    lower.next_win = win.next();
    win
}

/// An old device: its oldest windows (through the asked ones) into the settled space, within
/// the budget (at least one window).
fn to_settled(
    id: DeviceId,
    entry: &DeviceEntry,
    place: &LowerPlace,
    scope: &Scope,
    budget: &mut u64,
) -> Option<Draining> {
    let through = match scope {
        Scope::AllWindows => WindowId(u64::MAX),
        Scope::Windows(wins) => *wins.last()?,
    };
    let mut leaving = Vec::new();
    for &(win, bytes) in place.windows.iter().take_while(|(w, _)| *w <= through) {
        if !leaving.is_empty() && bytes > *budget {
            break;
        }
        leaving.push((win, bytes));
        *budget = budget.saturating_sub(bytes);
    }
    let last = leaving.last()?.0;
    let staying: Vec<WindowId> = place
        .windows
        .iter()
        .map(|(w, _)| *w)
        .filter(|w| *w > last)
        .collect();
    Some(Draining {
        device: id,
        lower_id: place.lower_id,
        destination: Destination::Settled,
        level: 0,
        leaving,
        newer_staying: Vec::new(),
        trims: entry.trims.clone(),
        record: DeviceRecord {
            registered_at_ms: entry.registered_at_ms,
            settled: true,
            trims: trims_needed(&entry.trims, &staying),
            name: entry.name.to_string(),
        },
    })
}

/// A young device: the asked windows, or (too many windows) its windows of the lowest level
/// that has two or more, newest first within the budget, into the new window.
fn to_window(
    id: DeviceId,
    entry: &DeviceEntry,
    place: &LowerPlace,
    scope: &Scope,
    levels: &BTreeMap<WindowId, Window>,
    budget: &mut u64,
) -> Option<Draining> {
    let mut leaving: Vec<(WindowId, u64)> = match scope {
        Scope::Windows(wins) => place
            .windows
            .iter()
            .filter(|(w, _)| wins.contains(w))
            .copied()
            .collect(),
        Scope::AllWindows => lowest_level_windows(place, levels, *budget),
    };
    // Merging one window into one gains nothing, unless trims are to be applied.
    let gains = match scope {
        Scope::AllWindows => leaving.len() >= 2 || !entry.trims.is_empty(),
        Scope::Windows(_) => !leaving.is_empty(),
    };
    if !gains {
        return None;
    }
    *budget = budget.saturating_sub(leaving.iter().map(|(_, b)| *b).sum());
    leaving.sort_unstable();
    let first = leaving[0].0;
    let staying: Vec<WindowId> = place
        .windows
        .iter()
        .map(|(w, _)| *w)
        .filter(|w| !leaving.iter().any(|(l, _)| l == w))
        .collect();
    Some(Draining {
        device: id,
        lower_id: place.lower_id,
        destination: Destination::Window,
        level: leaving
            .iter()
            .filter_map(|(w, _)| levels.get(w))
            .map(|w| w.level)
            .max()
            .unwrap_or(0)
            .saturating_add(1),
        newer_staying: staying.iter().copied().filter(|w| *w > first).collect(),
        leaving,
        trims: entry.trims.clone(),
        record: DeviceRecord {
            registered_at_ms: entry.registered_at_ms,
            settled: place.settled,
            // The new window sorts above every trim given so far: what it holds is trimmed
            // already; the trims stay for the windows that stay.
            trims: trims_needed(&entry.trims, &staying),
            name: entry.name.to_string(),
        },
    })
}

/// The device's windows of the lowest level that has at least two, newest first while within
/// `budget` (at least two); all its windows if no level has two.
fn lowest_level_windows(
    place: &LowerPlace,
    levels: &BTreeMap<WindowId, Window>,
    budget: u64,
) -> Vec<(WindowId, u64)> {
    let level_of = |win: WindowId| levels.get(&win).map_or(0, |w| w.level);
    let mut counts: BTreeMap<u8, usize> = BTreeMap::new();
    for (win, _) in &place.windows {
        *counts.entry(level_of(*win)).or_default() += 1;
    }
    let level = counts.iter().find(|(_, n)| **n >= 2).map(|(l, _)| *l);
    let mut chosen = Vec::new();
    let mut budget = budget;
    for &(win, bytes) in place.windows.iter().rev() {
        if level.is_some_and(|l| level_of(win) != l) {
            continue;
        }
        if chosen.len() >= 2 && bytes > budget {
            break;
        }
        chosen.push((win, bytes));
        budget = budget.saturating_sub(bytes);
    }
    chosen
}

/// The trims that still hide something in these windows (a trim covers windows up to its
/// `upto_win`).
fn trims_needed(trims: &[WindowTrim], windows: &[WindowId]) -> Vec<WindowTrim> {
    trims
        .iter()
        .filter(|t| windows.iter().any(|w| *w <= t.upto_win))
        .copied()
        .collect()
}

/// Each device's readings of its leaving windows, newest window winning, trims applied, and
/// (for a new window) without what a newer staying window holds; keyed for their destination
/// and sorted (devices by lower id, then sensor and ts).
fn read(inner: &Inner, snapshot: &Snapshot) -> Result<Runs> {
    let _windows_stay = inner.window_gate.read();
    let mut runs = Runs::default();
    let mut by_lower_id: Vec<&Draining> = snapshot.draining.iter().collect();
    by_lower_id.sort_by_key(|d| d.lower_id);
    for d in by_lower_id {
        let readings = read_device(inner, d)?;
        match (d.destination, snapshot.window) {
            (Destination::Settled, _) => {
                runs.settled
                    .extend(readings.into_iter().map(|((sensor, ts_ns), (v, _))| {
                        (keys::settled_key(d.lower_id, &sensor, ts_ns), v)
                    }))
            }
            (Destination::Window, Some(win)) => {
                let mut bytes = 0;
                for ((sensor, ts_ns), (v, _)) in readings {
                    let key = keys::run_key(win, d.lower_id, &sensor, ts_ns);
                    bytes += (key.len() + v.len()) as u64;
                    runs.window.push((key, v));
                }
                runs.window_bytes.insert(d.device, bytes);
            }
            (Destination::Window, None) => {
                unreachable!("the snapshot gives a window when a device goes to one")
            }
        }
    }
    Ok(runs)
}

/// (sensor, ts) -> (value, the window it came from).
type DeviceReadings = BTreeMap<(String, i64), (Vec<u8>, WindowId)>;

fn read_device(inner: &Inner, d: &Draining) -> Result<DeviceReadings> {
    let mut readings: DeviceReadings = BTreeMap::new();
    for (win, _) in &d.leaving {
        let place = Place::Window(*win);
        let (start, end) = place.range(d.lower_id, None);
        let mut bad = None;
        inner
            .lower
            .scan(Space::Windows, &start, &end, &mut |k, v| {
                match place.parse(k) {
                    Some((_, sensor, ts_ns)) => {
                        if !trimmed(&d.trims, *win, ts_ns) {
                            readings.insert((sensor.to_string(), ts_ns), (v.to_vec(), *win));
                        }
                    }
                    None => bad = Some(k.to_vec()),
                }
                bad.is_none()
            })?;
        if let Some(k) = bad {
            return Err(Error::Lower(format!("malformed key {k:?} in window {win}")));
        }
    }
    if !d.newer_staying.is_empty() {
        let mut shadowed = Vec::new();
        for ((sensor, ts_ns), (_, from)) in &readings {
            for &newer in d.newer_staying.iter().filter(|w| **w > *from) {
                let key = keys::run_key(newer, d.lower_id, sensor, *ts_ns);
                if inner.lower.get(Space::Windows, &key)?.is_some() {
                    shadowed.push((sensor.clone(), *ts_ns));
                    break;
                }
            }
        }
        for key in shadowed {
            readings.remove(&key);
        }
    }
    Ok(readings)
}

/// A run: sorted (key, value) pairs.
type Run = Vec<(Vec<u8>, Vec<u8>)>;

/// Writes and ingests the runs (handed over: a consolidation holds its readings once); returns
/// the new window's file bytes.
fn write(inner: &Inner, snapshot: &Snapshot, window: Run, settled: Run) -> Result<u64> {
    let mut window_file_bytes = 0;
    let mut prepared: Vec<PreparedRun> = Vec::new();
    for (space, run) in [(Space::Windows, window), (Space::Settled, settled)] {
        if run.is_empty() {
            continue;
        }
        match inner.lower.prepare_run(space, run) {
            Ok(p) => {
                if space == Space::Windows {
                    window_file_bytes = p.file_bytes;
                }
                prepared.push(p);
            }
            Err(e) => {
                prepared.into_iter().for_each(|p| inner.lower.discard(p));
                return Err(e);
            }
        }
    }
    if let Err(e) = inner.options.fail_points.check(PassStep::RunWritten) {
        prepared.into_iter().for_each(|p| inner.lower.discard(p));
        return Err(e);
    }
    let mut remaining = prepared.into_iter();
    for run in remaining.by_ref() {
        if let Err(e) = inner.lower.ingest(run) {
            remaining.for_each(|p| inner.lower.discard(p));
            if let Some(win) = snapshot.window {
                let _ = inner.lower.drop_windows(&[win]);
            }
            return Err(e);
        }
    }
    if let Err(e) = inner.options.fail_points.check(PassStep::Ingested) {
        if let Some(win) = snapshot.window {
            let _ = inner.lower.drop_windows(&[win]);
        }
        return Err(e);
    }
    Ok(window_file_bytes)
}

/// The catalog batch: each device's record and memberships as they are after the move, and the
/// meta naming the new window as given out (recovery drops windows at or above it as orphans).
fn catalog_ops(snapshot: &Snapshot, window_bytes: &BTreeMap<DeviceId, u64>) -> Vec<CatalogOp> {
    let mut ops = Vec::new();
    for d in &snapshot.draining {
        ops.push(CatalogOp::Put(
            Space::Catalog,
            keys::device_key(d.lower_id),
            d.record.encode(),
        ));
        for (win, _) in &d.leaving {
            ops.push(CatalogOp::Delete(
                Space::Catalog,
                keys::membership_key(d.lower_id, *win),
            ));
        }
        if let (Some(win), Some(bytes)) = (snapshot.window, window_bytes.get(&d.device))
            && *bytes > 0
        {
            ops.push(CatalogOp::Put(
                Space::Catalog,
                keys::membership_key(d.lower_id, win),
                bytes.to_le_bytes().to_vec(),
            ));
        }
    }
    ops.push(CatalogOp::Put(
        Space::Catalog,
        keys::meta_key(),
        snapshot.meta.encode(),
    ));
    ops
}

/// Under the state lock: the devices' leaving windows are gone from them (their bytes dead in
/// those windows); they read the new window or the settled space instead.
fn commit(
    inner: &Inner,
    snapshot: &Snapshot,
    window_bytes: &BTreeMap<DeviceId, u64>,
    window_file_bytes: u64,
) {
    let mut st = inner.state.lock();
    let State { map, lower, .. } = &mut *st;
    // The catalog batch is durable: the windows' deaths need no later log record.
    let durable = LogPosition::ORIGIN;
    let mut new_window = Window {
        file_bytes: window_file_bytes,
        ..Window::default()
    };
    for d in &snapshot.draining {
        let Some(entry) = map.entry_mut(d.device) else {
            // Left meanwhile: its departure released its windows. Readings it now has in the
            // settled space go with its departure's pass.
            if d.destination == Destination::Settled {
                lower.settled_after_depart.push(d.lower_id);
            }
            continue;
        };
        let Some(place) = entry.lower.as_mut() else {
            continue;
        };
        place
            .windows
            .retain(|(w, _)| !d.leaving.iter().any(|(l, _)| l == w));
        lower.release(&d.leaving, durable);
        let staying: Vec<WindowId> = place.windows.iter().map(|(w, _)| *w).collect();
        match d.destination {
            Destination::Window => {
                let bytes = window_bytes.get(&d.device).copied().unwrap_or(0);
                new_window.level = new_window.level.max(d.level);
                if let Some(win) = snapshot.window
                    && bytes > 0
                {
                    place.windows.push((win, bytes));
                    new_window.live_bytes += bytes;
                    new_window.members.push(d.device);
                }
                // Trims that came meanwhile cover the new window (their `upto_win` is at
                // least its id): kept by the rule below.
                let mut all: Vec<WindowId> = staying;
                all.extend(snapshot.window);
                entry.trims = trims_needed(&entry.trims, &all);
            }
            Destination::Settled => {
                place.settled = true;
                // A TRIM that came while the readings moved applies to them in the settled
                // space now: it becomes pending there.
                let first = d.leaving[0].0;
                let came_since = entry
                    .trims
                    .iter()
                    .filter(|t| !d.trims.contains(t) && t.upto_win >= first)
                    .map(|t| t.before_ns)
                    .max();
                if let Some(cutoff) = came_since {
                    entry.settled_trim_pending =
                        Some(entry.settled_trim_pending.map_or(cutoff, |p| p.max(cutoff)));
                }
                entry.trims = trims_needed(&entry.trims, &staying);
            }
        }
    }
    if let Some(win) = snapshot.window {
        let dead_on_arrival = new_window.live_bytes == 0;
        lower.windows.insert(win, new_window);
        if dead_on_arrival {
            lower.dead.push((win, durable));
        }
    }
}
