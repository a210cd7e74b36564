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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::commit_log::log_state::SegmentEvent;
use crate::commit_log::segment::Segment;
use crate::error::{Error, Result};
use crate::failpoints::PassStep;
use crate::group_commit;
use crate::ids::{DeviceId, LowerId, SegmentSeq, WindowId};
use crate::limits::{
    MOVE_READ_CHUNK_BYTES, MOVE_READ_GAP_BYTES, TRIMS_PER_DEVICE_MAX, WINDOW_BYTES_MAX,
};
use crate::lower::keys::{self, CatalogMeta, DeviceRecord, Place};
use crate::lower::{CatalogOp, PreparedRun, Space};
use crate::mapping::{DeviceEntry, LowerPlace, MappingTable};
use crate::state::{Inner, LowerBook, State, Window};
use crate::stats::Counters;
use crate::upper::IndexEntry;
use crate::upper::{AtIndex, at_index};

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

/// One reading to move: whose, and where it is in the segment.
struct Moving {
    device: DeviceId,
    lower_id: LowerId,
    sensor: Arc<str>,
    entry: IndexEntry,
}

/// What the snapshot took (step 1).
struct Snapshot {
    seq: SegmentSeq,
    segment: Arc<Segment>,
    moving: Vec<Moving>,
    /// Devices the catalog learns in this pass: (id, its record, lower id).
    new_devices: Vec<(DeviceId, LowerId, DeviceRecord)>,
    /// Known devices whose record changes (a TRIM): (lower id, record).
    rewrites: Vec<(LowerId, DeviceRecord)>,
    /// Lower ids of devices that departed in this segment, each with whether it had settled
    /// readings.
    departed: Vec<(LowerId, bool)>,
    /// TRIMs of devices with settled readings: (device, lower id, cutoff).
    settled_trims: Vec<(DeviceId, LowerId, i64)>,
    /// Window ids given to this pass, from `first_win` on.
    first_win: WindowId,
    windows: u64,
    meta: CatalogMeta,
}

/// A window's run, sorted, and who has how many bytes in it.
struct WindowRun {
    win: WindowId,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    members: BTreeMap<DeviceId, (LowerId, u64)>,
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

/// Step 1, in short holds of the state lock: a segment holds up to a million readings, and
/// copying all their index entries in one hold kept writers waiting up to 75 ms (the 1800 s run
/// in docs/BENCHMARKS.md). So: the segment's devices, places and events in one hold (1a),
/// their entries in holds of about `SNAPSHOT_ENTRIES_PER_HOLD` (1b), the window ids in a last
/// one (1c). What changes between holds is what changes during the rest of a pass anyway: a
/// device that leaves has nothing left to move (its DEPART is in a later segment, whose pass
/// drops its place), a TRIM leaves fewer entries; the segment is sealed, so nothing is added.
fn take_snapshot(inner: &Inner, seq: SegmentSeq) -> Option<Snapshot> {
    let plan = plan_snapshot(inner, seq)?;
    let moving = collect_moving(inner, seq, &plan.holders);
    let move_bytes: u64 = moving.iter().map(|m| m.entry.len as u64).sum();
    let windows = move_bytes.div_ceil(WINDOW_BYTES_MAX).max(1);
    let mut st = inner.state.lock();
    let lower = &mut st.lower;
    let first_win = lower.next_win;
    lower.next_win = WindowId(first_win.0 + windows);
    let meta = CatalogMeta {
        next_win: lower.next_win,
        next_lower_id: lower.next_lower_id,
        last_aged_seq: seq,
    };
    drop(st);
    let Events {
        departed,
        rewrites,
        settled_trims,
    } = plan.events;
    Some(Snapshot {
        seq,
        segment: plan.segment,
        moving,
        new_devices: plan.new_devices.records,
        rewrites,
        departed,
        settled_trims,
        first_win,
        windows,
        meta,
    })
}

/// Index entries one hold of the state lock copies, at most (a device's entries are copied in
/// one hold, so a hold may go past it by one device's share of the segment).
const SNAPSHOT_ENTRIES_PER_HOLD: usize = 16 * 1024;

/// What step 1a takes: the segment, its holders with their lower ids, the places given to
/// devices registered in it, and what its events ask of the catalog.
struct SnapshotPlan {
    segment: Arc<Segment>,
    holders: Vec<(DeviceId, LowerId)>,
    new_devices: NewDevices,
    events: Events,
}

/// Step 1a, one hold: memory proportional to the segment's devices, not its readings.
fn plan_snapshot(inner: &Inner, seq: SegmentSeq) -> Option<SnapshotPlan> {
    let mut st = inner.state.lock();
    let State {
        map, log, lower, ..
    } = &mut *st;
    let live = log.segments.get(&seq).filter(|l| !l.aged)?;
    let segment = Arc::clone(&live.segment);
    Counters::add(
        &inner.counters.pass_devices_visited,
        (live.events.len() + live.holders.len()) as u64,
    );
    let mut new_devices = NewDevices::default();
    for event in &live.events {
        if let SegmentEvent::Register(id) = event {
            give_place(map, lower, &mut new_devices, *id);
        }
    }
    let mut holders = Vec::with_capacity(live.holders.len());
    for &id in &live.holders {
        let Some(entry) = map.entry(id) else { continue };
        let lower_id = match &entry.lower {
            Some(place) => place.lower_id,
            // A holder gets its place with its REGISTER's segment, so this one registered in
            // this segment (and was given one just above).
            None => match give_place(map, lower, &mut new_devices, id) {
                Some(lower_id) => lower_id,
                None => continue,
            },
        };
        holders.push((id, lower_id));
    }
    let events = events(map, lower, &live.events);
    Some(SnapshotPlan {
        segment,
        holders,
        new_devices,
        events,
    })
}

/// Step 1b: the holders' entries in segment `seq`, a bounded number per hold. Each sensor's
/// name is shared by its readings (one allocation per sensor, not per reading).
fn collect_moving(inner: &Inner, seq: SegmentSeq, holders: &[(DeviceId, LowerId)]) -> Vec<Moving> {
    let mut moving = Vec::new();
    let mut next = 0;
    while next < holders.len() {
        let st = inner.state.lock();
        let hold_start = moving.len();
        while next < holders.len() && moving.len() - hold_start < SNAPSHOT_ENTRIES_PER_HOLD {
            let (device, lower_id) = holders[next];
            next += 1;
            let Some(entry) = st.map.entry(device) else {
                continue;
            };
            let mut last: Option<(&str, Arc<str>)> = None;
            for (name, entry) in entry.index.in_oldest_segment(seq) {
                let sensor = match &last {
                    Some((last_name, shared)) if *last_name == name => Arc::clone(shared),
                    _ => {
                        let shared: Arc<str> = Arc::from(name);
                        last = Some((name, Arc::clone(&shared)));
                        shared
                    }
                };
                moving.push(Moving {
                    device,
                    lower_id,
                    sensor,
                    entry,
                });
            }
        }
        drop(st);
    }
    moving
}

/// What a segment's DEPART and TRIM records ask of the catalog.
#[derive(Default)]
struct Events {
    departed: Vec<(LowerId, bool)>,
    rewrites: Vec<(LowerId, DeviceRecord)>,
    settled_trims: Vec<(DeviceId, LowerId, i64)>,
}

fn events(map: &MappingTable, lower: &LowerBook, events: &[SegmentEvent]) -> Events {
    let mut out = Events::default();
    for event in events {
        match *event {
            SegmentEvent::Register(_) => {}
            SegmentEvent::Depart { lower_id, settled } => {
                let moved_meanwhile = lower.settled_after_depart.contains(&lower_id);
                out.departed.push((lower_id, settled || moved_meanwhile));
            }
            SegmentEvent::Trim { device, before_ns } => {
                let Some(entry) = map.entry(device) else {
                    continue;
                };
                let Some(place) = &entry.lower else { continue };
                out.rewrites
                    .push((place.lower_id, device_record(entry, place.settled)));
                if place.settled {
                    out.settled_trims.push((device, place.lower_id, before_ns));
                }
            }
        }
    }
    out
}

/// Devices a pass gives a place (a lower id), in the order it gave them.
#[derive(Default)]
struct NewDevices {
    records: Vec<(DeviceId, LowerId, DeviceRecord)>,
    given: HashMap<DeviceId, LowerId>,
}

/// A lower id for a device without a place (once per pass): the catalog learns it in this pass.
fn give_place(
    map: &MappingTable,
    lower: &mut LowerBook,
    new_devices: &mut NewDevices,
    id: DeviceId,
) -> Option<LowerId> {
    let entry = map.entry(id)?;
    if entry.lower.is_some() {
        return None;
    }
    if let Some(lower_id) = new_devices.given.get(&id) {
        return Some(*lower_id);
    }
    let lower_id = lower.next_lower_id;
    lower.next_lower_id = lower_id.next();
    new_devices.given.insert(id, lower_id);
    new_devices
        .records
        .push((id, lower_id, device_record(entry, false)));
    Some(lower_id)
}

fn device_record(entry: &DeviceEntry, settled: bool) -> DeviceRecord {
    DeviceRecord {
        registered_at_ms: entry.registered_at_ms,
        settled,
        trims: entry.trims.clone(),
        name: entry.name.to_string(),
    }
}

/// Step 2 and the sort of step 3: reads every moving reading in one sweep and cuts the sorted
/// readings into window runs.
fn read_runs(inner: &Inner, snapshot: &Snapshot) -> Result<Vec<WindowRun>> {
    let mut order: Vec<usize> = (0..snapshot.moving.len()).collect();
    order.sort_unstable_by_key(|&i| snapshot.moving[i].entry.offset);
    let mut values: Vec<Vec<u8>> = vec![Vec::new(); snapshot.moving.len()];
    let segment = &snapshot.segment;
    let mut buffer = Vec::new();
    let mut at = 0;
    while at < order.len() {
        // One read: from this record on, while the next is close and the read stays in the
        // buffer's size.
        let first = &snapshot.moving[order[at]].entry;
        let start = first.offset as u64;
        let mut end = start + first.len as u64;
        let mut last = at + 1;
        while let Some(&next) = order.get(last) {
            let e = &snapshot.moving[next].entry;
            let e_end = e.offset as u64 + e.len as u64;
            if e.offset as u64 > end + MOVE_READ_GAP_BYTES
                || e_end - start > MOVE_READ_CHUNK_BYTES as u64
            {
                break;
            }
            end = end.max(e_end);
            last += 1;
        }
        let len = (end - start) as usize;
        segment.read_into(&mut buffer, start, len)?;
        Counters::add(&inner.counters.maintenance_read_bytes, len as u64);
        for &i in &order[at..last] {
            let m = &snapshot.moving[i];
            let from = (m.entry.offset as u64 - start) as usize;
            let bytes = &buffer[from..from + m.entry.len as usize];
            values[i] = checked_value(segment, m, bytes)?;
        }
        segment.drop_cache(start, len as u64);
        at = last;
    }
    Ok(cut_into_windows(snapshot, values))
}

/// The value of a moving reading's record, after checking the record is the one indexed.
fn checked_value(segment: &Segment, m: &Moving, bytes: &[u8]) -> Result<Vec<u8>> {
    let corrupt = |reason: String| Error::Corrupt {
        file: segment.path.clone(),
        offset: m.entry.offset as u64,
        reason,
    };
    match at_index(bytes, segment.seq_low(), &m.entry) {
        AtIndex::Put { sensor, value, .. } if sensor == &*m.sensor => Ok(value.to_vec()),
        AtIndex::Put { .. } => Err(corrupt(
            "the index points at another sensor's record".into(),
        )),
        AtIndex::Elsewhere(reason) | AtIndex::Corrupt(reason) => Err(corrupt(reason)),
    }
}

/// Sorts the readings by (lower id, sensor, ts) and cuts them into the pass's windows, each at
/// most `WINDOW_BYTES_MAX` of values (the last one takes the rest).
fn cut_into_windows(snapshot: &Snapshot, values: Vec<Vec<u8>>) -> Vec<WindowRun> {
    let mut sorted: Vec<(usize, Vec<u8>)> = values.into_iter().enumerate().collect();
    sorted.sort_unstable_by(|(a, _), (b, _)| {
        let (a, b) = (&snapshot.moving[*a], &snapshot.moving[*b]);
        (a.lower_id, &a.sensor, a.entry.ts_ns).cmp(&(b.lower_id, &b.sensor, b.entry.ts_ns))
    });
    let mut runs: Vec<WindowRun> = Vec::new();
    let mut run_bytes = 0u64;
    for (i, value) in sorted {
        let last_window = WindowId(snapshot.first_win.0 + snapshot.windows - 1);
        let full = run_bytes >= WINDOW_BYTES_MAX;
        let need_new = runs.last().is_none_or(|r| full && r.win < last_window);
        if need_new {
            let win = runs.last().map_or(snapshot.first_win, |r| r.win.next());
            runs.push(WindowRun {
                win,
                entries: Vec::new(),
                members: BTreeMap::new(),
            });
            run_bytes = 0;
        }
        let m = &snapshot.moving[i];
        let run = runs.last_mut().expect("a run was pushed above");
        let key = keys::run_key(run.win, m.lower_id, &m.sensor, m.entry.ts_ns);
        let bytes = (key.len() + value.len()) as u64;
        run_bytes += value.len() as u64;
        let member = run.members.entry(m.device).or_insert((m.lower_id, 0));
        member.1 += bytes;
        run.entries.push((key, value));
    }
    // ENGINE.md, "Invariants": each run strictly sorted, in a new window above every existing
    // one (`first_win` is the catalog's next window id), windows ascending.
    for (i, run) in runs.iter().enumerate() {
        assert!(
            run.win >= snapshot.first_win && (i == 0 || run.win > runs[i - 1].win),
            "window {} out of order (first new window {})",
            run.win,
            snapshot.first_win
        );
        assert!(
            crate::lower::strictly_sorted(&run.entries),
            "window {}'s run is not strictly sorted",
            run.win
        );
    }
    runs
}

/// The settled space's range deletes of the segment's TRIMs: one per sensor of the device
/// with a reading older than the cutoff (one seek per sensor to find them).
fn settled_trim_deletes(
    inner: &Inner,
    trims: &[(DeviceId, LowerId, i64)],
) -> Result<Vec<CatalogOp>> {
    let mut ops = Vec::new();
    for &(_, lower_id, before_ns) in trims {
        for (sensor, oldest_ns) in
            crate::lower::oldest_per_sensor(inner.lower.as_ref(), Place::Settled, lower_id)?
        {
            if oldest_ns < before_ns {
                ops.push(CatalogOp::DeleteRange(
                    Space::Settled,
                    keys::settled_key(lower_id, &sensor, i64::MIN),
                    keys::settled_key(lower_id, &sensor, before_ns),
                ));
            }
        }
    }
    Ok(ops)
}

/// Step 3: each window's run written and ingested. Returns each window's file bytes.
/// The runs' entries are handed over (a pass holds its readings once).
fn write_runs(inner: &Inner, runs: &mut [WindowRun]) -> Result<Vec<u64>> {
    let moved_bytes: u64 = runs
        .iter()
        .flat_map(|r| r.entries.iter())
        .map(|(k, v)| (k.len() + v.len()) as u64)
        .sum();
    let mut prepared: Vec<PreparedRun> = Vec::with_capacity(runs.len());
    for run in runs.iter_mut().filter(|r| !r.entries.is_empty()) {
        match inner
            .lower
            .prepare_run(Space::Windows, std::mem::take(&mut run.entries))
        {
            Ok(p) => prepared.push(p),
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
    let file_bytes: Vec<u64> = prepared.iter().map(|p| p.file_bytes).collect();
    let mut ingested = Vec::new();
    let mut remaining = prepared.into_iter();
    for run in remaining.by_ref() {
        let win = run.first_key.as_deref().and_then(keys::window_of);
        if let Err(e) = inner.lower.ingest(run) {
            remaining.for_each(|p| inner.lower.discard(p));
            let _ = inner.lower.drop_windows(&ingested);
            return Err(e);
        }
        ingested.extend(win);
    }
    if let Err(e) = inner.options.fail_points.check(PassStep::Ingested) {
        let _ = inner.lower.drop_windows(&ingested);
        return Err(e);
    }
    Counters::add(&inner.counters.moved_bytes, moved_bytes);
    Ok(file_bytes)
}

/// The settled readings the catalog batch deletes (of departed devices that had some, and of
/// trims): reclaimed from the settled space's files once the batch is durable.
fn settled_dead_ranges(
    snapshot: &Snapshot,
    settled_deletes: &[CatalogOp],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let departed = snapshot
        .departed
        .iter()
        .filter(|(_, settled)| *settled)
        .map(|(lower_id, _)| Place::Settled.range(*lower_id, None));
    let trimmed = settled_deletes.iter().filter_map(|op| match op {
        CatalogOp::DeleteRange(Space::Settled, start, end) => Some((start.clone(), end.clone())),
        _ => None,
    });
    departed.chain(trimmed).collect()
}

/// Step 4's batch.
fn catalog_ops(
    snapshot: &Snapshot,
    runs: &[WindowRun],
    settled_deletes: Vec<CatalogOp>,
) -> Vec<CatalogOp> {
    let mut ops = Vec::new();
    for (lower_id, _) in &snapshot.departed {
        ops.extend(CatalogOp::forget_device(*lower_id));
    }
    for (_, lower_id, record) in &snapshot.new_devices {
        ops.push(CatalogOp::Put(
            Space::Catalog,
            keys::device_key(*lower_id),
            record.encode(),
        ));
    }
    for (lower_id, record) in &snapshot.rewrites {
        ops.push(CatalogOp::Put(
            Space::Catalog,
            keys::device_key(*lower_id),
            record.encode(),
        ));
    }
    ops.extend(settled_deletes);
    for run in runs {
        for (lower_id, bytes) in run.members.values() {
            ops.push(CatalogOp::Put(
                Space::Catalog,
                keys::membership_key(*lower_id, run.win),
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
