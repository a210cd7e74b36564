//! What happens when management time ends: migration of devices still present into the lower
//! tier (sorted, in bulk), and retirement of log segments nothing needs any more.
//!
//! Migration of a batch of devices, step by step (docs/ENGINE.md, "Migration"):
//! 1. Under the lock: mark them `Migrating`, copy their index entries, remember `applied_end`.
//!    Reads keep using the upper index; new puts keep going into it.
//! 2. Without the lock: read their records from the log, sort, add each device's mapping key,
//!    and ingest the run into the lower tier (atomic and durable when it returns).
//! 3. Under the lock: records applied after step 1 (positions >= `applied_end`) are written to
//!    the lower tier as ordinary (unsynced, logged) puts; the device switches to `Lower`; its
//!    index and segment holds are released. A device that departed meanwhile is deleted from
//!    the lower tier instead.
//!
//! A crash anywhere leaves a consistent state: before step 2 completes, the device is still
//! an upper device in the log; after it, the lower tier's mapping key says the device is
//! settled, and recovery re-puts its logged records into the lower tier (idempotent).

use std::sync::Arc;

use crate::engine::{AtIndex, Inner, at_index, release};
use crate::error::{Error, Result};
use crate::key;
use crate::limits::{
    INDEX_LOW_WATER_PERCENT, MIGRATION_READ_WINDOW_BYTES, MIGRATION_RECORDS_PER_RUN_MAX,
};
use crate::lower::LowerOp;
use crate::mapping::{DeviceId, Tier};
use crate::segment::Segment;
use crate::spares::Retired;
use crate::stats::Counters;
use crate::upper::IndexEntry;

/// A record to migrate: its lower-tier key, where it is in the log, and the segment.
type Located = (Vec<u8>, IndexEntry, Arc<Segment>);
/// A sorted run of (key, value) pairs for the lower tier.
type Run = Vec<(Vec<u8>, Vec<u8>)>;

/// One device's part of a migration pass.
struct Moving {
    id: DeviceId,
    name: String,
    lower_id: u64,
    registered_at_ms: u64,
    entries: Vec<Located>,
}

impl Inner {
    pub(crate) fn maintain(&self) -> Result<()> {
        let _one_at_a_time = self.migration.lock();
        loop {
            // Shutdown does not wait for every due device: they stay in the log and migrate
            // after the next open.
            if *self.shutdown.lock() {
                return Ok(());
            }
            let now_ms = self.options.clock.now_ms();
            let due = {
                let st = self.state.lock();
                let mut due: Vec<(u64, DeviceId, u64)> = st
                    .map
                    .entries()
                    .filter(|(_, e)| {
                        e.tier == Tier::Upper
                            && now_ms
                                >= e.registered_at_ms
                                    .saturating_add(self.options.management_time_ms)
                    })
                    .map(|(id, e)| (e.registered_at_ms, id, e.index.records))
                    .collect();
                due.sort_unstable();
                take_up_to_records(due)
            };
            if due.is_empty() {
                break;
            }
            self.migrate(&due)?;
        }
        self.retire_segments()
    }

    /// Migrates the oldest upper-tier devices early until the index is below its low-water
    /// mark. Writers that find the index over its cap call this and so wait for it.
    pub(crate) fn migrate_for_memory(&self) -> Result<()> {
        let _one_at_a_time = self.migration.lock();
        let low_water = self.options.index_bytes_max / 100 * INDEX_LOW_WATER_PERCENT;
        loop {
            let chosen = {
                let st = self.state.lock();
                if st.index_bytes <= low_water {
                    return Ok(());
                }
                let mut upper: Vec<(u64, DeviceId, u64, u64)> = st
                    .map
                    .entries()
                    .filter(|(_, e)| e.tier == Tier::Upper)
                    .map(|(id, e)| {
                        (
                            e.registered_at_ms,
                            id,
                            e.index.records,
                            e.index.index_bytes(),
                        )
                    })
                    .collect();
                upper.sort_unstable();
                let mut excess = st.index_bytes - low_water;
                let mut chosen = Vec::new();
                for (at, id, records, bytes) in upper {
                    if excess == 0 {
                        break;
                    }
                    excess = excess.saturating_sub(bytes);
                    chosen.push((at, id, records));
                }
                take_up_to_records(chosen)
            };
            if chosen.is_empty() {
                return Ok(()); // everything left is already migrating
            }
            self.migrate(&chosen)?;
        }
    }

    fn migrate(&self, ids: &[DeviceId]) -> Result<()> {
        // Step 1.
        let (mut moving, snapshot_end) = {
            let mut st = self.state.lock();
            let snapshot_end = st.log.applied_end;
            let mut moving = Vec::with_capacity(ids.len());
            for &id in ids {
                if st.map.entry(id).is_none() {
                    continue;
                }
                // Ids in the order the devices are listed: the run is sorted by construction.
                let lower_id = st.map.allocate_lower_id();
                let Some(entry) = st.map.entry(id) else {
                    continue;
                };
                let entries: Vec<(Vec<u8>, IndexEntry)> = entry
                    .index
                    .all()
                    .map(|(sensor, e)| (key::reading_key(lower_id, sensor, e.ts_ms), e))
                    .collect();
                let name = entry.name.to_string();
                let registered_at_ms = entry.registered_at_ms;
                let entries = entries
                    .into_iter()
                    .map(|(k, e)| {
                        let segment = Arc::clone(
                            &st.log
                                .segments
                                .get(&e.segment_seq)
                                .expect("held segments are live")
                                .segment,
                        );
                        (k, e, segment)
                    })
                    .collect();
                if let Some(entry) = st.map.entry_mut(id) {
                    entry.tier = Tier::Migrating;
                }
                moving.push(Moving {
                    id,
                    name,
                    lower_id,
                    registered_at_ms,
                    entries,
                });
            }
            (moving, snapshot_end)
        };

        // Step 2.
        let run = self
            .build_run(&mut moving)
            .and_then(|runs| self.lower.ingest_sorted(&runs));
        if let Err(e) = run {
            let mut st = self.state.lock();
            for m in &moving {
                if let Some(entry) = st.map.entry_mut(m.id) {
                    entry.tier = Tier::Upper;
                    // A departure that arrived meanwhile is completed now, as if applied then.
                    if entry.departed
                        && let Some(entry) = st.map.remove(m.id)
                    {
                        st.index_bytes -= entry.index.index_bytes();
                        release(&mut st.log, &entry.index);
                    }
                }
            }
            return Err(e);
        }

        // Step 3.
        let mut st = self.state.lock();
        let mut ops = Vec::new();
        let mut migrated_records = 0;
        for m in &moving {
            let Some(entry) = st.map.entry(m.id) else {
                continue;
            };
            if entry.departed {
                let (start, end) = key::device_reading_range(m.lower_id);
                ops.push(LowerOp::DeleteRange(start, end));
                ops.push(LowerOp::Delete(key::device_key(m.lower_id)));
            } else {
                for (sensor, e) in entry
                    .index
                    .all()
                    .filter(|(_, e)| e.position() >= snapshot_end)
                {
                    let segment = &st
                        .log
                        .segments
                        .get(&e.segment_seq)
                        .expect("held segments are live")
                        .segment;
                    let value = read_put_value(segment, &e)?;
                    ops.push(LowerOp::Put(
                        key::reading_key(m.lower_id, sensor, e.ts_ms),
                        value,
                    ));
                }
                migrated_records += entry.index.records;
            }
            let departed = entry.departed;
            let index = std::mem::take(&mut st.map.entry_mut(m.id).expect("looked up above").index);
            st.index_bytes -= index.index_bytes();
            release(&mut st.log, &index);
            if departed {
                st.map.remove(m.id);
            } else if let Some(entry) = st.map.entry_mut(m.id) {
                entry.tier = Tier::Lower;
                entry.lower_id = m.lower_id;
                Counters::add(&self.counters.migrations, 1);
            }
        }
        Counters::add(&self.counters.migrated_records, migrated_records);
        self.write_lower(&mut st, &ops)
    }

    /// Reads the moving devices' records and returns the two runs to ingest: their readings,
    /// and one mapping record per device. Both lie above every key already in the lower tier
    /// (fresh lower ids), so the LSM can place them in its last level without rewriting.
    fn build_run(&self, moving: &mut [Moving]) -> Result<Vec<Run>> {
        let located: Vec<Located> = moving
            .iter_mut()
            .flat_map(|m| m.entries.drain(..))
            .collect();
        let values = read_values_in_log_order(&located)?;
        let readings: Run = located.into_iter().map(|(k, _, _)| k).zip(values).collect();
        let devices: Run = moving
            .iter()
            .map(|m| {
                (
                    key::device_key(m.lower_id),
                    key::encode_device_value(m.registered_at_ms, &m.name),
                )
            })
            .collect();
        // Ids ascend with the list and each index iterates (sensor, ts) in order: sorted already.
        assert!(
            readings.windows(2).all(|w| w[0].0 < w[1].0),
            "a migration run must be strictly sorted"
        );
        assert!(
            devices.windows(2).all(|w| w[0].0 < w[1].0),
            "device records must be strictly sorted"
        );
        Ok(vec![readings, devices])
    }

    /// Retires the oldest segments that nothing holds: every upper device with records in them
    /// has left or settled, and every group that touched them has been applied. Segments are
    /// retired strictly in order, so the live log is always a suffix of the whole log: replayed
    /// in order, it never shows a device's records without the later DEPART that cancels them.
    fn retire_segments(&self) -> Result<()> {
        let mut st = self.state.lock();
        let applied_seq = st.log.applied_end.segment_seq;
        let candidates: Vec<u64> = st
            .log
            .segments
            .iter()
            .take_while(|(seq, live)| {
                **seq < applied_seq && **seq < st.log.active.seq && live.live_records == 0
            })
            .map(|(seq, _)| *seq)
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        // The lower tier's unsynced writes are covered only by these segments' records:
        // make them durable before the records go (DESIGN.md property 3).
        if st.lower_dirty {
            st.lower_dirty = false;
            drop(st);
            if let Err(e) = self.lower.persist() {
                self.state.lock().lower_dirty = true;
                return Err(e);
            }
            st = self.state.lock();
        }
        let retired: Vec<Arc<Segment>> = candidates
            .iter()
            .filter_map(|seq| st.log.segments.remove(seq))
            .map(|live| live.segment)
            .collect();
        for seq in &candidates {
            st.log.unsynced.remove(seq);
        }
        drop(st);
        for segment in retired {
            let (file, path) = segment.retire()?;
            self.spares.retire(Retired {
                file,
                path,
                bytes: segment.bytes,
            });
        }
        Ok(())
    }

    pub(crate) fn run_maintenance(&self) {
        let interval = std::time::Duration::from_millis(self.options.maintenance_interval_ms);
        loop {
            {
                let mut stop = self.shutdown.lock();
                if !*stop {
                    self.shutdown_signal.wait_for(&mut stop, interval);
                }
                if *stop {
                    return;
                }
            }
            let outcome = self.maintain();
            self.state.lock().last_maintenance_error = outcome.err().map(|e| e.to_string());
        }
    }
}

/// Caps a migration pass at MIGRATION_RECORDS_PER_RUN_MAX records (always at least one device).
fn take_up_to_records(candidates: Vec<(u64, DeviceId, u64)>) -> Vec<DeviceId> {
    let mut records = 0;
    let mut ids = Vec::new();
    for (_, id, n) in candidates {
        if !ids.is_empty() && records + n > MIGRATION_RECORDS_PER_RUN_MAX as u64 {
            break;
        }
        records += n;
        ids.push(id);
    }
    ids
}

/// Reads the values of many records, visiting the log in order and reading each stretch of up
/// to MIGRATION_READ_WINDOW_BYTES once. Returns the values in the order of `located`.
fn read_values_in_log_order(located: &[Located]) -> Result<Vec<Vec<u8>>> {
    let mut order: Vec<usize> = (0..located.len()).collect();
    order.sort_unstable_by_key(|&i| located[i].1.position());
    let mut values = vec![Vec::new(); located.len()];
    let mut at = 0;
    while at < order.len() {
        let (_, first, segment) = &located[order[at]];
        let window_start = first.offset as u64;
        let mut window_end = window_start + first.len as u64;
        let mut end = at + 1;
        while let Some(&next) = order.get(end) {
            let (_, e, s) = &located[next];
            let e_end = e.offset as u64 + e.len as u64;
            if !Arc::ptr_eq(s, segment) || e_end - window_start > MIGRATION_READ_WINDOW_BYTES {
                break;
            }
            window_end = window_end.max(e_end);
            end += 1;
        }
        let window = segment.read_at(window_start, (window_end - window_start) as usize)?;
        for &i in &order[at..end] {
            let e = &located[i].1;
            let from = (e.offset as u64 - window_start) as usize;
            values[i] = decode_put_value(segment, e, &window[from..from + e.len as usize])?;
        }
        at = end;
    }
    Ok(values)
}

/// Reads one PUT record from the log and returns its value, checking it is the one indexed.
fn read_put_value(segment: &Segment, entry: &IndexEntry) -> Result<Vec<u8>> {
    decode_put_value(
        segment,
        entry,
        &segment.read_record(entry.offset as u64, entry.len)?,
    )
}

fn decode_put_value(segment: &Segment, entry: &IndexEntry, bytes: &[u8]) -> Result<Vec<u8>> {
    match at_index(bytes, segment.seq_low(), entry) {
        AtIndex::Put { value, .. } => Ok(value.to_vec()),
        AtIndex::Elsewhere(reason) | AtIndex::Corrupt(reason) => Err(Error::Corrupt {
            file: segment.path.clone(),
            offset: entry.offset as u64,
            reason,
        }),
    }
}
