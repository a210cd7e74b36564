//! Commit-log records: the encoder and the decoder (docs/FORMAT.md, "Record").
//!
//! ```text
//! offset size field
//!  0      4   crc32c, little-endian, of the payload followed by header bytes [4, 16)
//!  4      4   payload_len (u32 LE)
//!  8      4   segment_seq_low: low 32 bits of the segment's sequence number
//! 12      1   kind: 1 = REGISTER, 2 = PUT, 3 = DEPART, 4 = SEGMENT_END, 5 = TRIM
//! 13      1   flags: bit 0 = last record of its batch; bit 1 = every byte of the segment
//!             before this record was durable (fdatasync'd) when this record was written
//! 14      2   reserved, zero
//! 16      payload_len bytes of payload (layout per kind, below)
//! ```
//! The segment sequence inside every record is what makes recycled segments safe: a record left
//! over from the file's previous life carries an older sequence and reads as "end of data".
//! The decoder never panics on any input (see the fuzz target in fuzz/).

use crate::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX};

pub const HEADER_BYTES: usize = 16;
pub const FLAG_BATCH_END: u8 = 1;
/// Set on the first record of a group write whose segment was durable up to it. Recovery uses
/// it to tell a torn tail (holes only after the last such record) from damage to data that was
/// durable (a hole with a flagged record after it).
pub const FLAG_SYNCED_BEFORE: u8 = 2;

const KIND_REGISTER: u8 = 1;
const KIND_PUT: u8 = 2;
const KIND_DEPART: u8 = 3;
const KIND_SEGMENT_END: u8 = 4;
const KIND_TRIM: u8 = 5;

/// SEGMENT_END payload: next_seq u64. Every segment but the active one ends with one.
const SEGMENT_END_FIXED_BYTES: usize = 8;
/// Bytes a SEGMENT_END record takes: kept free at the end of every segment.
pub const SEGMENT_END_BYTES: usize = HEADER_BYTES + SEGMENT_END_FIXED_BYTES;

/// PUT payload: device_len u16, sensor_len u16, value_len u32, ts_ms i64, device, sensor, value.
const PUT_FIXED_BYTES: usize = 16;
/// REGISTER payload: device_len u16, registered_at_ms u64, device.
const REGISTER_FIXED_BYTES: usize = 10;
/// DEPART payload: device_len u16, device.
const DEPART_FIXED_BYTES: usize = 2;
/// TRIM payload: device_len u16, before_ms i64, device.
const TRIM_FIXED_BYTES: usize = 10;

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
        ts_ms: i64,
        value: &'a [u8],
    },
    /// Mapping-table record: the device left this edge; its data is dropped.
    Depart { device: &'a str },
    /// The segment is complete (written and fdatasync'd before segment `next_seq` got any
    /// record): recovery refuses a non-last segment without one, whose tail was lost.
    SegmentEnd { next_seq: u64 },
    /// Every reading of the device with ts < `before_ms` that precedes this record in the log
    /// is deleted (in both tiers); readings written after it are not touched.
    Trim { device: &'a str, before_ms: i64 },
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
    /// `FLAG_SYNCED_BEFORE`: the segment was durable up to this record when it was written.
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

/// Appends a PUT record whose header is not yet sealed (no sequence, flags or CRC): the
/// expensive part of encoding, done by the writer outside any lock. Returns the payload's CRC.
pub fn encode_put_unsealed(
    out: &mut Vec<u8>,
    device: &str,
    sensor: &str,
    ts_ms: i64,
    value: &[u8],
) -> u32 {
    let payload_len = PUT_FIXED_BYTES + device.len() + sensor.len() + value.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, KIND_PUT, 0, 0, 0]);
    let payload_start = out.len();
    out.extend_from_slice(&(device.len() as u16).to_le_bytes());
    out.extend_from_slice(&(sensor.len() as u16).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&ts_ms.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    out.extend_from_slice(sensor.as_bytes());
    out.extend_from_slice(value);
    crc32c::crc32c(&out[payload_start..])
}

/// Appends a complete REGISTER record.
pub fn encode_register(out: &mut Vec<u8>, seq_low: u32, device: &str, registered_at_ms: u64) {
    let start = out.len();
    let payload_len = REGISTER_FIXED_BYTES + device.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, KIND_REGISTER, 0, 0, 0]);
    out.extend_from_slice(&(device.len() as u16).to_le_bytes());
    out.extend_from_slice(&registered_at_ms.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    let payload_crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    seal(&mut out[start..], seq_low, false, payload_crc);
}

/// Appends a complete DEPART record (always the end of its own batch).
pub fn encode_depart(out: &mut Vec<u8>, seq_low: u32, device: &str) {
    let start = out.len();
    let payload_len = DEPART_FIXED_BYTES + device.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, KIND_DEPART, 0, 0, 0]);
    out.extend_from_slice(&(device.len() as u16).to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    let payload_crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    seal(&mut out[start..], seq_low, true, payload_crc);
}

/// Encoded size of a TRIM record.
pub fn trim_len(device: &str) -> usize {
    HEADER_BYTES + TRIM_FIXED_BYTES + device.len()
}

/// Appends a complete TRIM record (always the end of its own batch, as DEPART).
pub fn encode_trim(out: &mut Vec<u8>, seq_low: u32, device: &str, before_ms: i64) {
    let start = out.len();
    let payload_len = TRIM_FIXED_BYTES + device.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, KIND_TRIM, 0, 0, 0]);
    out.extend_from_slice(&(device.len() as u16).to_le_bytes());
    out.extend_from_slice(&before_ms.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    let payload_crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    seal(&mut out[start..], seq_low, true, payload_crc);
}

/// Appends a complete SEGMENT_END record (its own batch).
pub fn encode_segment_end(out: &mut Vec<u8>, seq_low: u32, next_seq: u64) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(SEGMENT_END_FIXED_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, KIND_SEGMENT_END, 0, 0, 0]);
    out.extend_from_slice(&next_seq.to_le_bytes());
    let payload_crc = crc32c::crc32c(&out[start + HEADER_BYTES..]);
    seal(&mut out[start..], seq_low, true, payload_crc);
}

/// Sets `FLAG_SYNCED_BEFORE` on a sealed record (the first of a group write) and re-seals it.
pub fn mark_synced_before(record: &mut [u8]) {
    let payload_len = u32::from_le_bytes([record[4], record[5], record[6], record[7]]) as usize;
    let payload_crc = crc32c::crc32c(&record[HEADER_BYTES..HEADER_BYTES + payload_len]);
    record[13] |= FLAG_SYNCED_BEFORE;
    let crc = crc32c::crc32c_append(payload_crc, &record[4..HEADER_BYTES]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Writes the segment sequence and flags into a record's header and its CRC. The CRC covers the
/// payload *first*, then the header fields: so sealing under the log's lock only extends the
/// payload CRC, computed earlier outside the lock, by 12 bytes; the payload is not re-read.
pub fn seal(record: &mut [u8], seq_low: u32, batch_end: bool, payload_crc: u32) {
    record[8..12].copy_from_slice(&seq_low.to_le_bytes());
    record[13] = if batch_end { FLAG_BATCH_END } else { 0 };
    let crc = crc32c::crc32c_append(payload_crc, &record[4..HEADER_BYTES]);
    record[0..4].copy_from_slice(&crc.to_le_bytes());
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize)
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
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
    crate::limits::id_problem(id, max).map_or(Ok(id), |problem| Err(format!("{what} id {problem}")))
}

/// Decodes the record at the start of `buf` (which runs to the end of the segment's data).
pub fn decode(buf: &[u8], seq_low: u32) -> Decode<'_> {
    if buf.len() < HEADER_BYTES {
        return Decode::End;
    }
    let header = &buf[..HEADER_BYTES];
    if header.iter().all(|&b| b == 0) || u32_at(header, 8) != Some(seq_low) {
        return Decode::End;
    }
    let stored_crc = u32_at(header, 0).unwrap_or(0);
    let payload_len = u32_at(header, 4).unwrap_or(0) as usize;
    let Some(payload) = buf.get(HEADER_BYTES..HEADER_BYTES.saturating_add(payload_len)) else {
        return Decode::Corrupt(format!(
            "payload length {payload_len} runs past the end of the segment"
        ));
    };
    let computed_crc = crc32c::crc32c_append(crc32c::crc32c(payload), &header[4..]);
    if stored_crc != computed_crc {
        return Decode::Corrupt(format!(
            "checksum mismatch (stored {stored_crc:#010x}, computed {computed_crc:#010x})"
        ));
    }
    if header[14] != 0
        || header[15] != 0
        || header[13] & !(FLAG_BATCH_END | FLAG_SYNCED_BEFORE) != 0
    {
        return Decode::Corrupt("reserved header bits are set".into());
    }
    let body = match decode_body(header[12], payload) {
        Ok(body) => body,
        Err(reason) => return Decode::Corrupt(reason),
    };
    Decode::Record(Decoded {
        body,
        batch_end: header[13] & FLAG_BATCH_END != 0,
        synced_before: header[13] & FLAG_SYNCED_BEFORE != 0,
        len: HEADER_BYTES + payload_len,
    })
}

/// A PUT payload (see `Body::Put`).
fn decode_put(p: &[u8]) -> Result<Body<'_>, String> {
    let short = || "payload shorter than its fixed fields".to_string();
    let device_len = u16_at(p, 0).ok_or_else(short)?;
    let sensor_len = u16_at(p, 2).ok_or_else(short)?;
    let value_len = u32_at(p, 4).ok_or_else(short)? as usize;
    let ts_ms = u64_at(p, 8).ok_or_else(short)? as i64;
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
        ts_ms,
        value,
    })
}

fn decode_body(kind: u8, p: &[u8]) -> Result<Body<'_>, String> {
    let short = || "payload shorter than its fixed fields".to_string();
    let body = match kind {
        KIND_PUT => decode_put(p)?,
        KIND_REGISTER => {
            let device_len = u16_at(p, 0).ok_or_else(short)?;
            let registered_at_ms = u64_at(p, 2).ok_or_else(short)?;
            if REGISTER_FIXED_BYTES + device_len != p.len() {
                return Err("REGISTER field lengths disagree with the payload length".into());
            }
            Body::Register {
                device: id_at(
                    p,
                    REGISTER_FIXED_BYTES,
                    device_len,
                    "device",
                    DEVICE_ID_BYTES_MAX,
                )?,
                registered_at_ms,
            }
        }
        KIND_DEPART => {
            let device_len = u16_at(p, 0).ok_or_else(short)?;
            if DEPART_FIXED_BYTES + device_len != p.len() {
                return Err("DEPART field lengths disagree with the payload length".into());
            }
            Body::Depart {
                device: id_at(
                    p,
                    DEPART_FIXED_BYTES,
                    device_len,
                    "device",
                    DEVICE_ID_BYTES_MAX,
                )?,
            }
        }
        KIND_TRIM => {
            let device_len = u16_at(p, 0).ok_or_else(short)?;
            let before_ms = u64_at(p, 2).ok_or_else(short)? as i64;
            if TRIM_FIXED_BYTES + device_len != p.len() {
                return Err("TRIM field lengths disagree with the payload length".into());
            }
            Body::Trim {
                device: id_at(
                    p,
                    TRIM_FIXED_BYTES,
                    device_len,
                    "device",
                    DEVICE_ID_BYTES_MAX,
                )?,
                before_ms,
            }
        }
        KIND_SEGMENT_END => {
            if p.len() != SEGMENT_END_FIXED_BYTES {
                return Err("SEGMENT_END payload is not 8 bytes".into());
            }
            Body::SegmentEnd {
                next_seq: u64_at(p, 0).ok_or_else(short)?,
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
        let mut at = 0;
        let mut bodies = Vec::new();
        while let Decode::Record(d) = decode(&buf[at..], 9) {
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
                        ts_ms: -7,
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
                        before_ms: -3
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
        }
    }
}
