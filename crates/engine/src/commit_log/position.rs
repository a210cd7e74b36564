//! Places in the commit log.
//!
//! - `LogPosition`: (segment, offset), the engine's own: where a record sits, ordered as the log.
//! - `LogPos`: the same place as a reader outside the engine holds it, with the log and the
//!   history it belongs to (docs/FORMAT.md, "Feed positions").
//!
//! A bare (segment, offset) is not enough for a reader outside the engine: a data directory that
//! was replaced (a new one made at the same path) or restored from a backup has segments with
//! the same numbers holding other records. So a position also carries the log's identity
//! (`log_id`, random, made once per data directory) and the checksum of the record just before
//! it (LiteFS's "TXID plus checksum"): a position from another history fails one of the two
//! checks instead of being misread.

use std::fmt;
use std::str::FromStr;

use crate::dir::format::{u32_at, u64_at};
use crate::model::ids::SegmentSeq;

/// Where a record sits in the log. Ordered as the log is: by segment, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    pub segment_seq: SegmentSeq,
    pub offset: u64,
}

impl LogPosition {
    /// Before every record: a position that is durable from the start.
    pub const ORIGIN: LogPosition = LogPosition {
        segment_seq: SegmentSeq(0),
        offset: 0,
    };

    pub fn at(segment_seq: SegmentSeq, offset: u64) -> LogPosition {
        LogPosition {
            segment_seq,
            offset,
        }
    }
}

/// A place in the commit log, between two engine batches.
///
/// - `log_id`: the data directory's log identity (`feed/LOG_ID`).
/// - `seq`, `offset`: the segment and the byte where the next batch starts.
/// - `prev_crc`, `prev_len`: the stored checksum and length of the record that ends at `offset`
///   (the last record read). At a segment's start `prev_len` is 0 and `prev_crc` is the
///   checksum of the SEGMENT_END that closed the segment before it (0 when unknown). A position
///   from `Feed::end` is not yet checked against a record (`prev_len` 0): the engine vouches for
///   it when it gives it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogPos {
    pub log_id: u64,
    pub seq: SegmentSeq,
    pub offset: u64,
    pub prev_crc: u32,
    pub prev_len: u32,
}

// The binary form (slot files, docs/FORMAT.md "Feed positions"): little-endian fields.
const LOG_ID_OFFSET: usize = 0;
const SEQ_OFFSET: usize = LOG_ID_OFFSET + 8;
const OFFSET_OFFSET: usize = SEQ_OFFSET + 8;
const PREV_CRC_OFFSET: usize = OFFSET_OFFSET + 8;
const PREV_LEN_OFFSET: usize = PREV_CRC_OFFSET + 4;
/// Bytes of a position in its binary form.
pub const LOG_POS_BYTES: usize = PREV_LEN_OFFSET + 4;

impl LogPos {
    /// True if both name the same segment and offset (their checks, `prev_crc` and
    /// `prev_len`, aside: one place reached by two reads of the log).
    pub fn same_place(&self, other: &LogPos) -> bool {
        (self.seq, self.offset) == (other.seq, other.offset)
    }

    /// True if this position is at or after `other` in the same log (false across logs).
    pub fn is_at_or_past(&self, other: &LogPos) -> bool {
        self.log_id == other.log_id && (self.seq, self.offset) >= (other.seq, other.offset)
    }

    /// The binary form: log_id u64, seq u64, offset u64, prev_crc u32, prev_len u32 (LE).
    pub fn encode(&self) -> [u8; LOG_POS_BYTES] {
        let mut out = [0u8; LOG_POS_BYTES];
        out[LOG_ID_OFFSET..SEQ_OFFSET].copy_from_slice(&self.log_id.to_le_bytes());
        out[SEQ_OFFSET..OFFSET_OFFSET].copy_from_slice(&self.seq.0.to_le_bytes());
        out[OFFSET_OFFSET..PREV_CRC_OFFSET].copy_from_slice(&self.offset.to_le_bytes());
        out[PREV_CRC_OFFSET..PREV_LEN_OFFSET].copy_from_slice(&self.prev_crc.to_le_bytes());
        out[PREV_LEN_OFFSET..LOG_POS_BYTES].copy_from_slice(&self.prev_len.to_le_bytes());
        out
    }

    /// Reads the binary form (`bytes` must be `LOG_POS_BYTES` long).
    pub fn decode(bytes: &[u8]) -> Option<LogPos> {
        if bytes.len() != LOG_POS_BYTES {
            return None;
        }
        Some(LogPos {
            log_id: u64_at(bytes, LOG_ID_OFFSET)?,
            seq: SegmentSeq(u64_at(bytes, SEQ_OFFSET)?),
            offset: u64_at(bytes, OFFSET_OFFSET)?,
            prev_crc: u32_at(bytes, PREV_CRC_OFFSET)?,
            prev_len: u32_at(bytes, PREV_LEN_OFFSET)?,
        })
    }
}

/// The text form, for JSON files and database rows: `LOGID.SEQ.OFFSET.PREVCRC.PREVLEN`, the id
/// and the checksum in hex (16 and 8 digits), the rest decimal.
impl fmt::Display for LogPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:016x}.{}.{}.{:08x}.{}",
            self.log_id, self.seq, self.offset, self.prev_crc, self.prev_len
        )
    }
}

impl FromStr for LogPos {
    type Err = String;

    fn from_str(text: &str) -> Result<LogPos, String> {
        let bad = || format!("{text:?} is not a log position (LOGID.SEQ.OFFSET.PREVCRC.PREVLEN)");
        let parts: Vec<&str> = text.split('.').collect();
        let [id, seq, offset, crc, len] = parts.as_slice() else {
            return Err(bad());
        };
        if id.len() != 16 || crc.len() != 8 {
            return Err(bad());
        }
        Ok(LogPos {
            log_id: u64::from_str_radix(id, 16).map_err(|_| bad())?,
            seq: SegmentSeq(seq.parse().map_err(|_| bad())?),
            offset: offset.parse().map_err(|_| bad())?,
            prev_crc: u32::from_str_radix(crc, 16).map_err(|_| bad())?,
            prev_len: len.parse().map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_in_both_forms_and_order_within_a_log() {
        let pos = LogPos {
            log_id: 0x0123_4567_89ab_cdef,
            seq: SegmentSeq(42),
            offset: 8192,
            prev_crc: 0xdead_beef,
            prev_len: 57,
        };
        assert_eq!(LogPos::decode(&pos.encode()), Some(pos));
        let text = pos.to_string();
        assert_eq!(text, "0123456789abcdef.42.8192.deadbeef.57");
        assert_eq!(text.parse::<LogPos>(), Ok(pos));
        assert!("1.2.3".parse::<LogPos>().is_err());
        assert!(
            "0123456789abcdef.x.8192.deadbeef.57"
                .parse::<LogPos>()
                .is_err()
        );
        assert_eq!(LogPos::decode(&[0; 31]), None);
        let later = LogPos {
            seq: SegmentSeq(43),
            offset: 4096,
            ..pos
        };
        assert!(later.is_at_or_past(&pos) && !pos.is_at_or_past(&later));
        let other_log = LogPos { log_id: 7, ..later };
        assert!(!other_log.is_at_or_past(&pos));
    }
}
