//! Consolidation: a device's readings in its oldest windows move into the settled space, as
//! one sorted run, trims applied. Two reasons (maintenance/mod.rs): a device with more than
//! `RUNS_PER_DEVICE_MAX` windows (a read of it would touch too many runs) or too many trims,
//! and window files over their space bound (the windows with the least live data are emptied
//! of the devices still reading them, and drop).
//!
//! The settled space is an ordinary LSM range: a long-lived device's readings are compacted
//! there as any LSM's are. The bench's devices never live long enough to get there; a device
//! that stays on a gateway for weeks does.
//!
//! Steps, as a pass's (age_out.rs): snapshot under the lock; read the windows (shared window
//! gate, no lock); write and ingest the run; one synced catalog batch (the device is settled,
//! the drained memberships are gone); commit under the lock. A crash before the catalog batch
//! leaves the windows as they were (the settled readings written are ones the windows hold
//! too, newer windows win over them at read); after it, the windows are gone from the device.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::error::Result;
use crate::failpoints::PassStep;
use crate::limits::CONSOLIDATION_BYTES_MAX;
use crate::lower::keys::{self, DeviceRecord, Place, WindowTrim, trimmed};
use crate::lower::{CatalogOp, Space};
use crate::mapping::DeviceId;
use crate::state::{Inner, State};
use crate::stats::Counters;
use crate::upper::LogPosition;

/// One device's part of a consolidation.
struct Draining {
    device: DeviceId,
    lower_id: u64,
    /// The windows emptied of it: its oldest ones, ascending.
    windows: Vec<(u64, u64)>,
    /// Its trims when the snapshot was taken (applied to what moves).
    trims: Vec<WindowTrim>,
    record: DeviceRecord,
}

/// Moves the chosen devices' oldest windowed readings into the settled space.
pub(crate) fn pass(inner: &Inner, devices: &[DeviceId]) -> Result<()> {
    let started = Instant::now();
    Counters::add(&inner.counters.pass_devices_visited, devices.len() as u64);
    let draining = snapshot(inner, devices);
    if draining.is_empty() {
        return Ok(());
    }
    let run = read(inner, &draining)?;
    inner.options.fail_points.check(PassStep::ReadLog)?;
    let run_bytes: u64 = run.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    if !run.is_empty() {
        let prepared = inner.lower.prepare_run(Space::Settled, run)?;
        if let Err(e) = inner.options.fail_points.check(PassStep::RunWritten) {
            inner.lower.discard(prepared);
            return Err(e);
        }
        inner.lower.ingest(prepared)?;
        inner.options.fail_points.check(PassStep::Ingested)?;
    }
    let mut ops = Vec::new();
    for d in &draining {
        let mut record = d.record.clone();
        record.settled = true;
        let last = d.windows.last().map_or(0, |(w, _)| *w);
        record.trims.retain(|t| t.upto_win > last);
        ops.push(CatalogOp::Put(
            Space::Catalog,
            keys::device_key(d.lower_id),
            record.encode(),
        ));
        for (win, _) in &d.windows {
            ops.push(CatalogOp::Delete(
                Space::Catalog,
                keys::membership_key(d.lower_id, *win),
            ));
        }
    }
    inner.lower.write_catalog(&ops)?;
    inner.options.fail_points.check(PassStep::Cataloged)?;
    commit(inner, &draining);
    Counters::add(&inner.counters.consolidations, draining.len() as u64);
    Counters::add(&inner.counters.consolidated_bytes, run_bytes);
    Counters::add_us_since(&inner.counters.pass_write_us, started);
    inner.options.fail_points.check(PassStep::Committed)
}

/// Under the state lock: each device's oldest windows, up to `CONSOLIDATION_BYTES_MAX` in all
/// (at least one window). A device with a trim not yet applied to its settled readings waits:
/// what moves now could not be told from what that trim hides.
fn snapshot(inner: &Inner, devices: &[DeviceId]) -> Vec<Draining> {
    let st = inner.state.lock();
    let mut budget = CONSOLIDATION_BYTES_MAX;
    let mut draining = Vec::new();
    for &id in devices {
        if draining.iter().any(|d: &Draining| d.device == id) {
            continue;
        }
        let Some(entry) = st.map.entry(id) else {
            continue;
        };
        let Some(place) = &entry.lower else { continue };
        if entry.settled_trim_pending.is_some() || place.windows.is_empty() {
            continue;
        }
        let mut windows = Vec::new();
        for (win, bytes) in &place.windows {
            if !windows.is_empty() && *bytes > budget {
                break;
            }
            windows.push((*win, *bytes));
            budget = budget.saturating_sub(*bytes);
        }
        draining.push(Draining {
            device: id,
            lower_id: place.lower_id,
            windows,
            trims: entry.trims.clone(),
            record: DeviceRecord {
                registered_at_ms: entry.registered_at_ms,
                settled: place.settled,
                trims: entry.trims.clone(),
                name: entry.name.to_string(),
            },
        });
        if budget == 0 {
            break;
        }
    }
    draining
}

/// Each device's readings of its drained windows, newest window winning, trims applied,
/// keyed for the settled space (sorted: devices by lower id, then sensor and ts).
fn read(inner: &Inner, draining: &[Draining]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let _windows_stay = inner.window_gate.read();
    let mut run = Vec::new();
    let mut by_lower_id: Vec<&Draining> = draining.iter().collect();
    by_lower_id.sort_by_key(|d| d.lower_id);
    for d in by_lower_id {
        let mut readings: BTreeMap<(String, i64), Vec<u8>> = BTreeMap::new();
        for (win, _) in &d.windows {
            let place = Place::Window(*win);
            let (start, end) = place.range(d.lower_id, None);
            let mut bad = None;
            inner.lower.scan(Space::Runs, &start, &end, &mut |k, v| {
                match place.parse(k) {
                    Some((_, sensor, ts_ns)) => {
                        if !trimmed(&d.trims, *win, ts_ns) {
                            readings.insert((sensor.to_string(), ts_ns), v.to_vec());
                        }
                    }
                    None => bad = Some(k.to_vec()),
                }
                bad.is_none()
            })?;
            if let Some(k) = bad {
                return Err(crate::error::Error::Lower(format!(
                    "malformed key {k:?} in window {win}"
                )));
            }
        }
        run.extend(
            readings
                .into_iter()
                .map(|((sensor, ts_ns), v)| (keys::settled_key(d.lower_id, &sensor, ts_ns), v)),
        );
    }
    Ok(run)
}

/// Under the state lock: the devices' drained windows are gone from them (their bytes dead in
/// those windows); they are settled. A TRIM that came while the readings moved applies to
/// them in the settled space now: it becomes pending there.
fn commit(inner: &Inner, draining: &[Draining]) {
    let mut st = inner.state.lock();
    let State { map, lower, .. } = &mut *st;
    // The catalog batch is durable: the windows' deaths need no later log record.
    let durable = LogPosition::at(0, 0);
    for d in draining {
        let Some(entry) = map.entry_mut(d.device) else {
            continue; // left meanwhile: its departure released its windows
        };
        let last = d.windows.last().map_or(0, |(w, _)| *w);
        let came_since: Vec<i64> = entry
            .trims
            .iter()
            .filter(|t| !d.trims.contains(t) && t.upto_win >= d.windows[0].0)
            .map(|t| t.before_ns)
            .collect();
        if let Some(cutoff) = came_since.into_iter().max() {
            entry.settled_trim_pending =
                Some(entry.settled_trim_pending.map_or(cutoff, |p| p.max(cutoff)));
        }
        entry.trims.retain(|t| t.upto_win > last);
        let Some(place) = entry.lower.as_mut() else {
            continue;
        };
        place.settled = true;
        place.windows.retain(|(w, _)| *w > last);
        lower.release(&d.windows, durable);
    }
}
