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

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::commit_log::group_commit;
use crate::error::{Error, Result};
use crate::failpoints::MigrationStep;
use crate::key;
use crate::limits::{
    INDEX_LOW_WATER_PERCENT, LOG_PRESSURE_PERCENT, LOWER_PERSIST_INTERVAL_MS,
    MIGRATION_READ_WINDOW_BYTES, MIGRATION_RECORDS_PER_RUN_MAX, MIGRATION_RUN_BYTES_MAX,
};
use crate::lower::LowerOp;
use crate::mapping::{DeviceEntry, DeviceId, Tier};
use crate::query::{AtIndex, at_index};
use crate::segment::Segment;
use crate::spares::Retired;
use crate::state::Inner;
use crate::stats::Counters;
use crate::upper::{IndexEntry, LogPosition};

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

/// Why a device is migrated now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Its management time ended.
    Due,
    /// Early: the log is near its budget or the index over its cap.
    Early,
}

/// One round of maintenance: migrate due devices, retire what nothing holds, and while the
/// log is over its pressure mark, settle early the devices that pin its oldest segments.
/// Segments are retired after every pass, so a stream of due devices never starves
/// retirement (round 1 retired only once no device was due, which at full ingest was never).
///
/// `explicit`: the application asked (`Engine::maintain`): the lower tier is persisted for
/// retirement at once rather than at most every LOWER_PERSIST_INTERVAL_MS.
pub(crate) fn maintain(inner: &Inner, explicit: bool) -> Result<()> {
    let _one_at_a_time = inner.migration.lock();
    let mut failure = None;
    loop {
        // Shutdown does not wait for every due device: they stay in the log and migrate
        // after the next open.
        if *inner.shutdown.lock() {
            return Ok(());
        }
        let (pass, reason) = match due_devices(inner) {
            due if !due.is_empty() => (due, Reason::Due),
            _ => (devices_pinning_oldest_segment(inner), Reason::Early),
        };
        if pass.is_empty() {
            break;
        }
        let migrated = migrate(inner, &pass, reason);
        let retiring = Instant::now();
        retire_segments(inner, explicit)?;
        Counters::add_us_since(&inner.counters.pass_retire_us, retiring);
        if let Err(e) = migrated {
            // The pass was rolled back; its devices are retried at the next round. Other
            // work this round would pick the same devices again: stop here.
            failure = Some(e);
            break;
        }
    }
    retire_segments(inner, explicit)?;
    failure.map_or(Ok(()), Err)
}

/// Upper-tier devices whose management time has ended, oldest first, one pass's worth.
fn due_devices(inner: &Inner) -> Vec<DeviceId> {
    let now_ms = inner.options.clock.now_ms();
    let st = inner.state.lock();
    let mut due: Vec<Candidate> = st
        .map
        .entries()
        .filter(|(_, e)| {
            e.tier == Tier::Upper
                && now_ms
                    >= e.registered_at_ms
                        .saturating_add(inner.options.management_time_ms)
        })
        .map(|(id, e)| candidate(id, e))
        .collect();
    due.sort_unstable();
    take_one_pass(due, migration_run_bytes_max(inner))
}

/// When the log is over LOG_PRESSURE_PERCENT of its budget: the upper-tier devices holding
/// records in the oldest segment that something still holds. Settling them early frees
/// that segment (and often the next ones) without rewriting anything into the log: their
/// records are written once more, into the lower tier, where they would go at the end of
/// their management time anyway.
fn devices_pinning_oldest_segment(inner: &Inner) -> Vec<DeviceId> {
    if !log_under_pressure(inner) {
        return Vec::new();
    }
    let st = inner.state.lock();
    let Some(oldest) = st
        .log
        .segments
        .iter()
        .find(|(seq, live)| live.live_records > 0 && **seq < st.log.active.seq)
        .map(|(seq, _)| *seq)
    else {
        return Vec::new();
    };
    let mut pinning: Vec<Candidate> = st
        .map
        .entries()
        .filter(|(_, e)| {
            e.tier == Tier::Upper
                && e.index
                    .segment_records
                    .iter()
                    .any(|(seq, _)| *seq == oldest)
        })
        .map(|(id, e)| candidate(id, e))
        .collect();
    pinning.sort_unstable();
    take_one_pass(pinning, migration_run_bytes_max(inner))
}

fn log_under_pressure(inner: &Inner) -> bool {
    inner.spares.log_bytes() > inner.spares.budget_bytes / 100 * LOG_PRESSURE_PERCENT
}

/// Values one migration pass may hold: MIGRATION_RUN_BYTES_MAX, or half the lower tier's
/// memory budget if that is smaller (LevelDB copies a run once more into its write batch).
pub(crate) fn migration_run_bytes_max(inner: &Inner) -> u64 {
    MIGRATION_RUN_BYTES_MAX.min((inner.options.lower_memory_bytes / 2).max(4 << 20))
}

/// Migrates the oldest upper-tier devices early until the index is below its low-water
/// mark. Writers that find the index over its cap call this and so wait for it.
pub(crate) fn migrate_for_memory(inner: &Inner) -> Result<()> {
    let _one_at_a_time = inner.migration.lock();
    let low_water = inner.options.index_bytes_max / 100 * INDEX_LOW_WATER_PERCENT;
    loop {
        let chosen = {
            let st = inner.state.lock();
            if st.index_bytes <= low_water {
                return Ok(());
            }
            let mut upper: Vec<(Candidate, u64)> = st
                .map
                .entries()
                .filter(|(_, e)| e.tier == Tier::Upper)
                .map(|(id, e)| (candidate(id, e), e.index.index_bytes()))
                .collect();
            upper.sort_unstable();
            let mut excess = st.index_bytes - low_water;
            let mut chosen = Vec::new();
            for (candidate, bytes) in upper {
                if excess == 0 {
                    break;
                }
                excess = excess.saturating_sub(bytes);
                chosen.push(candidate);
            }
            take_one_pass(chosen, migration_run_bytes_max(inner))
        };
        if chosen.is_empty() {
            return Ok(()); // everything left is already migrating
        }
        migrate(inner, &chosen, Reason::Early)?;
        retire_segments(inner, false)?;
    }
}

/// Migrates the devices as one sorted run. Complete or rolled back: on any failure every
/// device is back in the upper tier with its index and holds, as before the call, and is
/// retried by a later pass; nothing is lost (the log still holds every record).
fn migrate(inner: &Inner, ids: &[DeviceId], reason: Reason) -> Result<()> {
    let c = &inner.counters;
    let started = Instant::now();
    let (mut moving, snapshot_end) = begin_migration(inner, ids);
    let mut step = Counters::add_us_since(&c.pass_snapshot_us, started);
    let ingested = inner
        .options
        .fail_points
        .check(MigrationStep::ReadLog)
        .and_then(|()| {
            let runs = build_run(inner, &mut moving)?;
            step = Counters::add_us_since(&c.pass_read_us, step);
            inner.options.fail_points.check(MigrationStep::Ingest)?;
            // An ingested run is durable at once: the log records it was read from must be
            // too (None/Periodic modes), or a power cut could keep the run and lose a DEPART
            // or REGISTER logged before it.
            group_commit::sync_unsynced(inner)?;
            let written = inner.lower.ingest_sorted(&runs);
            step = Counters::add_us_since(&c.pass_write_us, step);
            written
        });
    let outcome = ingested.and_then(|_| finish_migration(inner, &moving, snapshot_end, reason));
    Counters::add_us_since(&c.pass_commit_us, step);
    c.pass_done(started);
    if outcome.is_err() {
        Counters::add(&inner.counters.migration_failures, 1);
        roll_back_migration(inner, &moving);
    }
    outcome
}

/// Step 1: under the lock, marks the devices `Migrating` and copies their index entries.
fn begin_migration(inner: &Inner, ids: &[DeviceId]) -> (Vec<Moving>, LogPosition) {
    let mut st = inner.state.lock();
    let snapshot_end = st.log.applied_end;
    let mut moving = Vec::with_capacity(ids.len());
    for &id in ids {
        if st.map.entry(id).is_none_or(|e| e.tier != Tier::Upper) {
            continue;
        }
        // Ids in the order the devices are listed: the run is sorted by construction.
        let lower_id = st.map.allocate_lower_id();
        let entry = st.map.entry(id).expect("checked above");
        let entries = entry
            .index
            .all()
            .map(|(sensor, e)| {
                let segment = st.log.segment_of(&e);
                (
                    key::reading_key(lower_id, sensor, e.ts_ms),
                    e,
                    Arc::clone(segment),
                )
            })
            .collect();
        moving.push(Moving {
            id,
            name: entry.name.to_string(),
            lower_id,
            registered_at_ms: entry.registered_at_ms,
            entries,
        });
        st.map.entry_mut(id).expect("checked above").tier = Tier::Migrating;
    }
    (moving, snapshot_end)
}

/// Step 3: the records applied while the run was ingested go to the lower tier as ordinary
/// (logged, unsynced) puts; the devices switch to `Lower`; their indexes and holds are
/// released. A device that departed meanwhile is deleted from the lower tier instead. Every
/// read that can fail happens before the first change, so a failure leaves nothing half done.
fn finish_migration(
    inner: &Inner,
    moving: &[Moving],
    snapshot_end: LogPosition,
    reason: Reason,
) -> Result<()> {
    let mut st = inner.state.lock();
    inner.options.fail_points.check(MigrationStep::CatchUp)?;
    let mut ops = Vec::new();
    let mut caught_up_segments = Vec::new();
    let mut migrated_records = 0;
    for m in moving {
        let Some(entry) = st.map.entry(m.id) else {
            continue;
        };
        if entry.departed {
            let (start, end) = key::device_reading_range(m.lower_id);
            ops.push(LowerOp::DeleteRange(start, end));
            ops.push(LowerOp::Delete(key::device_key(m.lower_id)));
            continue;
        }
        // Trimmed meanwhile: the ingested run still holds what the TRIM removed from the
        // index. Trim it before the catch-up, which may hold older readings written after
        // the TRIM. The TRIM's segment then counts a lower write: it stays until a persist.
        if let Some((before_ms, trim_seq)) = entry.trimmed_while_migrating {
            ops.push(LowerOp::TrimBefore {
                lower_id: m.lower_id,
                before_ms,
            });
            caught_up_segments.push(trim_seq);
        }
        for (sensor, e) in entry
            .index
            .all()
            .filter(|(_, e)| e.position() >= snapshot_end)
        {
            let segment = st.log.segment_of(&e);
            let value = read_put_value(segment, &e)?;
            Counters::add(&inner.counters.maintenance_read_bytes, e.len as u64);
            ops.push(LowerOp::Put(
                key::reading_key(m.lower_id, sensor, e.ts_ms),
                value,
            ));
            caught_up_segments.push(e.segment_seq);
        }
        migrated_records += entry.index.records;
    }
    // Nothing can fail from here on but the lower tier's write, which poisons the engine.
    for m in moving {
        let Some(entry) = st.map.entry_mut(m.id) else {
            continue;
        };
        let departed = entry.departed;
        entry.trimmed_while_migrating = None;
        let index = std::mem::take(&mut entry.index);
        st.index_bytes -= index.index_bytes();
        st.log.release(&index);
        if departed {
            st.map.remove(m.id);
        } else if let Some(entry) = st.map.entry_mut(m.id) {
            entry.tier = Tier::Lower;
            entry.lower_id = m.lower_id;
            Counters::add(&inner.counters.migrations, 1);
            if reason == Reason::Early {
                Counters::add(&inner.counters.early_migrations, 1);
            }
        }
    }
    for seq in caught_up_segments {
        st.log.mark_lower_write(seq);
    }
    Counters::add(&inner.counters.migrated_records, migrated_records);
    if let Err(e) = inner.write_lower(&mut st, &ops) {
        st.poisoned = Some(format!(
            "writing a migration's catch-up to the lower tier: {e}"
        ));
        inner.group_done.notify_all();
        return Err(e);
    }
    Ok(())
}

/// Puts the devices of a failed pass back in the upper tier. What the pass may have
/// ingested under their new lower ids is deleted (unsynced: were it to survive a crash,
/// recovery would find those devices settled and re-put their logged records, which is
/// consistent too).
fn roll_back_migration(inner: &Inner, moving: &[Moving]) {
    let mut st = inner.state.lock();
    let mut ops = Vec::new();
    for m in moving {
        let (start, end) = key::device_reading_range(m.lower_id);
        ops.push(LowerOp::DeleteRange(start, end));
        ops.push(LowerOp::Delete(key::device_key(m.lower_id)));
        let Some(entry) = st.map.entry_mut(m.id) else {
            continue;
        };
        entry.tier = Tier::Upper;
        // Its index was trimmed when the TRIM was applied; what the run held is deleted.
        entry.trimmed_while_migrating = None;
        // A departure that arrived meanwhile is completed now, as if applied then.
        if entry.departed
            && let Some(entry) = st.map.remove(m.id)
        {
            st.index_bytes -= entry.index.index_bytes();
            st.log.release(&entry.index);
        }
    }
    if let Err(e) = inner.write_lower(&mut st, &ops) {
        st.last_maintenance_error = Some(format!("cleaning up after a failed migration: {e}"));
    }
}

/// Reads the moving devices' records and returns the two runs to ingest: their readings,
/// and one mapping record per device. Both lie above every key already in the lower tier
/// (fresh lower ids), so the LSM can place them in its last level without rewriting.
fn build_run(inner: &Inner, moving: &mut [Moving]) -> Result<Vec<Run>> {
    let located: Vec<Located> = moving
        .iter_mut()
        .flat_map(|m| m.entries.drain(..))
        .collect();
    let values = read_values_in_log_order(&inner.counters, &located)?;
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
/// A segment whose records reached the lower tier retires only after a lower-tier persist
/// (DESIGN.md property 3); such persists are spaced LOWER_PERSIST_INTERVAL_MS apart unless
/// the log is under pressure.
fn retire_segments(inner: &Inner, persist_now: bool) -> Result<()> {
    let mut st = inner.state.lock();
    let mut candidates = st.log.retirable();
    let first_needing_persist = candidates.iter().position(|(_, lower)| *lower > 0);
    if st.lower_dirty
        && let Some(first) = first_needing_persist
    {
        let now_ms = inner.options.clock.now_ms();
        let persist_due = persist_now
            || now_ms >= st.lower_persisted_at_ms + LOWER_PERSIST_INTERVAL_MS
            || log_under_pressure(inner);
        if persist_due {
            // The lower tier's unsynced writes are covered only by these segments' records:
            // make them durable before the records go.
            st.lower_dirty = false;
            drop(st);
            // The lower tier is never made durable ahead of the log it was written from.
            if let Err(e) = group_commit::sync_unsynced(inner).and_then(|()| inner.lower.persist())
            {
                inner.state.lock().lower_dirty = true;
                return Err(e);
            }
            Counters::add(&inner.counters.lower_persists, 1);
            st = inner.state.lock();
            st.lower_persisted_at_ms = now_ms;
        } else {
            candidates.truncate(first);
        }
    }
    if candidates.is_empty() {
        return Ok(());
    }
    let seqs: Vec<u64> = candidates.iter().map(|(seq, _)| *seq).collect();
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
    outcome
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
        let outcome = maintain(inner, false);
        inner.state.lock().last_maintenance_error = outcome.err().map(|e| e.to_string());
    }
}

/// A device that may be migrated: (registered_at_ms, id, records, record bytes).
type Candidate = (u64, DeviceId, u64, u64);

fn candidate(id: DeviceId, e: &DeviceEntry) -> Candidate {
    (
        e.registered_at_ms,
        id,
        e.index.records,
        e.index.record_bytes,
    )
}

/// The first candidates (always at least one) up to MIGRATION_RECORDS_PER_RUN_MAX records and
/// `bytes_max` bytes: one pass's sorted run.
fn take_one_pass(candidates: Vec<Candidate>, bytes_max: u64) -> Vec<DeviceId> {
    let (mut records, mut bytes) = (0, 0);
    let mut ids = Vec::new();
    for (_, id, n, b) in candidates {
        if !ids.is_empty()
            && (records + n > MIGRATION_RECORDS_PER_RUN_MAX as u64 || bytes + b > bytes_max)
        {
            break;
        }
        records += n;
        bytes += b;
        ids.push(id);
    }
    ids
}

/// Reads the values of many records, visiting the log in order and reading each stretch of up
/// to MIGRATION_READ_WINDOW_BYTES once. Returns the values in the order of `located`.
fn read_values_in_log_order(counters: &Counters, located: &[Located]) -> Result<Vec<Vec<u8>>> {
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
        Counters::add(&counters.maintenance_read_bytes, window.len() as u64);
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
