//! The decoder of commit-log records (the layout is in `super`, docs/FORMAT.md, "Record"): it
//! checks every length, id and checksum and never panics on any input (the fuzz target in
//! fuzz/ feeds it arbitrary bytes).

use super::fields::{id_at, short, u16_at};
use super::layout::*;
use super::puts::{PutsReadings, puts_reading};
use crate::dir::format::{u32_at, u64_at};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX};

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

pub(super) fn decode_checked(buf: &[u8], seq_low: u32, verify_crc: bool) -> Decode<'_> {
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

/// A PUT payload (see `Body::Put`).
pub(super) fn decode_put(p: &[u8]) -> Result<Body<'_>, String> {
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

/// A PUTS payload (see `Body::Puts`): every reading is checked here, as a PUT's fields are, so
/// that iterating the readings later cannot meet bytes that do not parse.
pub(super) fn decode_puts(p: &[u8]) -> Result<Body<'_>, String> {
    let device_len = u16_at(p, 0).ok_or_else(short)?;
    let count = u16_at(p, PUTS_COUNT_OFFSET).ok_or_else(short)?;
    let first_ts_ns = u64_at(p, PUTS_FIRST_TS_OFFSET).ok_or_else(short)? as i64;
    if count == 0 || count > PUTS_READINGS_MAX {
        return Err(format!(
            "PUTS count {count} is not within 1..={PUTS_READINGS_MAX}"
        ));
    }
    let device = id_at(
        p,
        PUTS_FIXED_BYTES,
        device_len,
        "device",
        DEVICE_ID_BYTES_MAX,
    )?;
    let bytes = &p[PUTS_FIXED_BYTES + device_len..];
    let (mut at, mut ts_ns) = (0, first_ts_ns);
    for i in 0..count {
        let (reading, used) = puts_reading(&bytes[at..], ts_ns)
            .map_err(|reason| format!("PUTS reading {i}: {reason}"))?;
        at += used;
        ts_ns = reading.ts_ns;
    }
    if at != bytes.len() {
        return Err(format!(
            "PUTS readings end {} bytes before the payload does",
            bytes.len() - at
        ));
    }
    Ok(Body::Puts {
        device,
        readings: PutsReadings {
            count,
            first_ts_ns,
            bytes,
        },
    })
}

/// A payload of a device id after `fixed` bytes of fixed fields (REGISTER, DEPART, TRIM).
pub(super) fn device_after<'a>(p: &'a [u8], fixed: usize, kind: &str) -> Result<&'a str, String> {
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

pub(super) fn decode_body(kind: u8, p: &[u8]) -> Result<Body<'_>, String> {
    let body = match kind {
        KIND_PUT => decode_put(p)?,
        KIND_PUTS => decode_puts(p)?,
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
    use super::super::encode::*;
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

    fn sealed_puts(seq: u32, readings: &[(&str, i64, &[u8])]) -> Vec<u8> {
        let mut buf = Vec::new();
        let crc = encode_puts_unsealed(&mut buf, "car-1", readings.iter().copied());
        seal(&mut buf, seq, true, crc);
        buf
    }

    #[test]
    fn puts_records_round_trip_with_any_timestamps() {
        let readings: Vec<(&str, i64, &[u8])> = vec![
            ("speed", 5, b"a"),
            ("rpm", i64::MIN, b""),
            ("speed", i64::MAX, &[0xff; 300]),
            ("speed", i64::MAX, b"again"),
            ("x", -1, b"b"),
        ];
        let buf = sealed_puts(7, &readings);
        let Decode::Record(d) = decode(&buf, 7) else {
            panic!("{:?}", decode(&buf, 7));
        };
        assert_eq!(d.len, buf.len());
        let Body::Puts {
            device,
            readings: got,
        } = d.body
        else {
            panic!("{:?}", d.body);
        };
        assert_eq!((device, got.len()), ("car-1", readings.len()));
        let got: Vec<(&str, i64, &[u8])> =
            got.iter().map(|r| (r.sensor, r.ts_ns, r.value)).collect();
        assert_eq!(got, readings);
    }

    #[test]
    fn every_flipped_bit_of_a_puts_record_is_detected_and_truncations_never_panic() {
        let good = sealed_puts(
            3,
            &[("speed", 10, b"88.5"), ("rpm", 1_000_000_010, b"3000")],
        );
        for byte in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                if let Decode::Record(d) = decode(&bad, 3) {
                    panic!("flip at byte {byte} bit {bit} decoded as {d:?}");
                }
                // Unchecked (as the apply step decodes), the structure checks alone hold.
                if let Decode::Record(d) = decode_checked(&bad, 3, false)
                    && let Body::Puts { readings, .. } = d.body
                {
                    assert_eq!(readings.iter().count(), readings.len());
                }
            }
        }
        for len in 0..good.len() {
            assert!(!matches!(decode(&good[..len], 3), Decode::Record(_)));
            let _ = decode_checked(&good[..len], 3, false);
        }
    }

    #[test]
    fn a_puts_record_of_no_readings_or_trailing_bytes_is_refused() {
        let good = sealed_puts(3, &[("speed", 10, b"88.5")]);
        let payload = &good[HEADER_BYTES..];
        let mut none = payload.to_vec();
        none[PUTS_COUNT_OFFSET] = 0;
        assert!(decode_body(KIND_PUTS, &none).is_err());
        let mut two = payload.to_vec();
        two[PUTS_COUNT_OFFSET] = 2;
        assert!(decode_body(KIND_PUTS, &two).is_err());
        let mut trailing = payload.to_vec();
        trailing.push(0);
        assert!(decode_body(KIND_PUTS, &trailing).is_err());
        assert!(decode_body(KIND_PUTS, payload).is_ok());
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
