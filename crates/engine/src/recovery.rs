//! Opening a data directory: rebuild the mapping table and the upper-tier indexes by reading
//! the live log segments sequentially, cut a torn tail, and re-apply logged writes of settled
//! devices to the lower tier (whose own WAL is off). Also the offline `check`.
//!
//! Replay rules (docs/ENGINE.md, "Recovery"):
//! - Settled devices are known first, from their mapping keys in the lower tier.
//! - REGISTER of an unknown device starts an upper-tier incarnation (with its original time).
//! - PUT of an upper device is indexed; of a settled device, re-put into the lower tier
//!   (idempotent: the same key and value); of an unknown device, skipped (it departed and
//!   its REGISTER was retired with everything before the departure).
//! - DEPART drops the device: from the index, or with a range delete from the lower tier.
//! - TRIM drops the device's older readings: from the index, or with range deletes from the
//!   lower tier, in log order with the re-puts around it (crates/engine/src/trim.rs).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::commit_log::log_state::LogState;
use crate::dir::DataDir;
use crate::error::{Error, IoContext, Result};
use crate::key;
use crate::limits::SEGMENT_HEADER_BYTES;
use crate::lower::{LowerOp, LowerTier, LowerTierKind, rocks::RocksLower};
use crate::mapping::{MappingTable, Tier};
use crate::options::Options;
use crate::record::Body;
use crate::segment::{self, ScanEnd, Segment};
use crate::spares::{SegmentPlan, Spares};
use crate::state::{Inner, Recovery, State};
use crate::stats::Counters;
use crate::storage::{PlainFiles, Storage};
use crate::timed_mutex::TimedMutex;
use crate::upper::LogPosition;

/// Lower-tier writes are replayed in batches of this many operations.
const REPLAY_LOWER_BATCH_OPS: usize = 10_000;

fn open_lower(dir: &DataDir, memory_bytes: u64) -> Result<Box<dyn LowerTier>> {
    match dir.lower_tier {
        LowerTierKind::RocksDb => Ok(Box::new(RocksLower::open(&dir.lower_dir(), memory_bytes)?)),
        #[cfg(feature = "leveldb")]
        LowerTierKind::LevelDb => Ok(Box::new(crate::lower::level::LevelLower::open(
            &dir.lower_dir(),
            memory_bytes,
        )?)),
        #[cfg(not(feature = "leveldb"))]
        LowerTierKind::LevelDb => Err(Error::InvalidOptions(
            "this build has no LevelDB support".into(),
        )),
    }
}

/// Live segment files of a log directory, in sequence order. Half-made or retired files left by
/// a crash are deleted when `clean_up` is set (open), and left alone otherwise (check).
fn list_segments(
    storage: &dyn Storage,
    log_dir: &Path,
    clean_up: bool,
) -> Result<Vec<(u64, std::path::PathBuf)>> {
    let mut found = Vec::new();
    let listed = storage
        .list(log_dir)
        .context(|| format!("listing {}", log_dir.display()))?;
    for (name, _) in listed {
        let path = log_dir.join(&name);
        if clean_up && segment::is_incomplete_segment_name(&name) {
            storage
                .remove(&path)
                .context(|| format!("removing {}", path.display()))?;
        } else if let Some(seq) = segment::parse_segment_name(&name) {
            found.push((seq, path));
        }
    }
    found.sort();
    Ok(found)
}

/// The live log is a contiguous run of sequence numbers (made in order, retired oldest first,
/// each step durable): a gap means a segment was lost, and replaying around it could revive
/// records whose DEPART was in the lost one.
fn missing_segment(log_dir: &Path, listed: &[(u64, std::path::PathBuf)]) -> Option<Error> {
    listed
        .windows(2)
        .find(|w| w[1].0 != w[0].0 + 1)
        .map(|w| Error::Corrupt {
            file: segment::segment_path(log_dir, w[0].0 + 1),
            offset: 0,
            reason: format!(
                "segment {} is missing: the log jumps from segment {} to {}",
                w[0].0 + 1,
                w[0].0,
                w[1].0
            ),
        })
}

/// The segment that holds the end of the log: the last one with data or damage.
fn last_written(ends: &[ScanEnd]) -> usize {
    ends.iter()
        .rposition(|e| e.data_end > SEGMENT_HEADER_BYTES || e.damage.is_some())
        .unwrap_or(0)
}

/// Damage that is not a torn tail: a bad record anywhere but at the end of the log, or one
/// with durable records of its segment after it; or a segment before the last that lacks its
/// SEGMENT_END (it was fdatasync'd before the next segment got a byte, so its tail was lost).
/// `place`: where the segment stands against the one holding the end of the log.
fn mid_log_damage(segment: &Segment, end: &ScanEnd, place: std::cmp::Ordering) -> Option<Error> {
    let is_last = place.is_eq();
    if place.is_lt() && end.damage.is_none() && !end.sealed {
        return Some(Error::Corrupt {
            file: segment.path.clone(),
            offset: end.data_end,
            reason: "the segment ends without its SEGMENT_END record, yet later segments hold \
                     data: its tail was lost"
                .into(),
        });
    }
    let (offset, reason) = end.damage.clone()?;
    if let Some(valid) = end.valid_record_after {
        return Some(Error::Corrupt {
            file: segment.path.clone(),
            offset,
            reason: format!(
                "{reason}; a record written after this point was durable follows at offset \
                 {valid}, so this is not a torn tail"
            ),
        });
    }
    (!is_last).then(|| Error::Corrupt {
        file: segment.path.clone(),
        offset,
        reason: format!("{reason}; later segments hold data, so this is not a torn tail"),
    })
}

/// `Engine::open`: opens or creates the data directory, replays its log and readies the
/// shared state (the caller starts the background threads).
pub(crate) fn open(path: &Path, options: Options) -> Result<Inner> {
    options.validate()?;
    let started = Instant::now();
    let dir = DataDir::open(path, Some(options.lower_tier))?;
    let lower = open_lower(&dir, options.lower_memory_bytes)?;
    let counters = Counters::default();
    let log_dir = dir.log_dir();

    let mut map = MappingTable::default();
    let mut catalog = load_settled_devices(lower.as_ref(), &mut map)?;
    let mut segments = open_segments(&log_dir, &options, &counters)?;
    let next_seq = segments.last().map_or(1, |s| s.seq + 1);
    let mut st = State {
        map,
        log: LogState::new(&segments, Arc::clone(&segments[0]), SEGMENT_HEADER_BYTES),
        poisoned: None,
        lower_dirty: false,
        index_bytes: 0,
        last_maintenance_error: None,
        lower_persisted_at_ms: options.clock.now_ms(),
    };
    let replayed = replay_log(&segments, &mut st, &mut catalog, lower.as_ref(), &counters)?;
    let (last, cut) = cut_torn_tail(&segments, &replayed.ends, &mut st)?;
    let ready = take_spares(&mut segments, last, &mut st)?;

    // Replayed departures freed space in an earlier session, not this one.
    counters
        .reclaimed_bytes_without_write
        .store(0, std::sync::atomic::Ordering::Relaxed);
    let recovery = Recovery {
        ms: started.elapsed().as_millis() as u64,
        records: replayed.records,
        buffer_bytes_max: replayed.buffer_bytes_max,
        cut,
    };
    let budget_bytes = options.log_budget_bytes(free_bytes(&*options.storage, &log_dir)?);
    let plan = SegmentPlan {
        storage: Arc::clone(&options.storage),
        log_dir: log_dir.clone(),
        segment_bytes: options.segment_bytes,
        zero_fill: zero_fill_segments(&options),
    };
    let counters = Arc::new(counters);
    let spares = Spares::new(ready, next_seq, budget_bytes, plan, Arc::clone(&counters));
    let live_bytes = st.log.segments.values().map(|l| l.segment.bytes).sum();
    spares
        .live_bytes
        .store(live_bytes, std::sync::atomic::Ordering::Relaxed);
    Ok(Inner {
        spares,
        dir,
        options,
        state: TimedMutex::new(st),
        group_done: Condvar::new(),
        space_freed: Condvar::new(),
        maintenance_wanted: AtomicBool::new(false),
        lower,
        counters,
        migration: Mutex::new(()),
        shutdown: Mutex::new(false),
        shutdown_signal: Condvar::new(),
        recovery,
    })
}

/// The live segments in order (refusing a log with a gap), or a first one for a new log.
fn open_segments(
    log_dir: &Path,
    options: &Options,
    counters: &Counters,
) -> Result<Vec<Arc<Segment>>> {
    let storage = &options.storage;
    let listed = list_segments(&**storage, log_dir, true)?;
    if let Some(error) = missing_segment(log_dir, &listed) {
        return Err(error);
    }
    let mut segments = Vec::with_capacity(listed.len().max(1));
    for (seq, path) in listed {
        segments.push(Arc::new(Segment::open(storage, &path, seq)?));
    }
    if segments.is_empty() {
        let (segment, written) = Segment::create(
            storage,
            log_dir,
            1,
            options.segment_bytes,
            zero_fill_segments(options),
        )?;
        Counters::add(&counters.log_preallocated_bytes, written);
        segments.push(Arc::new(segment));
    }
    Ok(segments)
}

/// What replaying the log found.
struct Replayed {
    /// How each segment's scan ended.
    ends: Vec<ScanEnd>,
    records: u64,
    buffer_bytes_max: u64,
}

/// Replays every segment in order (one segment in memory at a time) into the state, writing
/// settled devices' logged records to the lower tier in batches.
fn replay_log(
    segments: &[Arc<Segment>],
    st: &mut State,
    catalog: &mut Catalog,
    lower: &dyn LowerTier,
    counters: &Counters,
) -> Result<Replayed> {
    let mut replayed = Replayed {
        ends: Vec::with_capacity(segments.len()),
        records: 0,
        buffer_bytes_max: 0,
    };
    let mut lower_ops: Vec<LowerOp> = Vec::new();
    for segment in segments {
        let data = segment.read_all()?;
        replayed.buffer_bytes_max = replayed.buffer_bytes_max.max(data.len() as u64);
        let end = segment::scan(&data, segment.seq_low(), |offset, decoded| {
            let position = LogPosition {
                segment_seq: segment.seq,
                offset,
            };
            let lower_ops_before = lower_ops.len();
            replay(
                counters,
                st,
                catalog,
                &mut lower_ops,
                &decoded.body,
                position,
                decoded.len as u32,
            );
            replayed.records += 1;
            if lower_ops.len() > lower_ops_before {
                st.log.mark_lower_write(segment.seq);
            }
            if lower_ops.len() >= REPLAY_LOWER_BATCH_OPS {
                lower.write(&lower_ops)?;
                lower_ops.clear();
                st.lower_dirty = true;
            }
            Ok(())
        })?;
        replayed.ends.push(end);
    }
    if !lower_ops.is_empty() {
        lower.write(&lower_ops)?;
        st.lower_dirty = true;
    }
    Ok(replayed)
}

/// Refuses damage in the middle of the log; cuts (and zeroes) a torn tail; makes the segment
/// that holds the end of the log the active one. Returns its index and where it was cut.
fn cut_torn_tail(
    segments: &[Arc<Segment>],
    ends: &[ScanEnd],
    st: &mut State,
) -> Result<(usize, Option<String>)> {
    let last = last_written(ends);
    for (i, (segment, end)) in segments.iter().zip(ends).enumerate() {
        if let Some(error) = mid_log_damage(segment, end, i.cmp(&last)) {
            return Err(error);
        }
    }
    let active = Arc::clone(&segments[last]);
    let data_end = ends[last].data_end;
    let cut = match &ends[last].damage {
        Some((offset, reason)) => {
            // Zero the torn bytes, so that records written after this point can never be
            // followed by leftovers of the torn batch that happen to decode.
            let zeros = vec![0u8; (active.bytes - data_end) as usize];
            active.write_at(&zeros, data_end)?;
            Some(format!(
                "{}@{} ({reason} at offset {offset})",
                active.path.display(),
                data_end
            ))
        }
        None => None,
    };
    // What recovery read (and the zeros of a cut) may be only in the page cache, if a process
    // was killed in None mode: make it durable before anything is written after it, so that
    // the records this session writes can be flagged `synced_before` truthfully. Only the
    // segment holding the end of the log: every earlier one was fdatasync'd, with its
    // SEGMENT_END, before the next got a byte (checked above).
    active.sync_data()?;
    let synced: Vec<(u64, u64)> = segments[..=last]
        .iter()
        .map(|s| {
            (
                s.seq,
                if s.seq == active.seq {
                    data_end
                } else {
                    s.bytes
                },
            )
        })
        .collect();
    st.log.mark_synced(&synced);
    st.log.sealed = ends[last].sealed && ends[last].damage.is_none();
    st.log.applied_end = LogPosition {
        segment_seq: active.seq,
        offset: data_end,
    };
    st.log.active = active;
    st.log.tail = data_end;
    Ok((last, cut))
}

/// Empty segments after the end of the log were made ahead of need: they become the spares.
fn take_spares(
    segments: &mut Vec<Arc<Segment>>,
    last: usize,
    st: &mut State,
) -> Result<VecDeque<Segment>> {
    let mut ready = VecDeque::new();
    for segment in segments.drain(last + 1..) {
        st.log.segments.remove(&segment.seq);
        let segment = Arc::try_unwrap(segment).map_err(|_| {
            Error::Lower("internal: a spare segment is still referenced after recovery".into())
        })?;
        ready.push_back(segment);
    }
    Ok(ready)
}

/// New segments are zero-filled unless commits never fdatasync (see `Segment::create`).
fn zero_fill_segments(options: &Options) -> bool {
    options.durability != crate::options::Durability::None
}

/// Free bytes of the file system holding `dir`, plus what the log already occupies there
/// (the budget is the log's total, not what it may still add).
fn free_bytes(storage: &dyn Storage, dir: &Path) -> Result<u64> {
    let free = storage
        .free_bytes(dir)
        .context(|| format!("statvfs {}", dir.display()))?;
    let listed = storage
        .list(dir)
        .context(|| format!("listing {}", dir.display()))?;
    Ok(free + listed.iter().map(|(_, len)| len).sum::<u64>())
}

/// Device records of the lower tier, by name: every lower id found for it, ascending.
type Catalog = HashMap<String, Vec<u64>>;

/// Registers every settled device found in the lower tier (under its newest lower id) and
/// returns the whole catalog. A name can have more than one id after a crash: it departed
/// (deletes unsynced, lost) and settled again. The older ids are then stale, and the DEPART that
/// made them stale is still in the live log (segments are retired only after the lower tier is
/// persisted), so replay deletes them.
fn load_settled_devices(lower: &dyn LowerTier, map: &mut MappingTable) -> Result<Catalog> {
    let mut catalog: Catalog = HashMap::new();
    let mut registered_at: HashMap<u64, u64> = HashMap::new();
    let mut bad = None;
    lower.scan(
        &[key::DEVICE_TAG],
        &[key::DEVICE_TAG + 1],
        &mut |k, v| match (key::parse_device_key(k), key::decode_device_value(v)) {
            (Some(lower_id), Some((at, name))) => {
                catalog.entry(name.to_owned()).or_default().push(lower_id);
                registered_at.insert(lower_id, at);
                map.saw_lower_id(lower_id);
                true
            }
            _ => {
                bad = Some(k.to_vec());
                false
            }
        },
    )?;
    if let Some(k) = bad {
        return Err(Error::Lower(format!(
            "malformed device record {k:?} in the lower tier"
        )));
    }
    for (name, ids) in &catalog {
        let newest = *ids.last().expect("catalog entries are non-empty");
        let id = map.register(name, Tier::Lower, registered_at[&newest]);
        if let Some(entry) = map.entry_mut(id) {
            entry.lower_id = newest;
        }
    }
    Ok(catalog)
}

fn replay(
    counters: &Counters,
    st: &mut State,
    catalog: &mut Catalog,
    lower_ops: &mut Vec<LowerOp>,
    body: &Body<'_>,
    position: LogPosition,
    len: u32,
) {
    let id = match *body {
        Body::Register {
            device,
            registered_at_ms,
        } => match st.map.id(device) {
            Some(_) => return, // settled already (its device record is in the lower tier)
            None => st.map.register(device, Tier::Upper, registered_at_ms),
        },
        Body::Put { device, .. } | Body::Trim { device, .. } => match st.map.id(device) {
            Some(id) => id,
            None => return,
        },
        Body::SegmentEnd { .. } => return,
        Body::Depart { device } => {
            // Every incarnation the lower tier still holds for this name is gone: later ones
            // are rebuilt from their records, which follow in the live log.
            for lower_id in catalog.remove(device).unwrap_or_default() {
                let (start, end) = key::device_reading_range(lower_id);
                lower_ops.push(LowerOp::DeleteRange(start, end));
                lower_ops.push(LowerOp::Delete(key::device_key(lower_id)));
            }
            match st.map.unmap(device) {
                Some(id) => id,
                None => return,
            }
        }
    };
    st.apply(counters, lower_ops, id, body, position, len);
}

/// What `check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub segments: u64,
    pub records: u64,
    pub lower_keys: u64,
    /// A torn tail at the end of the log (normal after a crash; the next open cuts it).
    pub torn_tail: Option<String>,
    /// Damage: bad headers, bad records in the middle of the log, lower-tier checksum errors.
    pub problems: Vec<String>,
}

/// Verifies every checksum of a data directory without changing it: every record of every
/// live segment, and every block of the lower tier. Takes the directory's lock.
pub fn check(path: &Path) -> Result<CheckReport> {
    if !path.join(crate::dir::IDENTITY_FILE).exists() {
        return Err(Error::NotADataDirectory {
            path: path.to_path_buf(),
            reason: format!("it has no {} file", crate::dir::IDENTITY_FILE),
        });
    }
    let dir = DataDir::open(path, None)?;
    let mut report = CheckReport::default();
    let mut opened = Vec::new();
    let storage = PlainFiles::shared();
    let listed = list_segments(&*storage, &dir.log_dir(), false)?;
    if let Some(error) = missing_segment(&dir.log_dir(), &listed) {
        report.problems.push(error.to_string());
    }
    for (seq, file) in listed {
        report.segments += 1;
        match Segment::open(&storage, &file, seq) {
            Ok(segment) => opened.push(segment),
            Err(e) => report.problems.push(e.to_string()),
        }
    }
    let mut ends = Vec::new();
    for segment in &opened {
        let data = segment.read_all()?;
        let end = segment::scan(&data, segment.seq_low(), |_, _| {
            report.records += 1;
            Ok(())
        })?;
        ends.push(end);
    }
    if !opened.is_empty() {
        let last = last_written(&ends);
        for (i, (segment, end)) in opened.iter().zip(&ends).enumerate() {
            if let Some(error) = mid_log_damage(segment, end, i.cmp(&last)) {
                report.problems.push(error.to_string());
            } else if let Some((offset, reason)) = &end.damage {
                report.torn_tail = Some(format!(
                    "{} at offset {offset}: {reason}",
                    segment.path.display()
                ));
            }
        }
    }
    match open_lower(&dir, 16 << 20).and_then(|lower| lower.verify()) {
        Ok(keys) => report.lower_keys = keys,
        Err(e) => report.problems.push(e.to_string()),
    }
    Ok(report)
}
