//! Steps 2 to 4 of a pass (`super`), without the state lock: the segment read once in log order,
//! the readings sorted and cut into windows, each written as one file into the lower tier, and
//! the catalog batch that names them.

use std::collections::BTreeMap;

use crate::commit_log::record;
use crate::commit_log::segment::Segment;
use crate::lower::keys::{self, Place};
use crate::lower::{CatalogOp, PreparedRun, Space};
use crate::model::error::{Error, Result};
use crate::model::ids::{DeviceId, LowerId, WindowId};
use crate::model::limits::{MOVE_READ_CHUNK_BYTES, MOVE_READ_GAP_BYTES, WINDOW_BYTES_MAX};
use crate::options::failpoints::PassStep;
use crate::state::Inner;
use crate::state::at_index::{AtIndex, RecordLookup};
use crate::stats::Counters;

use super::snapshot::{Moving, Snapshot};

/// A window's run, sorted, and who has how many bytes in it.
pub(super) struct WindowRun {
    pub(super) win: WindowId,
    pub(super) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(super) members: BTreeMap<DeviceId, (LowerId, u64)>,
}

/// Step 2 and the sort of step 3: reads every moving reading in one sweep and cuts the sorted
/// readings into window runs.
pub(super) fn read_runs(inner: &Inner, snapshot: &Snapshot) -> Result<Vec<WindowRun>> {
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
        let mut end = start + u64::from(first.record_len());
        let mut last = at + 1;
        while let Some(&next) = order.get(last) {
            let e = &snapshot.moving[next].entry;
            let e_end = e.offset as u64 + u64::from(e.record_len());
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
        // The readings of one record are next to each other in `order`: it is decoded (and its
        // checksum computed) once for all of them, and its readings found by a map of them.
        let mut decoded: Option<(u32, RecordLookup<'_>)> = None;
        for (k, &i) in order[at..last].iter().enumerate() {
            let m = &snapshot.moving[i];
            if decoded
                .as_ref()
                .is_none_or(|(offset, _)| *offset != m.entry.offset)
            {
                let from = (m.entry.offset as u64 - start) as usize;
                let bytes = &buffer[from..from + m.entry.record_len() as usize];
                let wanted = order[at + k..last]
                    .iter()
                    .take_while(|&&j| snapshot.moving[j].entry.offset == m.entry.offset)
                    .count();
                let record = record::decode(bytes, segment.seq_low());
                decoded = Some((m.entry.offset, RecordLookup::new(record, wanted)));
            }
            let (_, record) = decoded.as_ref().expect("decoded above");
            values[i] = checked_value(segment, m, record)?;
        }
        segment.drop_cache(start, len as u64);
        at = last;
    }
    Ok(cut_into_windows(snapshot, values))
}

/// The value of a moving reading in its decoded record, after checking the record holds it.
pub(super) fn checked_value(
    segment: &Segment,
    m: &Moving,
    record: &RecordLookup<'_>,
) -> Result<Vec<u8>> {
    let corrupt = |reason: String| Error::Corrupt {
        file: segment.path.clone(),
        offset: m.entry.offset as u64,
        reason,
    };
    match record.find(&m.sensor, m.entry.ts_ns) {
        AtIndex::Put { value, .. } => Ok(value.to_vec()),
        AtIndex::Elsewhere(reason) | AtIndex::Corrupt(reason) => Err(corrupt(reason)),
    }
}

/// Sorts the readings by (lower id, sensor, ts) and cuts them into the pass's windows, each at
/// most `WINDOW_BYTES_MAX` of values (the last one takes the rest).
pub(super) fn cut_into_windows(snapshot: &Snapshot, values: Vec<Vec<u8>>) -> Vec<WindowRun> {
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
pub(super) fn settled_trim_deletes(
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
pub(super) fn write_runs(inner: &Inner, runs: &mut [WindowRun]) -> Result<Vec<u64>> {
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
pub(super) fn settled_dead_ranges(
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
pub(super) fn catalog_ops(
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
