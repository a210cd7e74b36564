//! Recovery's second step: the live segments replayed in order into the index, and the log's
//! end found: a torn tail cut, damage to durable data refused (docs/ENGINE.md, "Recovery").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::commit_log::position::LogPosition;
use crate::commit_log::record::Body;
use crate::commit_log::segment::{self, ScanEnd, Segment};
use crate::commit_log::storage::Storage;
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::SEGMENT_HEADER_BYTES;
use crate::options::Options;
use crate::state::State;
use crate::stats::Counters;

/// What replaying the log found.
pub(super) struct Replayed {
    /// How each segment's scan ended.
    pub(super) ends: Vec<ScanEnd>,
    /// The first segment (index) where the log's data stops short of a SEGMENT_END or at
    /// damage: nothing after it was applied.
    pub(super) stopped_at: Option<usize>,
    pub(super) records: u64,
    pub(super) buffer_bytes_max: u64,
    /// Start and length of the last record applied.
    pub(super) last_record: Option<(LogPosition, u64)>,
}

/// Replays the segments in order (one segment in memory at a time) into the state, up to the
/// first segment that ends without its SEGMENT_END or at damage; the segments after it are only
/// scanned (for the torn-tail decision), never applied.
pub(super) fn replay_log(
    segments: &[Arc<Segment>],
    st: &mut State,
    counters: &Counters,
) -> Result<Replayed> {
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
                replayed.records += match decoded.body {
                    Body::Puts { readings, .. } => readings.len() as u64,
                    _ => 1,
                };
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
pub(super) fn last_written(ends: &[ScanEnd]) -> usize {
    ends.iter()
        .rposition(|e| e.data_end > SEGMENT_HEADER_BYTES || e.damage.is_some())
        .unwrap_or(0)
}

/// Where the log ends: the first segment that stops short (its index in `segments`), cut there.
/// Refuses damage that is not a torn tail. Removes the segments after the cut that hold
/// records, zeroes a torn end, and makes everything kept durable before anything new is
/// written. Returns the cut segment's index and a description of the cut, if any.
pub(super) fn cut_torn_tail(
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
        // followed by leftovers of the torn batch that happen to decode. (Read-only: nothing
        // is written after it; the replay stopped there.)
        if !options.read_only {
            let zeros = vec![0u8; (at.bytes - end.data_end) as usize];
            at.write_at(&zeros, end.data_end)?;
        }
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
pub(super) fn refuse_durable_damage(
    segments: &[Arc<Segment>],
    ends: &[ScanEnd],
    cut_at: usize,
) -> Result<()> {
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
pub(super) fn remove_past_the_cut(
    options: &Options,
    log_dir: &Path,
    beyond: &[Arc<Segment>],
    st: &mut State,
) -> Result<()> {
    for segment in beyond.iter().rev() {
        if !options.read_only {
            options
                .storage
                .remove(&segment.path)
                .context(|| format!("removing {}", segment.path.display()))?;
        }
        st.log.segments.remove(&segment.seq);
    }
    if options.read_only {
        return Ok(());
    }
    segment::sync_dir(&*options.storage, log_dir)
}

/// What recovery read may be only in the page cache (a process killed in None mode): every
/// kept segment is made durable before anything is written after it, so that the records this
/// session writes can be flagged `synced_before` truthfully. Then the log resumes at the cut.
pub(super) fn make_kept_durable(
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
        if !options.read_only {
            segment.sync_data()?;
        }
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

pub(super) fn replay(
    counters: &Counters,
    st: &mut State,
    body: &Body<'_>,
    position: LogPosition,
    len: u32,
) {
    let id = match *body {
        Body::Register {
            device,
            registered_at_ms,
        } => match st.map.id(device) {
            Some(_) => return, // known already (the catalog's, whose REGISTER left the log)
            None => st.map.register(device, registered_at_ms),
        },
        Body::Put { device, .. } | Body::Puts { device, .. } | Body::Trim { device, .. } => {
            match st.map.id(device) {
                Some(id) => id,
                None => return,
            }
        }
        Body::SegmentEnd { .. } => return,
        Body::Depart { device } => match st.map.unmap(device) {
            Some(id) => id,
            None => return,
        },
    };
    st.apply(counters, id, body, position, len);
}

/// Segment files of a log directory, in sequence order. Half-made or retired files left by a
/// crash are deleted when `clean_up` is set (open), and left alone otherwise (check).
pub(super) fn list_segments(
    storage: &dyn Storage,
    log_dir: &Path,
    clean_up: bool,
) -> Result<Vec<(SegmentSeq, PathBuf)>> {
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
pub(super) fn missing_segment(
    log_dir: &Path,
    listed: &[(SegmentSeq, PathBuf)],
    last_aged_seq: SegmentSeq,
) -> Option<Error> {
    if last_aged_seq > SegmentSeq(0)
        && let Some((first, _)) = listed.first()
        && *first != last_aged_seq.next()
    {
        return Some(Error::Corrupt {
            file: segment::segment_path(log_dir, last_aged_seq.next()),
            offset: 0,
            reason: format!(
                "segment {} is missing: the catalog says the log continues after segment \
                 {last_aged_seq}, and the first segment found is {first}",
                last_aged_seq.next()
            ),
        });
    }
    listed
        .windows(2)
        .find(|w| w[1].0 != w[0].0.next())
        .map(|w| Error::Corrupt {
            file: segment::segment_path(log_dir, w[0].0.next()),
            offset: 0,
            reason: format!(
                "segment {} is missing: the log jumps from segment {} to {}",
                w[0].0.next(),
                w[0].0,
                w[1].0
            ),
        })
}
