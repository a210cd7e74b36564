//! The write path's first step, outside any lock: a batch checked against the limits and
//! encoded as the log will hold it, one PUTS record per device (docs/FORMAT.md, "Record"), each
//! record's header left for the group commit to seal once the batch has its place.

use crate::commit_log::record;
use crate::model::error::{Error, Result};
use crate::model::limits::{self, SEGMENT_HEADER_BYTES};
use crate::model::reading::{Record, user_bytes, validate_record};

/// A batch encoded outside the lock: records with unsealed headers and their payload CRCs.
pub(super) struct EncodedBatch {
    pub(super) bytes: Vec<u8>,
    pub(super) records: Vec<EncodedRecord>,
    pub(super) user_bytes: u64,
}

/// One PUTS record of an encoded batch: where it is in the batch's bytes, its payload's CRC,
/// and the batch's first reading in it (whose device it holds).
pub(super) struct EncodedRecord {
    pub(super) start: usize,
    pub(super) len: usize,
    pub(super) payload_crc: u32,
    pub(super) first: usize,
}

/// Checks a batch against the limits and encodes it. The limits are checked on the batch's size
/// as a PUT record per reading (the unit they are stated in, docs/FORMAT.md "Limits"): its PUTS
/// records are smaller, or for a lone reading at most 2 bytes larger, which the worst case's
/// room for a REGISTER per reading covers many times.
pub(super) fn encode_batch(records: &[Record<'_>], segment_bytes: u64) -> Result<EncodedBatch> {
    let mut total = 0usize;
    for r in records {
        validate_record(r)?;
        total += record::put_len(r.device, r.sensor, r.value);
    }
    // Room for one REGISTER record per record, in the worst case, must also fit in a segment.
    let worst =
        total + records.len() * record::register_len(&"d".repeat(limits::DEVICE_ID_BYTES_MAX));
    let capacity = (segment_bytes - SEGMENT_HEADER_BYTES) as usize;
    if records.len() > limits::BATCH_RECORDS_MAX
        || total > limits::BATCH_BYTES_MAX
        || worst > capacity
    {
        return Err(Error::BatchTooLarge {
            records: records.len(),
            bytes: total,
            max_records: limits::BATCH_RECORDS_MAX,
            max_bytes: limits::BATCH_BYTES_MAX.min(capacity),
        });
    }
    let mut bytes = Vec::with_capacity(total);
    let mut placed = Vec::new();
    let mut user = 0;
    for run in device_runs(records) {
        for readings in run.chunks(record::PUTS_READINGS_MAX) {
            for cut in cut_at_soft_max(records, readings) {
                let start = bytes.len();
                let crc = record::encode_puts_unsealed(
                    &mut bytes,
                    records[cut[0]].device,
                    cut.iter()
                        .map(|&i| (records[i].sensor, records[i].ts_ns, records[i].value)),
                );
                placed.push(EncodedRecord {
                    start,
                    len: bytes.len() - start,
                    payload_crc: crc,
                    first: cut[0],
                });
            }
        }
    }
    for r in records {
        user += user_bytes(r.device, r.sensor, r.value);
    }
    Ok(EncodedBatch {
        bytes,
        records: placed,
        user_bytes: user,
    })
}

/// The batch's readings by device: for each device, in the order it first appears, the indexes
/// of its readings in their order (a later reading of the same sensor and ts must stay after an
/// earlier one: it replaces it). One PUTS record per device then carries the device id once.
fn device_runs(records: &[Record<'_>]) -> Vec<Vec<usize>> {
    let first = records[0].device;
    if records.iter().all(|r| r.device == first) {
        return vec![(0..records.len()).collect()];
    }
    let mut run_of: foldhash::HashMap<&str, usize> = foldhash::HashMap::default();
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let run = *run_of.entry(r.device).or_insert_with(|| {
            runs.push(Vec::new());
            runs.len() - 1
        });
        runs[run].push(i);
    }
    runs
}

/// A device's readings (at most `PUTS_READINGS_MAX`) cut into records of about
/// `PUTS_PAYLOAD_BYTES_SOFT_MAX` of payload at most (a reading that starts a record is in it
/// whatever its size).
fn cut_at_soft_max<'r>(records: &[Record<'_>], readings: &'r [usize]) -> Vec<&'r [usize]> {
    let mut cuts = Vec::new();
    let (mut from, mut payload, mut prev_ts) = (0, 0, records[readings[0]].ts_ns);
    for (at, &i) in readings.iter().enumerate() {
        let r = &records[i];
        let len = record::puts_reading_len(r.sensor, r.ts_ns.wrapping_sub(prev_ts), r.value);
        if at > from && payload + len > record::PUTS_PAYLOAD_BYTES_SOFT_MAX {
            cuts.push(&readings[from..at]);
            (from, payload) = (at, 0);
        }
        payload += len;
        prev_ts = r.ts_ns;
    }
    cuts.push(&readings[from..]);
    cuts
}
