//! The encoder of commit-log records: a record is written with its checksum left open, sealed
//! when its group's segment is known (`seal`), and marked when all before it was durable.

use integer_encoding::VarInt;

use super::layout::*;
use crate::model::ids::SegmentSeq;
use crate::model::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX};

/// Appends a header with the kind and payload length (sequence, flags and CRC zero until
/// `seal`); returns where the record starts.
pub(super) fn begin_record(out: &mut Vec<u8>, kind: u8, payload_len: usize) -> usize {
    let start = out.len();
    out.resize(start + HEADER_BYTES, 0);
    let payload_len = u32::try_from(payload_len).expect("records are far below 4 GiB");
    out[start + PAYLOAD_LEN_OFFSET..start + SEQ_LOW_OFFSET]
        .copy_from_slice(&payload_len.to_le_bytes());
    out[start + KIND_OFFSET] = kind;
    start
}

/// Appends an id's length field (u16: ids are at most 255 bytes, limits.rs).
pub(super) fn push_id_len(out: &mut Vec<u8>, id: &str) {
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

/// Appends a PUTS record of one device's readings (in the order given), its header not yet
/// sealed, as `encode_put_unsealed`. The caller keeps to `PUTS_READINGS_MAX` readings and
/// checked each reading's ids and value. Returns the payload's CRC.
pub fn encode_puts_unsealed<'a>(
    out: &mut Vec<u8>,
    device: &str,
    readings: impl ExactSizeIterator<Item = (&'a str, i64, &'a [u8])>,
) -> u32 {
    let count = readings.len();
    debug_assert!((1..=PUTS_READINGS_MAX).contains(&count));
    let start = begin_record(out, KIND_PUTS, 0);
    push_id_len(out, device);
    out.extend_from_slice(&(count as u16).to_le_bytes());
    let first_ts_at = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(device.as_bytes());
    let mut prev_ts_ns = None;
    for (sensor, ts_ns, value) in readings {
        debug_assert!(value.len() <= VALUE_BYTES_MAX && sensor.len() <= SENSOR_ID_BYTES_MAX);
        let prev = *prev_ts_ns.get_or_insert_with(|| {
            out[first_ts_at..first_ts_at + 8].copy_from_slice(&ts_ns.to_le_bytes());
            ts_ns
        });
        push_varint(out, sensor.len() as u64);
        push_varint(out, value.len() as u64);
        let mut delta = [0u8; 10];
        let used = ts_ns.wrapping_sub(prev).encode_var(&mut delta);
        out.extend_from_slice(&delta[..used]);
        out.extend_from_slice(sensor.as_bytes());
        out.extend_from_slice(value);
        prev_ts_ns = Some(ts_ns);
    }
    let payload_len =
        u32::try_from(out.len() - start - HEADER_BYTES).expect("records are far below 4 GiB");
    out[start + PAYLOAD_LEN_OFFSET..start + SEQ_LOW_OFFSET]
        .copy_from_slice(&payload_len.to_le_bytes());
    crc32c::crc32c(&out[start + HEADER_BYTES..])
}

fn push_varint(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 10];
    let used = v.encode_var(&mut buf);
    out.extend_from_slice(&buf[..used]);
}

/// Seals the record that starts at `start` and runs to the end of `out`.
pub(super) fn seal_at(out: &mut [u8], start: usize, seq_low: u32, batch_end: bool) {
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
