//! Reading a segment's records back, a whole batch at a time (recovery, `check`, the feed):
//! `scan` visits each record of each complete batch and says how the data ended: a clean end,
//! a torn tail, or damage to durable data.

use crate::commit_log::record::{self, BatchStep, Decode, Decoded};
use crate::model::error::Result;
use crate::model::limits::SEGMENT_HEADER_BYTES;

/// How a segment scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanEnd {
    /// Offset just past the last complete batch: where the next write goes.
    pub data_end: u64,
    /// Set when the scan stopped at a bad record or inside a batch: the offset and why.
    pub damage: Option<(u64, String)>,
    /// Offset of a record of this segment after the stop point that was written when
    /// everything before it was durable (`FLAG_SYNCED_BEFORE`): proof that the stop is damage
    /// to durable data, not a torn tail. Valid records after the stop without that flag were
    /// written with the torn bytes, in writes that never completed their fdatasync.
    pub valid_record_after: Option<u64>,
    /// The last complete record is a SEGMENT_END: the segment was closed at this time (the
    /// engine clock's milliseconds).
    pub sealed_at_ms: Option<u64>,
    /// The first record anywhere in the segment written when the whole log before it was
    /// durable (`FLAG_SYNCED_BEFORE`): a hole in an *earlier* segment is then damage, not a
    /// torn tail.
    pub first_synced_record: Option<u64>,
}

/// Scans a segment's bytes, calling `visit(offset, record)` for each record of each complete
/// batch, in order. Records of a batch cut short are not visited (batches are atomic).
pub fn scan(
    data: &[u8],
    seq_low: u32,
    mut visit: impl FnMut(u64, &Decoded<'_>) -> Result<()>,
) -> Result<ScanEnd> {
    let mut batch_start = SEGMENT_HEADER_BYTES as usize;
    // Where reading stopped: after the last complete batch, or at the record that ended it.
    let mut at = batch_start;
    let mut sealed_at_ms = None;
    let stop = loop {
        match record::next_batch(data, batch_start, seq_low, true) {
            BatchStep::Batch { records, end } => {
                for (offset, record) in records {
                    sealed_at_ms = match record.body {
                        record::Body::SegmentEnd { sealed_at_ms, .. } => Some(sealed_at_ms),
                        _ => None,
                    };
                    visit(offset as u64, &record)?;
                }
                batch_start = end;
                at = end;
            }
            BatchStep::End => break None,
            BatchStep::Cut { at: cut_at } => {
                at = cut_at;
                break Some((
                    batch_start as u64,
                    "batch cut short (no end-of-batch record)".to_string(),
                ));
            }
            BatchStep::Corrupt { at: bad_at, reason } => {
                at = bad_at;
                break Some((bad_at as u64, reason));
            }
            // Not returned for a whole segment's data (`whole`): read as a cut batch if it were.
            BatchStep::Short => {
                break Some((
                    batch_start as u64,
                    "batch cut short (no end-of-batch record)".to_string(),
                ));
            }
        }
    };
    let search_from = if stop.is_some() { at + 1 } else { at };
    let any_record_after = find_record(data, search_from, seq_low, false);
    let valid_record_after =
        any_record_after.and_then(|first| find_record(data, first as usize, seq_low, true));
    // An "end of data" with records after it is a damaged header (a zeroed page, or its
    // sequence field): a torn tail to cut, or damage if a durable record follows — never an end
    // to stop at silently, or the bytes after it could later be read back as records.
    let damage = match (stop, any_record_after) {
        (None, Some(_)) => Some((
            at as u64,
            "record header is unreadable (zeroed or not of this segment)".to_string(),
        )),
        (stop, _) => stop,
    };
    Ok(ScanEnd {
        data_end: batch_start as u64,
        valid_record_after,
        damage,
        sealed_at_ms: sealed_at_ms.filter(|_| batch_start == at),
        first_synced_record: find_record(data, SEGMENT_HEADER_BYTES as usize, seq_low, true),
    })
}

/// The first offset >= `from` holding a valid record of this segment (with `durable_only`, one
/// flagged `synced_before`). Candidates are found by searching for the sequence bytes (memchr's
/// SIMD search), so empty space costs little.
pub(super) fn find_record(
    data: &[u8],
    from: usize,
    seq_low: u32,
    durable_only: bool,
) -> Option<u64> {
    let seq_bytes = seq_low.to_le_bytes();
    // The sequence sits at byte 8 of a header: search from `from + 8`.
    let haystack = data.get(from.checked_add(8)?..)?;
    memchr::memmem::find_iter(haystack, &seq_bytes).find_map(|hit| {
        let offset = from + hit;
        match record::decode(&data[offset..], seq_low) {
            Decode::Record(d) if d.synced_before || !durable_only => Some(offset as u64),
            _ => None,
        }
    })
}
