//! Reading the commit log as a change feed: whole engine batches from a position, across
//! segment switches, never past what is applied (under `Durability::Sync`, what is durable).
//!
//! The lock rule holds: under the state lock the reader only looks up the segment and how far
//! it may read; the pread and the decoding run without it. A segment retired (and perhaps
//! recycled) while it was being read shows up as bytes that do not decode; the reader then
//! checks whether the segment is still live and reports a gap, never garbage.

use std::sync::Arc;

use crate::commit_log::position::LogPos;
use crate::commit_log::record::{self, BatchStep, Body, Decode};
use crate::commit_log::segment::Segment;
use crate::feed::batch::{FeedBatch, FeedRecord};
use crate::model::error::{Error, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{FEED_READ_BYTES_MIN, SEGMENT_HEADER_BYTES};
use crate::state::{Inner, State};

/// Where a segment may be read, seen under the lock.
struct View {
    segment: Arc<Segment>,
    /// Bytes before this offset are applied records.
    readable_end: u64,
    /// The segment is sealed and every byte of it is applied: at `readable_end` the reader
    /// moves on to `next`.
    whole: bool,
    /// The live segment after it.
    next: Option<SegmentSeq>,
}

fn view(st: &State, seq: SegmentSeq) -> Option<View> {
    let live = st.log.segments.get(&seq)?;
    let applied = st.log.applied_end;
    let (readable_end, whole) = if seq < applied.segment_seq {
        // Sealed and applied whole. Segments kept aged across a restart carry their full size
        // as sealed_end: their SEGMENT_END stops the reader first.
        (live.sealed_end.min(live.segment.bytes), true)
    } else if seq == applied.segment_seq {
        let sealed_here = live.sealed_at_ms.is_some() && applied.offset >= live.sealed_end;
        (applied.offset, sealed_here)
    } else {
        (SEGMENT_HEADER_BYTES, false)
    };
    let next = st.log.segments.range(seq.next()..).next().map(|(s, _)| *s);
    Some(View {
        segment: Arc::clone(&live.segment),
        readable_end,
        whole,
        next,
    })
}

/// The oldest live segment.
fn oldest(st: &State) -> SegmentSeq {
    st.log
        .segments
        .keys()
        .next()
        .copied()
        .expect("the log always has a live segment")
}

fn past_the_end(from: &LogPos) -> Error {
    diverged(
        from,
        "it is past the end of this log: the data directory was restored from an older copy, \
         or lost a tail written without fdatasync"
            .into(),
    )
}

fn diverged(from: &LogPos, reason: String) -> Error {
    Error::FeedDiverged {
        position: from.to_string(),
        reason,
    }
}

/// Whether `from` can be read in this log: the identity, the range, and the record before it.
/// Err(FeedGap) when its segment was retired; Err(FeedDiverged) when it is of another log or
/// history.
pub(crate) fn check(inner: &Inner, from: &LogPos) -> Result<()> {
    let (view, log_id, oldest, newest) = {
        let st = inner.state.lock();
        let newest = *st.log.segments.keys().next_back().expect("a live segment");
        (view(&st, from.seq), st.feed.log_id, oldest(&st), newest)
    };
    if from.log_id != log_id {
        return Err(diverged(
            from,
            format!(
                "it is a position in log {:016x}; this data directory's log is {log_id:016x} \
                 (the directory was replaced, re-created or restored from a backup)",
                from.log_id
            ),
        ));
    }
    if from.seq > newest {
        return Err(past_the_end(from));
    }
    let Some(view) = view else {
        if from.seq < oldest {
            return Err(Error::FeedGap {
                position: from.to_string(),
                oldest_seq: oldest,
            });
        }
        return Err(diverged(
            from,
            format!("segment {} is not in this log", from.seq),
        ));
    };
    check_prev(inner, from, &view)
}

/// The record that ends at `from` must be the one the position names (its checksum and
/// length); a position from `Feed::end` (no record named) must at least be a record boundary.
fn check_prev(inner: &Inner, from: &LogPos, view: &View) -> Result<()> {
    if from.offset > view.readable_end {
        return Err(past_the_end(from));
    }
    if from.offset < SEGMENT_HEADER_BYTES {
        return Err(diverged(
            from,
            format!("offset {} is inside a segment header", from.offset),
        ));
    }
    let seq_low = view.segment.seq_low();
    if from.prev_len > 0 {
        let start = from.offset.checked_sub(u64::from(from.prev_len));
        let bytes = match start.filter(|s| *s >= SEGMENT_HEADER_BYTES) {
            Some(s) => read_checked(inner, from, view, s, from.prev_len as usize)?,
            None => {
                return Err(diverged(
                    from,
                    "the record before it starts before the segment".into(),
                ));
            }
        };
        let stored = stored_crc(&bytes);
        return match record::decode(&bytes, seq_low) {
            Decode::Record(d) if d.len == bytes.len() && stored == from.prev_crc => Ok(()),
            _ => Err(diverged(
                from,
                "the record before it is not the one the position names (another history)".into(),
            )),
        };
    }
    if from.offset == SEGMENT_HEADER_BYTES {
        return check_segment_end_before(inner, from);
    }
    if from.offset < view.readable_end {
        let len = (view.readable_end - from.offset).min(record::HEADER_BYTES as u64) as usize;
        let head = read_checked(inner, from, view, from.offset, len)?;
        let declared = record::declared_len(&head).unwrap_or(head.len());
        let whole = declared.min((view.readable_end - from.offset) as usize);
        let bytes = read_checked(inner, from, view, from.offset, whole)?;
        if !matches!(record::decode(&bytes, seq_low), Decode::Record(_)) {
            return Err(diverged(from, "no record starts there".into()));
        }
    }
    Ok(())
}

/// A position at a segment's start that names the SEGMENT_END before it: checked against the
/// previous segment while that is live and its end is known.
fn check_segment_end_before(inner: &Inner, from: &LogPos) -> Result<()> {
    if from.prev_crc == 0 {
        return Ok(());
    }
    let previous = {
        let st = inner.state.lock();
        st.log
            .segments
            .range(..from.seq)
            .next_back()
            .filter(|(_, live)| live.sealed_at_ms.is_some() && live.sealed_end < live.segment.bytes)
            .map(|(seq, live)| (*seq, Arc::clone(&live.segment), live.sealed_end))
    };
    let Some((seq, segment, sealed_end)) = previous else {
        return Ok(());
    };
    let start = sealed_end - record::SEGMENT_END_BYTES as u64;
    let bytes = match segment.read_at(start, record::SEGMENT_END_BYTES) {
        Ok(bytes) => bytes,
        Err(_) => return Ok(()), // retired meanwhile: nothing left to compare with
    };
    let ends_here = matches!(
        record::decode(&bytes, segment.seq_low()),
        Decode::Record(d) if matches!(d.body, Body::SegmentEnd { next_seq, .. } if next_seq == from.seq)
    );
    let retired = !inner.state.lock().log.segments.contains_key(&seq);
    if retired || (ends_here && stored_crc(&bytes) == from.prev_crc) {
        Ok(())
    } else {
        Err(diverged(
            from,
            format!("segment {seq} does not end with the SEGMENT_END the position names"),
        ))
    }
}

/// The stored checksum of an encoded record (0 if it is too short to have one).
fn stored_crc(bytes: &[u8]) -> u32 {
    record::stored_crc(bytes).unwrap_or(0)
}

/// Reads bytes of a live segment; if it fails because the segment retired meanwhile, a gap.
fn read_checked(
    inner: &Inner,
    from: &LogPos,
    view: &View,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    view.segment
        .read_at(offset, len)
        .map_err(|e| gap_if_retired(inner, from, e))
}

/// The error to report for a read of `from`'s segment that went wrong: a gap if the segment
/// retired meanwhile (its bytes may belong to its next life), else the error itself.
fn gap_if_retired(inner: &Inner, from: &LogPos, error: Error) -> Error {
    let st = inner.state.lock();
    if st.log.segments.contains_key(&from.seq) {
        error
    } else {
        Error::FeedGap {
            position: from.to_string(),
            oldest_seq: oldest(&st),
        }
    }
}

/// `Feed::read`: whole batches from `from`, about `max_bytes` of log (at least one batch when
/// one is there), following SEGMENT_END into the next segment.
pub(crate) fn read(inner: &Inner, from: &LogPos, max_bytes: usize) -> Result<FeedBatch> {
    check(inner, from)?;
    let mut out = FeedBatch {
        records: Vec::new(),
        next: *from,
        log_bytes: 0,
        batch_ends: Vec::new(),
    };
    loop {
        let Some(view) = view(&inner.state.lock(), out.next.seq) else {
            let st = inner.state.lock();
            return Err(Error::FeedGap {
                position: out.next.to_string(),
                oldest_seq: oldest(&st),
            });
        };
        if out.next.offset >= view.readable_end {
            match view.next {
                Some(next) if view.whole => {
                    out.next = LogPos {
                        seq: next,
                        offset: SEGMENT_HEADER_BYTES,
                        prev_len: 0,
                        ..out.next
                    };
                    continue;
                }
                _ => return Ok(out),
            }
        }
        let budget = max_bytes.saturating_sub(out.log_bytes as usize).max(1);
        let at = out.next;
        let moved_on =
            read_segment(&view, &mut out, budget).map_err(|e| gap_if_retired(inner, &at, e))?;
        if moved_on && let Some(next) = view.next {
            // Never rest at a sealed segment's end: its retirement would read as a gap.
            out.next = LogPos {
                seq: next,
                offset: SEGMENT_HEADER_BYTES,
                prev_len: 0,
                ..out.next
            };
        }
        if !moved_on || out.log_bytes as usize >= max_bytes {
            return Ok(out);
        }
    }
}

/// Reads whole batches of one segment into `out` until `budget` bytes or the readable end.
/// Returns true when it consumed the segment's SEGMENT_END (the caller goes on to the next).
fn read_segment(view: &View, out: &mut FeedBatch, budget: usize) -> Result<bool> {
    let available = (view.readable_end - out.next.offset) as usize;
    let mut want = budget.max(FEED_READ_BYTES_MIN).min(available);
    loop {
        let buf = view.segment.read_at(out.next.offset, want)?;
        let before = out.log_bytes;
        let end = decode_batches(view, &buf, want == available, budget, out)?;
        if end || out.log_bytes > before || want == available {
            return Ok(end);
        }
        // The first batch is longer than what was read: read more.
        want = (want * 2).min(available);
    }
}

/// Decodes complete batches from `buf` (read at `out.next`) into `out`, up to `budget` bytes.
/// `complete`: `buf` runs to the readable end, so a record cut short is damage, not the edge of
/// the read. Returns true at a SEGMENT_END.
fn decode_batches(
    view: &View,
    buf: &[u8],
    complete: bool,
    budget: usize,
    out: &mut FeedBatch,
) -> Result<bool> {
    let seq_low = view.segment.seq_low();
    let base = out.next.offset;
    let damaged = |at: usize, reason: String| Error::Corrupt {
        file: view.segment.path.clone(),
        offset: base + at as u64,
        reason,
    };
    let mut at = 0usize;
    let bytes_before = out.log_bytes;
    while at < buf.len() && ((out.log_bytes - bytes_before) as usize) < budget {
        let records = match record::next_batch(buf, at, seq_low, false) {
            BatchStep::Batch { records, .. } => records,
            BatchStep::Short if complete => {
                return Err(damaged(
                    at,
                    "a record runs past the applied end of the log".into(),
                ));
            }
            BatchStep::Short => break,
            BatchStep::End | BatchStep::Cut { .. } => {
                return Err(damaged(at, "no record where the log has one".into()));
            }
            BatchStep::Corrupt { at: bad, reason } => return Err(damaged(bad, reason)),
        };
        let mut batch = Vec::new();
        for (offset, decoded) in records {
            let crc = stored_crc(&buf[offset..]);
            at = offset + decoded.len;
            if let Body::SegmentEnd { .. } = decoded.body {
                // Its own batch: the position moves to the next segment's start.
                out.log_bytes += (at as u64) - (out.next.offset - base);
                out.next = LogPos {
                    offset: base + at as u64,
                    prev_crc: crc,
                    prev_len: decoded.len as u32,
                    ..out.next
                };
                return Ok(true);
            }
            FeedRecord::push_from_body(&decoded.body, &mut batch);
            if decoded.batch_end {
                out.records.append(&mut batch);
                out.log_bytes += (base + at as u64) - out.next.offset;
                out.next = LogPos {
                    offset: base + at as u64,
                    prev_crc: crc,
                    prev_len: decoded.len as u32,
                    ..out.next
                };
                out.batch_ends.push((out.records.len(), out.next));
            }
        }
    }
    Ok(false)
}
