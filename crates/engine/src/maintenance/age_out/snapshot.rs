//! Step 1 of a pass (`super`): what the pass takes of the state, in short holds of the state
//! lock: the segment's devices, places and events, then their index entries a bounded number
//! per hold, then the window ids. Memory only: no I/O under the lock.

use std::collections::HashMap;
use std::sync::Arc;

use crate::commit_log::log_state::SegmentEvent;
use crate::commit_log::segment::Segment;
use crate::lower::keys::{CatalogMeta, DeviceRecord};
use crate::model::ids::{DeviceId, LowerId, SegmentSeq, WindowId};
use crate::model::limits::WINDOW_BYTES_MAX;
use crate::state::mapping::{DeviceEntry, MappingTable};
use crate::state::upper::IndexEntry;
use crate::state::{Inner, LowerBook, State};
use crate::stats::Counters;

/// One reading to move: whose, and where it is in the segment.
pub(super) struct Moving {
    pub(super) device: DeviceId,
    pub(super) lower_id: LowerId,
    pub(super) sensor: Arc<str>,
    pub(super) entry: IndexEntry,
}

/// What the snapshot took (step 1).
pub(super) struct Snapshot {
    pub(super) seq: SegmentSeq,
    pub(super) segment: Arc<Segment>,
    pub(super) moving: Vec<Moving>,
    /// Devices the catalog learns in this pass: (id, its record, lower id).
    pub(super) new_devices: Vec<(DeviceId, LowerId, DeviceRecord)>,
    /// Known devices whose record changes (a TRIM): (lower id, record).
    pub(super) rewrites: Vec<(LowerId, DeviceRecord)>,
    /// Lower ids of devices that departed in this segment, each with whether it had settled
    /// readings.
    pub(super) departed: Vec<(LowerId, bool)>,
    /// TRIMs of devices with settled readings: (device, lower id, cutoff).
    pub(super) settled_trims: Vec<(DeviceId, LowerId, i64)>,
    /// Window ids given to this pass, from `first_win` on.
    pub(super) first_win: WindowId,
    pub(super) windows: u64,
    pub(super) meta: CatalogMeta,
}

/// Step 1, in short holds of the state lock: a segment holds up to a million readings, and
/// copying all their index entries in one hold kept writers waiting up to 75 ms (the 1800 s run
/// in docs/BENCHMARKS.md). So: the segment's devices, places and events in one hold (1a),
/// their entries in holds of about `SNAPSHOT_ENTRIES_PER_HOLD` (1b), the window ids in a last
/// one (1c). What changes between holds is what changes during the rest of a pass anyway: a
/// device that leaves has nothing left to move (its DEPART is in a later segment, whose pass
/// drops its place), a TRIM leaves fewer entries; the segment is sealed, so nothing is added.
pub(super) fn take_snapshot(inner: &Inner, seq: SegmentSeq) -> Option<Snapshot> {
    let plan = plan_snapshot(inner, seq)?;
    let moving = collect_moving(inner, seq, &plan.holders);
    let move_bytes: u64 = moving.iter().map(|m| m.entry.share_bytes()).sum();
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
pub(super) struct SnapshotPlan {
    segment: Arc<Segment>,
    holders: Vec<(DeviceId, LowerId)>,
    new_devices: NewDevices,
    events: Events,
}

/// Step 1a, one hold: memory proportional to the segment's devices, not its readings.
pub(super) fn plan_snapshot(inner: &Inner, seq: SegmentSeq) -> Option<SnapshotPlan> {
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
pub(super) fn collect_moving(
    inner: &Inner,
    seq: SegmentSeq,
    holders: &[(DeviceId, LowerId)],
) -> Vec<Moving> {
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
pub(super) struct Events {
    departed: Vec<(LowerId, bool)>,
    rewrites: Vec<(LowerId, DeviceRecord)>,
    settled_trims: Vec<(DeviceId, LowerId, i64)>,
}

pub(super) fn events(map: &MappingTable, lower: &LowerBook, events: &[SegmentEvent]) -> Events {
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
pub(super) struct NewDevices {
    records: Vec<(DeviceId, LowerId, DeviceRecord)>,
    given: HashMap<DeviceId, LowerId>,
}

/// A lower id for a device without a place (once per pass): the catalog learns it in this pass.
pub(super) fn give_place(
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

pub(super) fn device_record(entry: &DeviceEntry, settled: bool) -> DeviceRecord {
    DeviceRecord {
        registered_at_ms: entry.registered_at_ms,
        settled,
        trims: entry.trims.clone(),
        name: entry.name.to_string(),
    }
}
