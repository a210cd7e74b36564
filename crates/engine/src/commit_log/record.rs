//! Commit-log records: the encoder and the decoder (docs/FORMAT.md, "Record").
//!
//! ```text
//! offset size field
//!  0      4   crc32c, little-endian, of the payload followed by header bytes [4, 16)
//!  4      4   payload_len (u32 LE)
//!  8      4   segment_seq_low: low 32 bits of the segment's sequence number
//! 12      1   kind: 1 = REGISTER, 2 = PUT, 3 = DEPART, 4 = SEGMENT_END, 5 = TRIM
//! 13      1   flags: bit 0 = last record of its batch; bit 1 = every byte of the log before
//!             this record was durable (fdatasync'd) when this record was written
//! 14      2   reserved, zero
//! 16      payload_len bytes of payload (layout per kind, below)
//! ```
//! The offsets below are chained from the field sizes, as the table reads. The segment sequence
//! inside every record is what makes recycled segments safe: a record left over from the file's
//! previous life carries an older sequence and reads as "end of data". The decoder never panics
//! on any input (see the fuzz target in fuzz/).

use crate::format::{self, u32_at, u64_at};
use crate::ids::SegmentSeq;
use crate::limits::{self, DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX};

const CRC_OFFSET: usize = 0;
const PAYLOAD_LEN_OFFSET: usize = CRC_OFFSET + 4;
const SEQ_LOW_OFFSET: usize = PAYLOAD_LEN_OFFSET + 4;
const KIND_OFFSET: usize = SEQ_LOW_OFFSET + 4;
const FLAGS_OFFSET: usize = KIND_OFFSET + 1;
const RESERVED_OFFSET: usize = FLAGS_OFFSET + 1;
pub const HEADER_BYTES: usize = RESERVED_OFFSET + 2;
/// The CRC covers the payload first, then the header from here to its end.
const CRC_COVERED_HEADER_OFFSET: usize = PAYLOAD_LEN_OFFSET;

pub const FLAG_BATCH_END: u8 = 1;
/// Set on the first record of a group write when every byte of the log before it was durable.
/// Recovery uses it to tell a torn tail (holes only after the last such record, in any segment)
/// from damage to data that was durable (a hole with a flagged record after it).
pub const FLAG_SYNCED_BEFORE: u8 = 2;

const KIND_REGISTER: u8 = 1;
const KIND_PUT: u8 = 2;
const KIND_DEPART: u8 = 3;
const KIND_SEGMENT_END: u8 = 4;
const KIND_TRIM: u8 = 5;

/// PUT payload: device_len u16, sensor_len u16, value_len u32, ts_ns i64, device, sensor, value.
const PUT_DEVICE_LEN_OFFSET: usize = 0;
const PUT_SENSOR_LEN_OFFSET: usize = PUT_DEVICE_LEN_OFFSET + 2;
const PUT_VALUE_LEN_OFFSET: usize = PUT_SENSOR_LEN_OFFSET + 2;
const PUT_TS_OFFSET: usize = PUT_VALUE_LEN_OFFSET + 4;
const PUT_FIXED_BYTES: usize = PUT_TS_OFFSET + 8;
/// REGISTER payload: device_len u16, registered_at_ms u64, device.
const REGISTER_AT_OFFSET: usize = 2;
const REGISTER_FIXED_BYTES: usize = REGISTER_AT_OFFSET + 8;
/// DEPART payload: device_len u16, device.
const DEPART_FIXED_BYTES: usize = 2;
/// TRIM payload: device_len u16, before_ns i64, device.
const TRIM_BEFORE_OFFSET: usize = 2;
const TRIM_FIXED_BYTES: usize = TRIM_BEFORE_OFFSET + 8;
/// SEGMENT_END payload: next_seq u64, sealed_at_ms u64.
const SEGMENT_END_SEALED_AT_OFFSET: usize = 8;
const SEGMENT_END_FIXED_BYTES: usize = SEGMENT_END_SEALED_AT_OFFSET + 8;
/// Bytes a SEGMENT_END record takes: kept free at the end of every segment.
pub const SEGMENT_END_BYTES: usize = HEADER_BYTES + SEGMENT_END_FIXED_BYTES;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// Mapping-table record: the device was first seen at `registered_at_ms` (engine clock).
    Register {
        device: &'a str,
        registered_at_ms: u64,
    },
    Put {
        device: &'a str,
        sensor: &'a str,
        ts_ns: i64,
        value: &'a [u8],
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

/// Appends a header with the kind and payload length (sequence, flags and CRC zero until
/// `seal`); returns where the record starts.
fn begin_record(out: &mut Vec<u8>, kind: u8, payload_len: usize) -> usize {
    let start = out.len();
    out.resize(start + HEADER_BYTES, 0);
    let payload_len = u32::try_from(payload_len).expect("records are far below 4 GiB");
    out[start + PAYLOAD_LEN_OFFSET..start + SEQ_LOW_OFFSET]
        .copy_from_slice(&payload_len.to_le_bytes());
    out[start + KIND_OFFSET] = kind;
    start
}

/// Appends an id's length field (u16: ids are at most 255 bytes, limits.rs).
fn push_id_len(out: &mut Vec<u8>, id: &str) {
    debug_assert!(id.len() <= DEVICE_ID_BYTES_MAX.max(SENSOR_ID_BYTES_MAX));
    out.extend_from_slice(&(id.len() as u16).to_le_bytes());
}

/// Appends a PUT record whose header is not yet sealed (no sequence, flags or CRC): the
/// expensive part of encoding, done by the writer outside any lock. Returns the payload's CRC.
pub fn encode_put_unsealed(
    out: &mut Vec<u8>,
    device: &str,
    sensor: &str,
    ts_ns: i64,
    value: &[u8],
) -> u32 {
    debug_assert!(value.len() <= VALUE_BYTES_MAX);
    let start = begin_record(
        out,
        KIND_PUT,
        PUT_FIXED_BYTES + device.len() + sensor.len() + value.len(),
    );
    push_id_len(out, device);
    push_id_len(out, sensor);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&ts_ns.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    out.extend_from_slice(sensor.as_bytes());
    out.extend_from_slice(value);
    crc32c::crc32c(&out[start + HEADER_BYTES..])
}

/// Seals the record that starts at `start` and runs to the end of `out`.
fn seal_at(out: &mut [u8], start: usize, seq_low: u32, batch_end: bool) {
    let payload_crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    seal(&mut out[start..], seq_low, batch_end, payload_crc);
}

/// Appends a complete REGISTER record.
pub fn encode_register(out: &mut Vec<u8>, seq_low: u32, device: &str, registered_at_ms: u64) {
    let start = begin_record(out, KIND_REGISTER, REGISTER_FIXED_BYTES + device.len());
    push_id_len(out, device);
    out.extend_from_slice(&registered_at_ms.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    seal_at(out, start, seq_low, false);
}

/// Appends a complete DEPART record (always the end of its own batch).
pub fn encode_depart(out: &mut Vec<u8>, seq_low: u32, device: &str) {
    let start = begin_record(out, KIND_DEPART, DEPART_FIXED_BYTES + device.len());
    push_id_len(out, device);
    out.extend_from_slice(device.as_bytes());
    seal_at(out, start, seq_low, true);
}

/// Appends a complete TRIM record (always the end of its own batch, as DEPART).
pub fn encode_trim(out: &mut Vec<u8>, seq_low: u32, device: &str, before_ns: i64) {
    let start = begin_record(out, KIND_TRIM, TRIM_FIXED_BYTES + device.len());
    push_id_len(out, device);
    out.extend_from_slice(&before_ns.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    seal_at(out, start, seq_low, true);
}

/// Appends a complete SEGMENT_END record (its own batch).
pub fn encode_segment_end(
    out: &mut Vec<u8>,
    seq_low: u32,
    next_seq: SegmentSeq,
    sealed_at_ms: u64,
) {
    let start = begin_record(out, KIND_SEGMENT_END, SEGMENT_END_FIXED_BYTES);
    out.extend_from_slice(&next_seq.0.to_le_bytes());
    out.extend_from_slice(&sealed_at_ms.to_le_bytes());
    seal_at(out, start, seq_low, true);
}

fn payload_len_of(record: &[u8]) -> usize {
    u32::from_le_bytes(
        record[PAYLOAD_LEN_OFFSET..SEQ_LOW_OFFSET]
            .try_into()
            .expect("4 bytes"),
    ) as usize
}

/// Sets `FLAG_SYNCED_BEFORE` on a sealed record (the first of a group write) and re-seals it.
pub fn mark_synced_before(record: &mut [u8]) {
    let payload_len = payload_len_of(record);
    let payload_crc = crc32c::crc32c(&record[HEADER_BYTES..HEADER_BYTES + payload_len]);
    record[FLAGS_OFFSET] |= FLAG_SYNCED_BEFORE;
    let crc = crc32c::crc32c_append(
        payload_crc,
        &record[CRC_COVERED_HEADER_OFFSET..HEADER_BYTES],
    );
    record[CRC_OFFSET..PAYLOAD_LEN_OFFSET].copy_from_slice(&crc.to_le_bytes());
}

/// Writes the segment sequence and flags into a record's header and its CRC. The CRC covers the
/// payload *first*, then the header fields: so sealing under the log's lock only extends the
/// payload CRC, computed earlier outside the lock, by 12 bytes; the payload is not re-read.
pub fn seal(record: &mut [u8], seq_low: u32, batch_end: bool, payload_crc: u32) {
    record[SEQ_LOW_OFFSET..KIND_OFFSET].copy_from_slice(&seq_low.to_le_bytes());
    record[FLAGS_OFFSET] = if batch_end { FLAG_BATCH_END } else { 0 };
    let crc = crc32c::crc32c_append(
        payload_crc,
        &record[CRC_COVERED_HEADER_OFFSET..HEADER_BYTES],
    );
    record[CRC_OFFSET..PAYLOAD_LEN_OFFSET].copy_from_slice(&crc.to_le_bytes());
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    format::u16_at(b, at).map(usize::from)
}
/// An id field: UTF-8, 1..=`max` bytes, no NUL (docs/FORMAT.md; the same rule `put` enforces).
fn id_at<'a>(
    b: &'a [u8],
    at: usize,
    len: usize,
    what: &str,
    max: usize,
) -> Result<&'a str, String> {
    let bytes = b.get(at..at + len).ok_or("field runs past the payload")?;
    let id = std::str::from_utf8(bytes).map_err(|_| format!("{what} id is not UTF-8"))?;
    limits::id_problem(id, max).map_or(Ok(id), |problem| Err(format!("{what} id {problem}")))
}

/// The stored checksum of the record `buf` starts with (its header's first field), unchecked;
/// None if `buf` is shorter than it.
pub fn stored_crc(buf: &[u8]) -> Option<u32> {
    u32_at(buf, CRC_OFFSET)
}

/// The whole length (header and payload) the header at the start of `buf` declares, unchecked:
/// how many bytes to read for `decode`. None if `buf` is shorter than a header.
pub fn declared_len(buf: &[u8]) -> Option<usize> {
    (buf.len() >= HEADER_BYTES).then(|| HEADER_BYTES + payload_len_of(buf))
}

/// Decodes the record at the start of `buf` (which runs to the end of the segment's data).
pub fn decode(buf: &[u8], seq_low: u32) -> Decode<'_> {
    decode_checked(buf, seq_low, true)
}

/// One step through a segment's bytes, a whole batch at a time: how recovery, `check` (through
/// `segment::scan`) and the change feed all read the log, since a batch is applied whole or not
/// at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchStep<'a> {
    /// A complete batch from the offset asked: its records with their offsets in `buf`; the next
    /// batch starts at `end`.
    Batch {
        records: Vec<(usize, Decoded<'a>)>,
        end: usize,
    },
    /// No record of this segment at the offset asked: the data ends there.
    End,
    /// A batch was begun, but no record of this segment follows its last one (`at`) before its
    /// end-of-batch record: the batch was cut short.
    Cut { at: usize },
    /// `buf` ends inside a record of the batch (only when `buf` is not the whole of the
    /// segment's data, `whole` false): more bytes may complete it.
    Short,
    /// The record at `at` is of this segment, but its bytes are wrong.
    Corrupt { at: usize, reason: String },
}

/// The batch starting at `from` in `buf`. `whole`: `buf` runs to the end of the segment's data,
/// so a record running past it is damage (`Corrupt`), not the edge of a partial read (`Short`).
pub fn next_batch(buf: &[u8], from: usize, seq_low: u32, whole: bool) -> BatchStep<'_> {
    let mut at = from;
    let mut records = Vec::new();
    loop {
        let rest = buf.get(at..).unwrap_or_default();
        if !whole && declared_len(rest).is_none_or(|len| len > rest.len()) {
            return BatchStep::Short;
        }
        match decode(rest, seq_low) {
            Decode::Record(d) => {
                records.push((at, d));
                at += d.len;
                if d.batch_end {
                    return BatchStep::Batch { records, end: at };
                }
            }
            Decode::End if records.is_empty() => return BatchStep::End,
            Decode::End => return BatchStep::Cut { at },
            Decode::Corrupt(reason) => return BatchStep::Corrupt { at, reason },
        }
    }
}

/// Decodes a record this process has just encoded and sealed (the group commit's apply step):
/// its checksum was computed from these very bytes, so it is not computed again (checked in
/// debug builds). Everything else is decoded and checked as `decode` does.
pub fn decode_trusted(buf: &[u8], seq_low: u32) -> Decode<'_> {
    debug_assert!(
        !matches!(decode_checked(buf, seq_low, true), Decode::Corrupt(_)),
        "a record just sealed fails its checksum"
    );
    decode_checked(buf, seq_low, false)
}

fn decode_checked(buf: &[u8], seq_low: u32, verify_crc: bool) -> Decode<'_> {
    if buf.len() < HEADER_BYTES {
        return Decode::End;
    }
    let header = &buf[..HEADER_BYTES];
    if header.iter().all(|&b| b == 0) || u32_at(header, SEQ_LOW_OFFSET) != Some(seq_low) {
        return Decode::End;
    }
    let payload_len = payload_len_of(header);
    let Some(payload) = buf.get(HEADER_BYTES..HEADER_BYTES.saturating_add(payload_len)) else {
        return Decode::Corrupt(format!(
            "payload length {payload_len} runs past the end of the segment"
        ));
    };
    if verify_crc {
        let stored_crc = u32_at(header, CRC_OFFSET).unwrap_or(0);
        let computed_crc = crc32c::crc32c_append(
            crc32c::crc32c(payload),
            &header[CRC_COVERED_HEADER_OFFSET..],
        );
        if stored_crc != computed_crc {
            return Decode::Corrupt(format!(
                "checksum mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x})"
            ));
        }
    }
    let flags = header[FLAGS_OFFSET];
    if header[RESERVED_OFFSET..HEADER_BYTES]
        .iter()
        .any(|&b| b != 0)
        || flags & !(FLAG_BATCH_END | FLAG_SYNCED_BEFORE) != 0
    {
        return Decode::Corrupt("reserved header bits are set".into());
    }
    let body = match decode_body(header[KIND_OFFSET], payload) {
        Ok(body) => body,
        Err(reason) => return Decode::Corrupt(reason),
    };
    Decode::Record(Decoded {
        body,
        batch_end: flags & FLAG_BATCH_END != 0,
        synced_before: flags & FLAG_SYNCED_BEFORE != 0,
        len: HEADER_BYTES + payload_len,
    })
}

fn short() -> String {
    "payload shorter than its fixed fields".to_string()
}

/// A PUT payload (see `Body::Put`).
fn decode_put(p: &[u8]) -> Result<Body<'_>, String> {
    let device_len = u16_at(p, PUT_DEVICE_LEN_OFFSET).ok_or_else(short)?;
    let sensor_len = u16_at(p, PUT_SENSOR_LEN_OFFSET).ok_or_else(short)?;
    let value_len = u32_at(p, PUT_VALUE_LEN_OFFSET).ok_or_else(short)? as usize;
    let ts_ns = u64_at(p, PUT_TS_OFFSET).ok_or_else(short)? as i64;
    if PUT_FIXED_BYTES + device_len + sensor_len + value_len != p.len() {
        return Err("PUT field lengths disagree with the payload length".into());
    }
    let device = id_at(
        p,
        PUT_FIXED_BYTES,
        device_len,
        "device",
        DEVICE_ID_BYTES_MAX,
    )?;
    let sensor = id_at(
        p,
        PUT_FIXED_BYTES + device_len,
        sensor_len,
        "sensor",
        SENSOR_ID_BYTES_MAX,
    )?;
    let value = &p[PUT_FIXED_BYTES + device_len + sensor_len..];
    if value.len() > VALUE_BYTES_MAX {
        return Err(format!(
            "value of {} bytes is over the limit of {VALUE_BYTES_MAX}",
            value.len()
        ));
    }
    Ok(Body::Put {
        device,
        sensor,
        ts_ns,
        value,
    })
}

/// A payload of a device id after `fixed` bytes of fixed fields (REGISTER, DEPART, TRIM).
fn device_after<'a>(p: &'a [u8], fixed: usize, kind: &str) -> Result<&'a str, String> {
    let device_len = u16_at(p, 0).ok_or_else(short)?;
    if p.len() < fixed {
        return Err(short());
    }
    if fixed + device_len != p.len() {
        return Err(format!(
            "{kind} field lengths disagree with the payload length"
        ));
    }
    id_at(p, fixed, device_len, "device", DEVICE_ID_BYTES_MAX)
}

fn decode_body(kind: u8, p: &[u8]) -> Result<Body<'_>, String> {
    let body = match kind {
        KIND_PUT => decode_put(p)?,
        KIND_REGISTER => Body::Register {
            device: device_after(p, REGISTER_FIXED_BYTES, "REGISTER")?,
            registered_at_ms: u64_at(p, REGISTER_AT_OFFSET).ok_or_else(short)?,
        },
        KIND_DEPART => Body::Depart {
            device: device_after(p, DEPART_FIXED_BYTES, "DEPART")?,
        },
        KIND_TRIM => Body::Trim {
            device: device_after(p, TRIM_FIXED_BYTES, "TRIM")?,
            before_ns: u64_at(p, TRIM_BEFORE_OFFSET).ok_or_else(short)? as i64,
        },
        KIND_SEGMENT_END => {
            if p.len() != SEGMENT_END_FIXED_BYTES {
                return Err(format!(
                    "SEGMENT_END payload is not {SEGMENT_END_FIXED_BYTES} bytes"
                ));
            }
            Body::SegmentEnd {
                next_seq: SegmentSeq(u64_at(p, 0).ok_or_else(short)?),
                sealed_at_ms: u64_at(p, SEGMENT_END_SEALED_AT_OFFSET).ok_or_else(short)?,
            }
        }
        other => return Err(format!("unknown record kind {other}")),
    };
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_put(seq: u32, end: bool) -> Vec<u8> {
        let mut buf = Vec::new();
        let crc = encode_put_unsealed(&mut buf, "car-1", "speed", -7, b"value");
        seal(&mut buf, seq, end, crc);
        buf
    }

    #[test]
    fn records_round_trip() {
        let mut buf = sealed_put(9, false);
        assert_eq!(buf.len(), put_len("car-1", "speed", b"value"));
        encode_register(&mut buf, 9, "car-1", 1234);
        encode_depart(&mut buf, 9, "car-1");
        encode_trim(&mut buf, 9, "car-1", -3);
        encode_segment_end(&mut buf, 9, SegmentSeq(10), 77);
        assert_eq!(
            buf.len(),
            put_len("car-1", "speed", b"value")
                + register_len("car-1")
                + depart_len("car-1")
                + trim_len("car-1")
                + SEGMENT_END_BYTES
        );
        let mut at = 0;
        let mut bodies = Vec::new();
        while let Decode::Record(d) = decode(&buf[at..], 9) {
            assert_eq!(decode_trusted(&buf[at..], 9), Decode::Record(d));
            bodies.push((d.body, d.batch_end));
            at += d.len;
        }
        assert_eq!(at, buf.len());
        assert_eq!(
            bodies,
            vec![
                (
                    Body::Put {
                        device: "car-1",
                        sensor: "speed",
                        ts_ns: -7,
                        value: b"value"
                    },
                    false
                ),
                (
                    Body::Register {
                        device: "car-1",
                        registered_at_ms: 1234
                    },
                    false
                ),
                (Body::Depart { device: "car-1" }, true),
                (
                    Body::Trim {
                        device: "car-1",
                        before_ns: -3
                    },
                    true
                ),
                (
                    Body::SegmentEnd {
                        next_seq: SegmentSeq(10),
                        sealed_at_ms: 77
                    },
                    true
                ),
            ]
        );
    }

    #[test]
    fn other_segment_sequence_and_zeros_read_as_end() {
        assert_eq!(decode(&sealed_put(9, true), 10), Decode::End);
        assert_eq!(decode(&[0u8; 64], 9), Decode::End);
        assert_eq!(decode(&[1u8; 5], 9), Decode::End);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let good = sealed_put(3, true);
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                match decode(&bad, 3) {
                    Decode::Record(d) => panic!("flip at byte {byte} bit {bit} decoded as {d:?}"),
                    Decode::End | Decode::Corrupt(_) => {}
                }
            }
        }
    }

    #[test]
    fn truncated_records_never_panic() {
        let good = sealed_put(3, true);
        for len in 0..good.len() {
            assert!(!matches!(decode(&good[..len], 3), Decode::Record(_)));
            let _ = decode_checked(&good[..len], 3, false);
        }
    }

    #[test]
    fn the_synced_flag_reseals_the_record() {
        let mut rec = sealed_put(4, true);
        mark_synced_before(&mut rec);
        match decode(&rec, 4) {
            Decode::Record(d) => assert!(d.synced_before && d.batch_end),
            other => panic!("{other:?}"),
        }
    }
}
