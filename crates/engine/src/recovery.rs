//! Opening a data directory: load the lower tier's catalog (which devices have readings where,
//! which log segments have left the log), drop what a crash left half done, rebuild the mapping
//! table and the log's index by reading the live segments sequentially, cut a torn tail. Also
//! the offline `check`.
//!
//! Replay rules (docs/ENGINE.md, "Recovery"):
//! - Devices the catalog names are known first, with their windows and settled readings.
//! - REGISTER of an unknown device starts an incarnation (with its original time).
//! - PUT is indexed; of an unknown device, skipped (it departed, and its REGISTER left the log
//!   with everything before the departure).
//! - DEPART drops the device: from the index, and its windows' live bytes.
//! - TRIM drops the device's older readings from the index and hides its older windowed and
//!   settled readings, as it did live.
//!
//! **A torn tail may span segments.** A segment is not made durable when the log moves past it,
//! so after a power cut a later segment may hold data while an earlier one lost its tail. The
//! log is cut at its first hole (damage, or a segment that ends without its SEGMENT_END while a
//! later one holds data) unless a record after the hole was written when the whole log before
//! it was durable (`FLAG_SYNCED_BEFORE`): then the hole is damage to durable data, and open
//! fails naming the file and offset. Segments after the cut are removed before anything new is
//! written.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::commit_log::log_state::LogState;
use crate::dir::DataDir;
use crate::error::{Error, IoContext, Result};
use crate::feed;
use crate::limits::SEGMENT_HEADER_BYTES;
use crate::lower::keys::{self, CatalogMeta, DeviceRecord};
use crate::lower::{LowerTier, LowerTierKind, Space, rocks::RocksLower};
use crate::mapping::{LowerPlace, MappingTable};
use crate::options::Options;
use crate::record::Body;
use crate::segment::{self, ScanEnd, Segment};
use crate::spares::{SegmentPlan, Spares};
use crate::state::{Inner, LowerBook, Recovery, State, Window};
use crate::stats::Counters;
use crate::storage::{PlainFiles, Storage};
use crate::timed_mutex::TimedMutex;
use crate::upper::LogPosition;

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

/// Segment files of a log directory, in sequence order. Half-made or retired files left by a
/// crash are deleted when `clean_up` is set (open), and left alone otherwise (check).
fn list_segments(
    storage: &dyn Storage,
    log_dir: &Path,
    clean_up: bool,
) -> Result<Vec<(u64, PathBuf)>> {
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

/// The live log is a contiguous run of sequence numbers starting right after the last segment
/// whose readings left the log (made in order, retired oldest first, each step durable): a gap
/// means a segment was lost, and replaying around it could revive records whose DEPART was in
/// the lost one.
fn missing_segment(log_dir: &Path, listed: &[(u64, PathBuf)], last_aged_seq: u64) -> Option<Error> {
    if last_aged_seq > 0
        && let Some((first, _)) = listed.first()
        && *first != last_aged_seq + 1
    {
        return Some(Error::Corrupt {
            file: segment::segment_path(log_dir, last_aged_seq + 1),
            offset: 0,
            reason: format!(
                "segment {} is missing: the catalog says the log continues after segment \
                 {last_aged_seq}, and the first segment found is {first}",
                last_aged_seq + 1
            ),
        });
    }
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

/// What the catalog holds, loaded at open.
#[derive(Default)]
struct Catalog {
    meta: CatalogMeta,
    /// lower id -> record.
    devices: HashMap<u64, DeviceRecord>,
    /// lower id -> (window, bytes), ascending by window.
    memberships: HashMap<u64, Vec<(u64, u64)>>,
}

fn load_catalog(lower: &dyn LowerTier) -> Result<Catalog> {
    let mut catalog = Catalog::default();
    if let Some(value) = lower.get(Space::Catalog, &keys::meta_key())? {
        catalog.meta = CatalogMeta::decode(&value).ok_or_else(|| {
            Error::Lower(format!("the catalog's meta record is malformed: {value:?}"))
        })?;
    }
    let (start, end) = keys::all_devices_range();
    let mut bad = None;
    lower.scan(Space::Catalog, &start, &end, &mut |k, v| {
        match keys::parse_catalog_device_key(k) {
            Some((lower_id, None)) => match DeviceRecord::decode(v) {
                Some(record) => {
                    catalog.devices.insert(lower_id, record);
                }
                None => bad = Some(k.to_vec()),
            },
            Some((lower_id, Some(win))) => match <[u8; 8]>::try_from(v) {
                Ok(bytes) => catalog
                    .memberships
                    .entry(lower_id)
                    .or_default()
                    .push((win, u64::from_le_bytes(bytes))),
                Err(_) => bad = Some(k.to_vec()),
            },
            None => bad = Some(k.to_vec()),
        }
        bad.is_none()
    })?;
    if let Some(k) = bad {
        return Err(Error::Lower(format!(
            "malformed catalog entry {k:?} in the lower tier"
        )));
    }
    Ok(catalog)
}

/// The mapping table and the lower tier's bookkeeping as the catalog describes them. A name
/// with two records (a device that left while a pass gave it its place, then came back) keeps
/// the newer incarnation; the older is forgotten.
fn place_cataloged_devices(
    lower: &dyn LowerTier,
    catalog: Catalog,
) -> Result<(MappingTable, LowerBook)> {
    let mut map = MappingTable::default();
    let mut book = LowerBook {
        next_win: catalog.meta.next_win,
        next_lower_id: catalog.meta.next_lower_id,
        last_aged_seq: catalog.meta.last_aged_seq,
        ..LowerBook::default()
    };
    let mut by_name: HashMap<&str, u64> = HashMap::new();
    for (lower_id, record) in &catalog.devices {
        match by_name.get(record.name.as_str()) {
            Some(other) if *other > *lower_id => {
                book.forget.push((*lower_id, LogPosition::at(0, 0)));
                continue;
            }
            Some(other) => book.forget.push((*other, LogPosition::at(0, 0))),
            None => {}
        }
        by_name.insert(&record.name, *lower_id);
    }
    let files: HashMap<u64, u64> = lower
        .window_files()?
        .into_iter()
        .map(|f| (f.win, f.bytes))
        .collect();
    for (name, lower_id) in by_name {
        let record = &catalog.devices[&lower_id];
        let mut windows = catalog
            .memberships
            .get(&lower_id)
            .cloned()
            .unwrap_or_default();
        windows.sort_unstable();
        let id = map.register(name, record.registered_at_ms);
        for (win, bytes) in &windows {
            let window = book.windows.entry(*win).or_insert_with(|| Window {
                file_bytes: files.get(win).copied().unwrap_or(0),
                ..Window::default()
            });
            window.live_bytes += bytes;
            window.members.push(id);
        }
        if let Some(entry) = map.entry_mut(id) {
            entry.trims = record.trims.clone();
        }
        map.place(
            id,
            LowerPlace {
                lower_id,
                windows,
                settled: record.settled,
            },
        );
    }
    // Window files nobody reads (their devices left and were forgotten): dead.
    for (win, bytes) in &files {
        if !book.windows.contains_key(win) && *win < book.next_win {
            book.windows.insert(
                *win,
                Window {
                    file_bytes: *bytes,
                    ..Window::default()
                },
            );
            book.dead.push((*win, LogPosition::at(0, 0)));
        }
    }
    Ok((map, book))
}

/// Drops windows at or above the catalog's next id: ingested by a pass that crashed before its
/// catalog batch named them.
fn drop_orphan_windows(lower: &dyn LowerTier, meta: &CatalogMeta) -> Result<()> {
    let orphans: Vec<u64> = lower
        .window_files()?
        .into_iter()
        .map(|f| f.win)
        .filter(|win| *win >= meta.next_win)
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    lower.drop_windows(&orphans)
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

    let catalog = load_catalog(lower.as_ref())?;
    drop_orphan_windows(lower.as_ref(), &catalog.meta)?;
    let last_aged_seq = catalog.meta.last_aged_seq;
    let (map, book) = place_cataloged_devices(lower.as_ref(), catalog)?;
    // Feed slots first: segments they hold stay, aged or not (feed/mod.rs).
    let feed = feed::slots::load(&dir.path)?;
    let (held, segments) = open_segments(
        &log_dir,
        &options,
        &counters,
        last_aged_seq,
        feed.hold_from(),
    )?;
    let next_seq = segments.last().map_or(last_aged_seq + 1, |s| s.seq + 1);
    let mut st = State::new(
        map,
        LogState::new(&segments, Arc::clone(&segments[0]), SEGMENT_HEADER_BYTES),
        book,
    );
    let replayed = replay_log(&segments, &mut st, &counters)?;
    let (cut_at, cut) = cut_torn_tail(&options, &log_dir, &segments, &replayed, &mut st)?;
    st.log.applied_last_start = replayed
        .last_record
        .filter(|(start, len)| {
            LogPosition::at(start.segment_seq, start.offset + len) == st.log.applied_end
        })
        .map(|(start, _)| start);
    check_windows(lower.as_ref(), &st)?;
    let (ready, next_seq) = take_spares(segments, cut_at, next_seq, &mut st)?;
    place_feed(&mut st, feed, held);

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
        group_epoch: AtomicU64::new(0),
        space_freed: Condvar::new(),
        maintenance_wanted: AtomicBool::new(false),
        lower,
        window_gate: RwLock::new(()),
        counters,
        maintenance: Mutex::new(()),
        shutdown: Mutex::new(false),
        shutdown_signal: Condvar::new(),
        recovery,
    })
}

/// Segments a feed slot holds although their readings left the log.
type HeldSegments = Vec<Arc<Segment>>;
/// The log's live segments, in order.
type LiveSegments = Vec<Arc<Segment>>;

/// The live segments in order (refusing a log with a gap), or a first one for a new log; and,
/// first, the segments a feed slot holds (from `hold_from` on) whose readings already left the
/// log. Other segments whose readings left (a crash came between the catalog batch and their
/// retirement) are removed.
fn open_segments(
    log_dir: &Path,
    options: &Options,
    counters: &Counters,
    last_aged_seq: u64,
    hold_from: Option<u64>,
) -> Result<(HeldSegments, LiveSegments)> {
    let storage = &options.storage;
    let mut listed = list_segments(&**storage, log_dir, true)?;
    let (held, aged) = feed::split_held(
        listed
            .iter()
            .filter(|(seq, _)| *seq <= last_aged_seq)
            .cloned()
            .collect(),
        hold_from,
    );
    let held = held
        .iter()
        .map(|(seq, path)| Segment::open(storage, path, *seq).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    if !aged.is_empty() {
        for (_, path) in &aged {
            storage
                .remove(path)
                .context(|| format!("removing {}", path.display()))?;
        }
        segment::sync_dir(&**storage, log_dir)?;
    }
    listed.retain(|(seq, _)| *seq > last_aged_seq);
    if let Some(error) = missing_segment(log_dir, &listed, last_aged_seq) {
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
            last_aged_seq + 1,
            options.segment_bytes,
            zero_fill_segments(options),
        )?;
        Counters::add(&counters.log_preallocated_bytes, written);
        segments.push(Arc::new(segment));
    }
    Ok((held, segments))
}

/// What replaying the log found.
struct Replayed {
    /// How each segment's scan ended.
    ends: Vec<ScanEnd>,
    /// The first segment (index) where the log's data stops short of a SEGMENT_END or at
    /// damage: nothing after it was applied.
    stopped_at: Option<usize>,
    records: u64,
    buffer_bytes_max: u64,
    /// Start and length of the last record applied.
    last_record: Option<(LogPosition, u64)>,
}

/// Replays the segments in order (one segment in memory at a time) into the state, up to the
/// first segment that ends without its SEGMENT_END or at damage; the segments after it are only
/// scanned (for the torn-tail decision), never applied.
fn replay_log(segments: &[Arc<Segment>], st: &mut State, counters: &Counters) -> Result<Replayed> {
    let mut replayed = Replayed {
        ends: Vec::with_capacity(segments.len()),
        stopped_at: None,
        records: 0,
        buffer_bytes_max: 0,
        last_record: None,
    };
    for (i, segment) in segments.iter().enumerate() {
        let data = segment.read_all()?;
        replayed.buffer_bytes_max = replayed.buffer_bytes_max.max(data.len() as u64);
        let applying = replayed.stopped_at.is_none();
        let end = segment::scan(&data, segment.seq_low(), |offset, decoded| {
            if applying {
                let position = LogPosition::at(segment.seq, offset);
                replay(counters, st, &decoded.body, position, decoded.len as u32);
                replayed.records += 1;
                replayed.last_record = Some((position, decoded.len as u64));
            }
            Ok(())
        })?;
        if applying && (end.damage.is_some() || end.sealed_at_ms.is_none()) {
            replayed.stopped_at = Some(i);
        }
        replayed.ends.push(end);
    }
    Ok(replayed)
}

/// The segment that holds the end of the log: the last one with data or damage.
fn last_written(ends: &[ScanEnd]) -> usize {
    ends.iter()
        .rposition(|e| e.data_end > SEGMENT_HEADER_BYTES || e.damage.is_some())
        .unwrap_or(0)
}

/// Where the log ends: the first segment that stops short (its index in `segments`), cut there.
/// Refuses damage that is not a torn tail. Removes the segments after the cut that hold
/// records, zeroes a torn end, and makes everything kept durable before anything new is
/// written. Returns the cut segment's index and a description of the cut, if any.
fn cut_torn_tail(
    options: &Options,
    log_dir: &Path,
    segments: &[Arc<Segment>],
    replayed: &Replayed,
    st: &mut State,
) -> Result<(usize, Option<String>)> {
    let ends = &replayed.ends;
    let last = last_written(ends);
    // The first segment not sealed whole: the one holding the end of the log, or the empty one
    // after it (made active before the crash), or a hole before the end.
    let cut_at = replayed.stopped_at.unwrap_or(last);
    refuse_durable_damage(segments, ends, cut_at)?;
    let end = &ends[cut_at];
    let at = segments[cut_at].as_ref();
    let cut = if end.damage.is_some() || cut_at < last {
        // Zero the torn bytes, so that records written after this point can never be
        // followed by leftovers of the torn batch that happen to decode.
        let zeros = vec![0u8; (at.bytes - end.data_end) as usize];
        at.write_at(&zeros, end.data_end)?;
        let reason = end
            .damage
            .as_ref()
            .map_or("a later segment holds data".to_string(), |(o, r)| {
                format!("{r} at offset {o}")
            });
        Some(format!("{}@{} ({reason})", at.path.display(), end.data_end))
    } else {
        None
    };
    if cut_at < last {
        remove_past_the_cut(options, log_dir, &segments[cut_at + 1..], st)?;
    }
    make_kept_durable(options, segments, ends, cut_at, cut.is_some(), st)?;
    Ok((cut_at, cut))
}

/// A hole is a torn tail only if nothing after it was written when the log before it was
/// durable (`SYNCED_BEFORE`): later in its segment, or in any later one.
fn refuse_durable_damage(segments: &[Arc<Segment>], ends: &[ScanEnd], cut_at: usize) -> Result<()> {
    let end = &ends[cut_at];
    let at = &segments[cut_at];
    let stop_offset = end.damage.as_ref().map_or(end.data_end, |(o, _)| *o);
    let why = match &end.damage {
        Some((_, reason)) => reason.clone(),
        None => "the segment ends without its SEGMENT_END record".to_string(),
    };
    if let Some(valid) = end.valid_record_after {
        return Err(Error::Corrupt {
            file: at.path.clone(),
            offset: stop_offset,
            reason: format!(
                "{why}; a record written after this point was durable follows at offset \
                 {valid}, so this is not a torn tail"
            ),
        });
    }
    match segments
        .iter()
        .zip(ends)
        .skip(cut_at + 1)
        .find_map(|(s, e)| e.first_synced_record.map(|offset| (s, offset)))
    {
        Some((later, proof)) => Err(Error::Corrupt {
            file: at.path.clone(),
            offset: stop_offset,
            reason: format!(
                "{why}, yet {} holds a record written when the whole log before it was durable \
                 (offset {proof}): data that was durable is lost here, not a torn tail",
                later.path.display()
            ),
        }),
        None => Ok(()),
    }
}

/// Past a hole, later segments hold records never acknowledged as durable: they are removed
/// (with any empty ones after them), so that their sequence numbers are given again to clean
/// files.
fn remove_past_the_cut(
    options: &Options,
    log_dir: &Path,
    beyond: &[Arc<Segment>],
    st: &mut State,
) -> Result<()> {
    for segment in beyond.iter().rev() {
        options
            .storage
            .remove(&segment.path)
            .context(|| format!("removing {}", segment.path.display()))?;
        st.log.segments.remove(&segment.seq);
    }
    segment::sync_dir(&*options.storage, log_dir)
}

/// What recovery read may be only in the page cache (a process killed in None mode): every
/// kept segment is made durable before anything is written after it, so that the records this
/// session writes can be flagged `synced_before` truthfully. Then the log resumes at the cut.
fn make_kept_durable(
    options: &Options,
    segments: &[Arc<Segment>],
    ends: &[ScanEnd],
    cut_at: usize,
    was_cut: bool,
    st: &mut State,
) -> Result<()> {
    let at = &segments[cut_at];
    let end = &ends[cut_at];
    let mut synced = Vec::new();
    for (segment, end) in segments[..=cut_at].iter().zip(ends) {
        segment.sync_data()?;
        let live = st
            .log
            .segments
            .get_mut(&segment.seq)
            .expect("kept segments are live");
        live.written_end = end.data_end;
        live.sealed_end = end.data_end;
        live.sealed_at_ms = if segment.seq == at.seq && was_cut {
            None
        } else {
            end.sealed_at_ms
        };
        synced.push((segment.seq, end.data_end));
    }
    st.log.sealed = st.log.segments[&at.seq].sealed_at_ms.is_some();
    // Its records' times are not on disk: the active segment's age counts from now.
    st.log.active_since_ms =
        (!st.log.sealed && end.data_end > SEGMENT_HEADER_BYTES).then(|| options.clock.now_ms());
    st.log.applied_end = LogPosition::at(at.seq, end.data_end);
    st.log.active = Arc::clone(at);
    st.log.tail = end.data_end;
    st.log.mark_synced(&synced);
    Ok(())
}

/// The change feed's slots into the state, with the aged segments they hold kept live.
fn place_feed(st: &mut State, feed: feed::slots::Loaded, held: Vec<Arc<Segment>>) {
    feed::keep_aged(&mut st.log, held);
    let oldest_live = *st
        .log
        .segments
        .keys()
        .next()
        .expect("the log has a live segment");
    st.feed = feed.into_slots(oldest_live);
    st.log.hold_from = st.feed.hold_from();
}

/// Every window a present device reads must exist: a missing one is damage to the lower tier.
fn check_windows(lower: &dyn LowerTier, st: &State) -> Result<()> {
    let files: std::collections::HashSet<u64> =
        lower.window_files()?.into_iter().map(|f| f.win).collect();
    for (_, entry) in st.map.entries() {
        let Some(place) = &entry.lower else { continue };
        if let Some((win, _)) = place.windows.iter().find(|(w, _)| !files.contains(w)) {
            return Err(Error::Lower(format!(
                "the catalog says device {:?} has readings in window {win}, and the lower tier \
                 has no such window",
                entry.name
            )));
        }
    }
    Ok(())
}

/// Segments after the end of the log were made ahead of need: they become the spares. (Those
/// holding records past a cut were removed by `cut_torn_tail`.) Returns them and the next
/// sequence number to give.
fn take_spares(
    mut segments: Vec<Arc<Segment>>,
    cut_at: usize,
    next_seq: u64,
    st: &mut State,
) -> Result<(VecDeque<Segment>, u64)> {
    let mut ready = VecDeque::new();
    let cut_seq = segments[cut_at].seq;
    let after: Vec<Arc<Segment>> = segments.drain(cut_at + 1..).collect();
    if after.iter().any(|s| !st.log.segments.contains_key(&s.seq)) {
        // Removed past a hole (all of them): numbering resumes right after the cut.
        return Ok((ready, cut_seq + 1));
    }
    for segment in after {
        st.log.segments.remove(&segment.seq);
        let segment = Arc::try_unwrap(segment).map_err(|_| {
            Error::Lower("internal: a spare segment is still referenced after recovery".into())
        })?;
        ready.push_back(segment);
    }
    Ok((ready, next_seq))
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

fn replay(counters: &Counters, st: &mut State, body: &Body<'_>, position: LogPosition, len: u32) {
    let id = match *body {
        Body::Register {
            device,
            registered_at_ms,
        } => match st.map.id(device) {
            Some(_) => return, // known already (the catalog's, whose REGISTER left the log)
            None => st.map.register(device, registered_at_ms),
        },
        Body::Put { device, .. } | Body::Trim { device, .. } => match st.map.id(device) {
            Some(id) => id,
            None => return,
        },
        Body::SegmentEnd { .. } => return,
        Body::Depart { device } => match st.map.unmap(device) {
            Some(id) => id,
            None => return,
        },
    };
    st.apply(counters, id, body, position, len);
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
    let lower = open_lower(&dir, 16 << 20);
    let catalog = match &lower {
        Ok(l) => load_catalog(l.as_ref()).map(|c| c.meta.last_aged_seq),
        Err(e) => Err(Error::Lower(e.to_string())),
    };
    let last_aged_seq = catalog.unwrap_or_else(|e| {
        report.problems.push(e.to_string());
        0
    });
    let storage = PlainFiles::shared();
    let mut listed = list_segments(&*storage, &dir.log_dir(), false)?;
    listed.retain(|(seq, _)| *seq > last_aged_seq);
    if let Some(error) = missing_segment(&dir.log_dir(), &listed, last_aged_seq) {
        report.problems.push(error.to_string());
    }
    let mut opened = Vec::new();
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
    check_tail(&opened, &ends, &mut report);
    match lower.and_then(|lower| lower.verify()) {
        Ok(keys) => report.lower_keys = keys,
        Err(e) => report.problems.push(e.to_string()),
    }
    Ok(report)
}

/// `check`'s judgement of the log's end, by the rules `open` cuts by.
fn check_tail(segments: &[Segment], ends: &[ScanEnd], report: &mut CheckReport) {
    if segments.is_empty() {
        return;
    }
    let last = last_written(ends);
    let Some(first_short) = ends
        .iter()
        .position(|e| e.damage.is_some() || e.sealed_at_ms.is_none())
    else {
        return;
    };
    if first_short >= last && ends[first_short].damage.is_none() {
        return; // the active segment: the end of the log
    }
    let end = &ends[first_short];
    let segment = &segments[first_short];
    let offset = end.damage.as_ref().map_or(end.data_end, |(o, _)| *o);
    let reason = end.damage.as_ref().map_or(
        "the segment ends without its SEGMENT_END record while later segments hold data".into(),
        |(_, r)| r.clone(),
    );
    let durable_after = end.valid_record_after.is_some()
        || ends[first_short + 1..]
            .iter()
            .any(|e| e.first_synced_record.is_some());
    let text = format!("{} at offset {offset}: {reason}", segment.path.display());
    if durable_after {
        report.problems.push(format!(
            "{text}; records after it were durable: not a torn tail"
        ));
    } else {
        report.torn_tail = Some(text);
    }
}
