//! A pass: the readings of one log segment leave the log (docs/ENGINE.md, "Leaving the log").
//!
//! 1. **Snapshot** (short holds of the state lock, memory only): the segment's holders that are
//!    still here give their index entries in the segment, a bounded number per hold; devices
//!    the catalog must learn (their REGISTER is in the segment) get lower ids; window ids are
//!    given out; departures and trims of the segment are collected for the catalog.
//! 2. **Read** (no lock): one sweep over the segment in log order, through one reused buffer,
//!    skipping gaps over `MOVE_READ_GAP_BYTES`; every record's checksum and identity checked;
//!    the swept range leaves the page cache. Each byte of the log is read once.
//! 3. **Write**: sorted by (device, sensor, ts), cut into windows of at most `WINDOW_BYTES_MAX`,
//!    each written as one file and ingested into the lower tier's last level.
//! 4. **Catalog**: one synced batch: new devices, window memberships, departures and trims
//!    (with their deletes in the settled space), and the meta (last segment taken, ids given).
//! 5. **Commit** (state lock): the moved entries leave the index, the devices their windows;
//!    the segment is marked aged and retires once nothing holds it.
//!
//! A failure (or crash) after any step leaves a state recovery opens whole: before step 4 the
//! segment is still in the log and the catalog does not name the new windows (recovery drops
//! them as orphans); after it, the catalog names them and the segment is not replayed.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::commit::group_commit;
use crate::model::error::Result;
use crate::model::ids::{DeviceId, SegmentSeq, WindowId};
use crate::model::limits::TRIMS_PER_DEVICE_MAX;
use crate::options::failpoints::PassStep;
use crate::state::mapping::LowerPlace;
use crate::state::{Inner, State, Window};
use crate::stats::Counters;

mod runs;
mod snapshot;

use runs::{
    WindowRun, catalog_ops, read_runs, settled_dead_ranges, settled_trim_deletes, write_runs,
};
use snapshot::{Snapshot, take_snapshot};

/// Why a segment leaves the log now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Its management time ended.
    Due,
    /// Early: the log is near its budget, or the index over its cap.
    Early,
    /// Every device with readings in it has left.
    Dead,
}

/// Notes that a device now holds readings in more windows (or trims) than reads should
/// check: maintenance consolidates it next.
fn note_windows(inner: &Inner, st: &mut State, id: DeviceId, windows: usize, trims: usize) {
    if windows > inner.options.windows_per_device_max || trims > TRIMS_PER_DEVICE_MAX {
        st.lower.consolidation_wanted.push(id);
    }
}

/// Moves the readings of segment `seq` out of the log (the steps of the module doc). Complete
/// or without effect on the in-memory state: a failure before the catalog step leaves files
/// that recovery or the next pass removes, and the segment in the log to be taken again.
pub(crate) fn pass(inner: &Inner, seq: SegmentSeq, reason: Reason) -> Result<()> {
    let c = &inner.counters;
    let started = Instant::now();
    // Readings the snapshot leaves behind because a DEPART or TRIM removed them from the index
    // are gone with the segment: those records must be durable first (None/Periodic modes), or
    // a power cut could undo the departure after its readings are gone.
    group_commit::sync_unsynced(inner)?;
    let Some(snapshot) = take_snapshot(inner, seq) else {
        return Ok(());
    };
    let mut step = Counters::add_us_since(&c.pass_snapshot_us, started);
    let mut runs = read_runs(inner, &snapshot)?;
    let settled_deletes = settled_trim_deletes(inner, &snapshot.settled_trims)?;
    inner.options.fail_points.check(PassStep::Read)?;
    step = Counters::add_us_since(&c.pass_read_us, step);

    let file_bytes = write_runs(inner, &mut runs)?;
    for (run, bytes) in runs.iter_mut().zip(&file_bytes) {
        let mut members: BTreeMap<DeviceId, u64> =
            run.members.iter().map(|(d, (_, b))| (*d, *b)).collect();
        crate::state::scale_to_file(&mut members, *bytes);
        for (d, (_, b)) in run.members.iter_mut() {
            *b = members[d];
        }
    }
    step = Counters::add_us_since(&c.pass_write_us, step);

    let settled_dead = settled_dead_ranges(&snapshot, &settled_deletes);
    let ops = catalog_ops(&snapshot, &runs, settled_deletes);
    let cataloged = (inner.options.fail_points)
        .check_catalog_write()
        .and_then(|()| inner.lower.write_catalog(&ops));
    if let Err(e) = cataloged {
        // The runs are in the lower tier but the catalog does not name them: drop them now
        // (recovery would, as orphans, if this fails too).
        let wins: Vec<WindowId> = runs.iter().map(|r| r.win).collect();
        let _ = inner.lower.drop_windows(&wins);
        Counters::add(&c.pass_failures, 1);
        return Err(e);
    }
    step = Counters::add_us_since(&c.pass_catalog_us, step);
    if let Err(e) = inner.options.fail_points.check(PassStep::Cataloged) {
        // A crash here, as the tests see it: the catalog names the windows and memory does not
        // know yet. No path of the engine fails between the two, so the fail point stops the
        // engine as a crash would; only reopening goes on.
        let mut st = inner.state.lock();
        inner.poison(&mut st, "fail point: stopped after a pass's catalog batch");
        return Err(e);
    }

    commit(inner, &snapshot, &runs, &file_bytes, reason, settled_dead);
    Counters::add_us_since(&c.pass_commit_us, step);
    c.pass_done(started);
    inner.options.fail_points.check(PassStep::Committed)
}

/// Step 5, under the state lock.
fn commit(
    inner: &Inner,
    snapshot: &Snapshot,
    runs: &[WindowRun],
    file_bytes: &[u64],
    reason: Reason,
    settled_dead: Vec<(Vec<u8>, Vec<u8>)>,
) {
    let c = &inner.counters;
    let mut st = inner.state.lock();
    st.lower.settled_dead.extend(settled_dead);
    st.lower
        .settled_after_depart
        .retain(|id| !snapshot.departed.iter().any(|(d, _)| d == id));
    place_new_devices(&mut st, snapshot);
    let mut visits = 0;
    let aged_records = remove_moved_entries(&mut st, snapshot, &mut visits);
    for (run, bytes) in runs.iter().zip(file_bytes) {
        add_window(inner, &mut st, run, *bytes);
    }
    for &(device, _, before_ns) in &snapshot.settled_trims {
        if let Some(entry) = st.map.entry_mut(device)
            && entry.settled_trim_pending.is_some_and(|p| p <= before_ns)
        {
            entry.settled_trim_pending = None;
        }
    }
    st.lower.last_aged_seq = snapshot.seq;
    if let Some(live) = st.log.segments.get_mut(&snapshot.seq) {
        live.aged = true;
        live.holders = Vec::new();
        live.events = Vec::new();
    }
    drop(st);
    Counters::add(&c.aged_records, aged_records);
    Counters::add(&c.pass_devices_visited, visits);
    Counters::add(&c.segments_aged, 1);
    if reason == Reason::Early {
        Counters::add(&c.early_passes, 1);
    }
}

/// Devices the catalog learned in this pass get their place; one that left while the pass ran
/// is named by the catalog (the batch was built before) and forgotten once its DEPART is
/// durable.
fn place_new_devices(st: &mut State, snapshot: &Snapshot) {
    let applied = st.log.applied_end;
    for (id, lower_id, _) in &snapshot.new_devices {
        if st.map.entry(*id).is_some() {
            st.map.place(
                *id,
                LowerPlace {
                    lower_id: *lower_id,
                    ..LowerPlace::default()
                },
            );
        } else {
            st.lower.forget.push((*lower_id, applied));
        }
    }
}

/// The moved readings leave the devices' indexes (the segment's entries: S is sealed, so every
/// entry in it now is one the snapshot took, or one removed since). Returns their count.
fn remove_moved_entries(st: &mut State, snapshot: &Snapshot, visits: &mut u64) -> u64 {
    let mut moved_devices: Vec<DeviceId> = snapshot.moving.iter().map(|m| m.device).collect();
    moved_devices.dedup();
    *visits += (moved_devices.len() + snapshot.new_devices.len()) as u64;
    let mut aged_records = 0;
    for id in moved_devices {
        let State {
            map, index_account, ..
        } = &mut *st;
        if let Some(entry) = map.entry_mut(id) {
            let (records, _) = index_account.change(&mut entry.index, |index| {
                index.remove_oldest_segment(snapshot.seq)
            });
            aged_records += records;
        }
    }
    aged_records
}

/// A window joins the bookkeeping: its devices (still here) read it; a window nobody reads is
/// dead on arrival.
fn add_window(inner: &Inner, st: &mut State, run: &WindowRun, file_bytes: u64) {
    let mut live_bytes = 0;
    let mut members = Vec::new();
    for (id, (_, member_bytes)) in &run.members {
        let Some(entry) = st.map.entry_mut(*id) else {
            continue; // left while the pass ran: its readings here are dead on arrival
        };
        let Some(place) = entry.lower.as_mut() else {
            continue;
        };
        place.windows.push((run.win, *member_bytes));
        let (windows, trims) = (place.windows.len(), entry.trims.len());
        live_bytes += member_bytes;
        members.push(*id);
        note_windows(inner, st, *id, windows, trims);
    }
    st.lower.windows.insert(
        run.win,
        Window {
            live_bytes,
            file_bytes,
            members,
            level: 0,
            released_at: None,
        },
    );
    if live_bytes == 0 {
        let at = st.log.applied_end;
        st.lower.dead.push((run.win, at));
    }
}
