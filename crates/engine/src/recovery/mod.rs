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
//!
//! **Read-only** (`Options::read_only`): the same replay with nothing written. The directory's
//! LOCK is shared, the lower tier opened read-only, segments opened read-only; nothing is
//! removed (staged backup links, half-made or retired segments, segments past a cut), a torn
//! tail is not zeroed but read around (the replay stops where the valid records do), nothing is
//! synced, and a log without a segment is refused rather than given one.
//!
//! It runs before any other thread exists and may build the state directly; it may not start
//! threads (the handle does).

mod catalog;
mod check;
mod tail;

pub use check::{CheckReport, check};

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use self::catalog::{check_windows, drop_orphan_windows, load_catalog, place_cataloged_devices};
use self::tail::{Replayed, cut_torn_tail, list_segments, missing_segment, replay_log};
use crate::commit_log::log_state::LogState;
use crate::commit_log::position::LogPosition;
use crate::commit_log::segment::{self, Segment};
use crate::commit_log::slots;
use crate::commit_log::spares::{SegmentPlan, Spares};
use crate::commit_log::storage::Storage;
use crate::dir::DataDir;
use crate::feed;
use crate::lower::LowerTier;
use crate::lower::open::{Access, open_lower};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::SEGMENT_HEADER_BYTES;
use crate::options::Options;
use crate::state::{Inner, Recovery, State};
use crate::stats::Counters;

/// The data directory (created if new) and its lower tier, upgraded to the current format
/// where the open may write.
fn open_dir(path: &Path, options: &Options) -> Result<(DataDir, Box<dyn LowerTier>)> {
    let (mut dir, access) = if options.read_only {
        (DataDir::open_read_only(path)?, Access::ReadOnly)
    } else {
        let dir = DataDir::open(path, Some(options.lower_tier))?;
        // Hard links a backup of an earlier process staged: nothing reads them any more.
        crate::backup::remove_staging(&dir.path)?;
        (dir, Access::Upgrade)
    };
    let lower = open_lower(&mut dir, options.lower_memory_bytes, access)?;
    Ok((dir, lower))
}

/// `Engine::open`: opens or creates the data directory, replays its log and readies the
/// shared state (the caller starts the background threads).
pub(crate) fn open(path: &Path, options: Options) -> Result<Inner> {
    options.validate()?;
    let started = Instant::now();
    let read_only = options.read_only;
    let (dir, lower) = open_dir(path, &options)?;
    let counters = Counters::default();
    let log_dir = dir.log_dir();

    let catalog = load_catalog(lower.as_ref())?;
    if !read_only {
        drop_orphan_windows(lower.as_ref(), &catalog.meta)?;
    }
    let last_aged_seq = catalog.meta.last_aged_seq;
    let (map, book) = place_cataloged_devices(lower.as_ref(), catalog)?;
    // Feed slots first: segments they hold stay, aged or not (feed/mod.rs).
    let feed = slots::load(&dir.path, read_only)?;
    let (held, segments) = open_segments(
        &log_dir,
        &options,
        &counters,
        last_aged_seq,
        feed.hold_from(),
    )?;
    let next_seq = segments
        .last()
        .map_or(last_aged_seq.next(), |s| s.seq.next());
    let mut st = State::new(
        map,
        LogState::new(&segments, Arc::clone(&segments[0]), SEGMENT_HEADER_BYTES),
        book,
    );
    let replayed = replay_log(&segments, &mut st, &counters)?;
    let (cut_at, cut) = cut_torn_tail(&options, &log_dir, &segments, &replayed, &mut st)?;
    st.log.applied_last_start = start_of_record_ending_at(&replayed, st.log.applied_end);
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
    Ok(Inner::new(
        (dir, options),
        st,
        (spares, lower),
        counters,
        recovery,
    ))
}

/// Where the last replayed record starts, if it ends where the applied log ends (a change
/// feed's position names it: `Feed::end`).
fn start_of_record_ending_at(replayed: &Replayed, end: LogPosition) -> Option<LogPosition> {
    replayed
        .last_record
        .filter(|(start, len)| LogPosition::at(start.segment_seq, start.offset + len) == end)
        .map(|(start, _)| start)
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
    last_aged_seq: SegmentSeq,
    hold_from: Option<SegmentSeq>,
) -> Result<(HeldSegments, LiveSegments)> {
    let storage = &options.storage;
    let read_only = options.read_only;
    let mut listed = list_segments(&**storage, log_dir, !read_only)?;
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
        .map(|(seq, path)| Segment::open_as(storage, path, *seq, read_only).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    if !aged.is_empty() && !read_only {
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
        segments.push(Arc::new(Segment::open_as(storage, &path, seq, read_only)?));
    }
    if segments.is_empty() && read_only {
        return Err(Error::ReadOnly(format!(
            "{} has no log segment (an open for writing makes one): nothing to read",
            log_dir.display()
        )));
    }
    if segments.is_empty() {
        let (segment, written) = Segment::create(
            storage,
            log_dir,
            last_aged_seq.next(),
            options.segment_bytes,
            zero_fill_segments(options),
        )?;
        Counters::add(&counters.log_preallocated_bytes, written);
        segments.push(Arc::new(segment));
    }
    Ok((held, segments))
}

/// The change feed's slots into the state, with the aged segments they hold kept live.
fn place_feed(st: &mut State, feed: slots::Loaded, held: Vec<Arc<Segment>>) {
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

/// Segments after the end of the log were made ahead of need: they become the spares. (Those
/// holding records past a cut were removed by `cut_torn_tail`.) Returns them and the next
/// sequence number to give.
fn take_spares(
    mut segments: Vec<Arc<Segment>>,
    cut_at: usize,
    next_seq: SegmentSeq,
    st: &mut State,
) -> Result<(VecDeque<Segment>, SegmentSeq)> {
    let mut ready = VecDeque::new();
    let cut_seq = segments[cut_at].seq;
    let after: Vec<Arc<Segment>> = segments.drain(cut_at + 1..).collect();
    if after.iter().any(|s| !st.log.segments.contains_key(&s.seq)) {
        // Removed past a hole (all of them): numbering resumes right after the cut.
        return Ok((ready, cut_seq.next()));
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
