//! The record's layout (docs/FORMAT.md, "Record"): the header's and each kind's fields as
//! offsets chained from their sizes, the flags and kinds, what a decoded record is, and the
//! length of each kind. The encoder and the decoder both build on it.

use super::puts::PutsReadings;
use crate::model::ids::SegmentSeq;

pub(super) const CRC_OFFSET: usize = 0;
pub(super) const PAYLOAD_LEN_OFFSET: usize = CRC_OFFSET + 4;
pub(super) const SEQ_LOW_OFFSET: usize = PAYLOAD_LEN_OFFSET + 4;
pub(super) const KIND_OFFSET: usize = SEQ_LOW_OFFSET + 4;
pub(super) const FLAGS_OFFSET: usize = KIND_OFFSET + 1;
pub(super) const RESERVED_OFFSET: usize = FLAGS_OFFSET + 1;
pub const HEADER_BYTES: usize = RESERVED_OFFSET + 2;
/// The CRC covers the payload first, then the header from here to its end.
pub(super) const CRC_COVERED_HEADER_OFFSET: usize = PAYLOAD_LEN_OFFSET;

pub const FLAG_BATCH_END: u8 = 1;
/// Set on the first record of a group write when every byte of the log before it was durable.
/// Recovery uses it to tell a torn tail (holes only after the last such record, in any segment)
/// from damage to data that was durable (a hole with a flagged record after it).
pub const FLAG_SYNCED_BEFORE: u8 = 2;

pub(super) const KIND_REGISTER: u8 = 1;
pub(super) const KIND_PUT: u8 = 2;
pub(super) const KIND_DEPART: u8 = 3;
pub(super) const KIND_SEGMENT_END: u8 = 4;
pub(super) const KIND_TRIM: u8 = 5;
pub(super) const KIND_PUTS: u8 = 6;

/// PUT payload: device_len u16, sensor_len u16, value_len u32, ts_ns i64, device, sensor, value.
pub(super) const PUT_DEVICE_LEN_OFFSET: usize = 0;
pub(super) const PUT_SENSOR_LEN_OFFSET: usize = PUT_DEVICE_LEN_OFFSET + 2;
pub(super) const PUT_VALUE_LEN_OFFSET: usize = PUT_SENSOR_LEN_OFFSET + 2;
pub(super) const PUT_TS_OFFSET: usize = PUT_VALUE_LEN_OFFSET + 4;
pub(super) const PUT_FIXED_BYTES: usize = PUT_TS_OFFSET + 8;
/// PUTS payload: device_len u16, count u16, first_ts_ns i64, device, then `count` readings,
/// each: sensor_len varint, value_len varint, ts delta (zigzag varint: the reading's ts minus
/// the one before it, the first's minus `first_ts_ns`), sensor, value.
pub(super) const PUTS_COUNT_OFFSET: usize = 2;
pub(super) const PUTS_FIRST_TS_OFFSET: usize = PUTS_COUNT_OFFSET + 2;
pub(super) const PUTS_FIXED_BYTES: usize = PUTS_FIRST_TS_OFFSET + 8;
/// Readings of one PUTS record at most: its count is in the high byte of an index entry's
/// `len` (state/upper.rs), so that a reading knows its share of the record's bytes.
pub const PUTS_READINGS_MAX: usize = 255;
/// A PUTS record is closed once its payload reaches this many bytes: a read of one reading in
/// the log reads and checks its whole record, so a record stays about a few blocks long (one
/// larger reading still goes into a record of its own).
pub const PUTS_PAYLOAD_BYTES_SOFT_MAX: usize = 8 * 1024;
/// REGISTER payload: device_len u16, registered_at_ms u64, device.
pub(super) const REGISTER_AT_OFFSET: usize = 2;
pub(super) const REGISTER_FIXED_BYTES: usize = REGISTER_AT_OFFSET + 8;
/// DEPART payload: device_len u16, device.
pub(super) const DEPART_FIXED_BYTES: usize = 2;
/// TRIM payload: device_len u16, before_ns i64, device.
pub(super) const TRIM_BEFORE_OFFSET: usize = 2;
pub(super) const TRIM_FIXED_BYTES: usize = TRIM_BEFORE_OFFSET + 8;
/// SEGMENT_END payload: next_seq u64, sealed_at_ms u64.
pub(super) const SEGMENT_END_SEALED_AT_OFFSET: usize = 8;
pub(super) const SEGMENT_END_FIXED_BYTES: usize = SEGMENT_END_SEALED_AT_OFFSET + 8;
/// Bytes a SEGMENT_END record takes: kept free at the end of every segment.
pub const SEGMENT_END_BYTES: usize = HEADER_BYTES + SEGMENT_END_FIXED_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// Mapping-table record: the device was first seen at `registered_at_ms` (engine clock).
    Register {
        device: &'a str,
        registered_at_ms: u64,
    },
    /// One reading (the record of format 2; still read, no longer written).
    Put {
        device: &'a str,
        sensor: &'a str,
        ts_ns: i64,
        value: &'a [u8],
    },
    /// Readings of one device, in the order they were written (a later one of the same sensor
    /// and ts replaces an earlier one, as between records).
    Puts {
        device: &'a str,
        readings: PutsReadings<'a>,
    },
    /// Mapping-table record: the device left this edge; its data is dropped.
    Depart { device: &'a str },
    /// The segment is complete; segment `next_seq` follows it. `sealed_at_ms` (engine clock) is
    /// when the log moved on: the segment ages from then (docs/ENGINE.md, "Leaving the log").
    SegmentEnd {
        next_seq: SegmentSeq,
        sealed_at_ms: u64,
    },
    /// Every reading of the device with ts < `before_ns` that precedes this record in the log
    /// is deleted (in both tiers); readings written after it are not touched.
    Trim { device: &'a str, before_ns: i64 },
}

impl Body<'_> {
    pub fn device(&self) -> &str {
        match self {
            Body::Register { device, .. }
            | Body::Put { device, .. }
            | Body::Puts { device, .. }
            | Body::Depart { device }
            | Body::Trim { device, .. } => device,
            Body::SegmentEnd { .. } => "",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    pub body: Body<'a>,
    pub batch_end: bool,
    /// `FLAG_SYNCED_BEFORE`: the log was durable up to this record when it was written.
    pub synced_before: bool,
    /// Bytes the record occupies (header + payload).
    pub len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decode<'a> {
    Record(Decoded<'a>),
    /// No record of this segment here: zeros, a record of an older life of the file, or too few
    /// bytes left for a header.
    End,
    /// A record of this segment whose bytes are wrong.
    Corrupt(String),
}

/// Encoded size of a PUT record.
pub fn put_len(device: &str, sensor: &str, value: &[u8]) -> usize {
    HEADER_BYTES + PUT_FIXED_BYTES + device.len() + sensor.len() + value.len()
}

/// Encoded size of a reading in a PUTS record (its framing and fields; the record's own header
/// and device id are shared by its readings).
pub fn puts_reading_len(sensor: &str, ts_delta_ns: i64, value: &[u8]) -> usize {
    use integer_encoding::VarInt;
    sensor.len().required_space()
        + value.len().required_space()
        + ts_delta_ns.required_space()
        + sensor.len()
        + value.len()
}

/// Encoded size of a REGISTER record.
pub fn register_len(device: &str) -> usize {
    HEADER_BYTES + REGISTER_FIXED_BYTES + device.len()
}

/// Encoded size of a DEPART record.
pub fn depart_len(device: &str) -> usize {
    HEADER_BYTES + DEPART_FIXED_BYTES + device.len()
}

/// Encoded size of a TRIM record.
pub fn trim_len(device: &str) -> usize {
    HEADER_BYTES + TRIM_FIXED_BYTES + device.len()
}

pub(super) fn payload_len_of(record: &[u8]) -> usize {
    u32::from_le_bytes(
        record[PAYLOAD_LEN_OFFSET..SEQ_LOW_OFFSET]
            .try_into()
            .expect("4 bytes"),
    ) as usize
}
