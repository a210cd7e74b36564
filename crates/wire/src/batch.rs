//! The compact binary batch of the native API (`POST /api/roamkv/v1/readings` with
//! `Content-Type: application/vnd.roamkv.batch`), docs/SERVER.md "Binary batches":
//!
//! ```text
//! offset  size  field
//!      0     4  magic "RKVB"
//!      4     1  version: 2 (ts in nanoseconds); 1 (ts in milliseconds) is read too
//!      5     3  reserved, zero
//!      8     4  record count (u32 LE), 1..=--batch-readings-max
//!     12     …  records, back to back, each the engine's PUT payload (docs/FORMAT.md):
//!               u16 device_len | u16 sensor_len | u32 value_len | i64 ts | device | sensor | value
//! ```
//! All integers little-endian. The body ends exactly after the last record. Every error names
//! the byte offset of the field at fault and the record's number.

use crate::error::WireError;
use crate::keyed::KeyedReading;

/// The media type that selects this form.
pub const CONTENT_TYPE: &str = "application/vnd.roamkv.batch";
pub const MAGIC: &[u8; 4] = b"RKVB";
/// The version written: timestamps in nanoseconds.
pub const VERSION: u8 = 2;
/// The version before it, still read: timestamps in milliseconds.
const VERSION_MS: u8 = 1;
/// Magic, version, reserved, count.
pub const HEADER_BYTES: usize = 12;
/// device_len, sensor_len, value_len, ts.
pub const RECORD_FIXED_BYTES: usize = 16;

/// Appends a batch's header (the caller then appends `count` records).
pub fn encode_header(out: &mut Vec<u8>, count: u32) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[VERSION, 0, 0, 0]);
    out.extend_from_slice(&count.to_le_bytes());
}

/// Appends one record. The lengths must fit their fields (ids <= 255 bytes, values <= 256 KiB
/// are what the server accepts anyway).
pub fn encode_record(out: &mut Vec<u8>, device: &str, sensor: &str, ts_ns: i64, value: &[u8]) {
    out.extend_from_slice(&(device.len() as u16).to_le_bytes());
    out.extend_from_slice(&(sensor.len() as u16).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&ts_ns.to_le_bytes());
    out.extend_from_slice(device.as_bytes());
    out.extend_from_slice(sensor.as_bytes());
    out.extend_from_slice(value);
}

/// A cursor over the body that names the offset of whatever it fails to read.
struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let bytes = self.body.get(self.at..self.at + n).ok_or_else(|| {
            format!(
                "at byte {}: {what} needs {n} bytes, the body has {} left",
                self.at,
                self.body.len() - self.at
            )
        })?;
        self.at += n;
        Ok(bytes)
    }

    fn text(&mut self, n: usize, what: &str) -> Result<&'a str, String> {
        let at = self.at;
        std::str::from_utf8(self.take(n, what)?)
            .map_err(|_| format!("at byte {at}: {what} is not UTF-8"))
    }
}

fn le_u16(b: &[u8]) -> usize {
    u16::from_le_bytes([b[0], b[1]]) as usize
}

fn le_u32(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// Decodes and checks a whole batch (nothing is written unless all of it is good).
pub fn decode(body: &[u8], max: usize) -> Result<Vec<KeyedReading>, WireError> {
    let mut r = Reader { body, at: 0 };
    let (version, count) = decode_header(&mut r).map_err(WireError::bad_input)?;
    if count > max {
        return Err(WireError::too_large(format!(
            "at byte 8: the batch has {count} records, more than {max} (the limit)"
        )));
    }
    let mut out = Vec::with_capacity(count);
    for number in 1..=count {
        let reading = decode_record(&mut r, version)
            .map_err(|e| WireError::bad_input(format!("record {number}: {e}")))?;
        out.push(reading);
    }
    if r.at != body.len() {
        return Err(WireError::bad_input(format!(
            "at byte {}: {} bytes follow the last of the {count} records the header announced",
            r.at,
            body.len() - r.at
        )));
    }
    Ok(out)
}

/// The batch's version and record count.
fn decode_header(r: &mut Reader<'_>) -> Result<(u8, usize), String> {
    let magic = r.take(4, "the magic")?;
    if magic != MAGIC {
        return Err(format!(
            "at byte 0: magic {magic:02x?} is not \"RKVB\" (a binary batch starts with it)"
        ));
    }
    let version = r.take(4, "the version and reserved bytes")?;
    if version[0] != VERSION && version[0] != VERSION_MS {
        return Err(format!(
            "at byte 4: version {} is not supported (this server reads versions {VERSION_MS} \
             and {VERSION})",
            version[0]
        ));
    }
    if version[1..] != [0, 0, 0] {
        return Err("at byte 5: the reserved bytes must be zero".into());
    }
    let count = le_u32(r.take(4, "the record count")?);
    if count == 0 {
        return Err("at byte 8: the batch has no readings".into());
    }
    Ok((version[0], count))
}

fn decode_record(r: &mut Reader<'_>, version: u8) -> Result<KeyedReading, String> {
    let start = r.at;
    let fixed = r.take(RECORD_FIXED_BYTES, "the record's lengths and timestamp")?;
    let (device_len, sensor_len, value_len) = (
        le_u16(&fixed[0..2]),
        le_u16(&fixed[2..4]),
        le_u32(&fixed[4..8]),
    );
    let ts = i64::from_le_bytes([
        fixed[8], fixed[9], fixed[10], fixed[11], fixed[12], fixed[13], fixed[14], fixed[15],
    ]);
    let ts_ns = if version == VERSION_MS {
        roamkv_engine::ms_to_ns(ts)
    } else {
        ts
    };
    let device = r.text(device_len, "the device id")?;
    let sensor = r.text(sensor_len, "the sensor id")?;
    let value = r.take(value_len, "the value")?;
    roamkv_engine::validate_record(&roamkv_engine::Record {
        device,
        sensor,
        ts_ns,
        value,
    })
    .map_err(|e| format!("at byte {start}: {e}"))?;
    Ok(KeyedReading {
        device: device.to_string(),
        sensor: sensor.to_string(),
        ts_ns,
        value: value.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(records: &[(&str, &str, i64, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(&mut out, records.len() as u32);
        for (d, s, ts, v) in records {
            encode_record(&mut out, d, s, *ts, v);
        }
        out
    }

    #[test]
    fn batches_round_trip() {
        let body = batch(&[
            ("car-1", "speed", -5, b"88.5"),
            ("car-2", "raw", 7, &[0, 255]),
        ]);
        let readings = decode(&body, 10).expect("decode");
        assert_eq!(readings.len(), 2);
        assert_eq!(
            (
                readings[1].device.as_str(),
                readings[1].sensor.as_str(),
                readings[1].ts_ns
            ),
            ("car-2", "raw", 7)
        );
        assert_eq!(readings[1].value, vec![0, 255]);
        assert_eq!(readings[0].ts_ns, -5);
        // Version 1 carried milliseconds: still read, as nanoseconds.
        let mut old = body.clone();
        old[4] = 1;
        assert_eq!(decode(&old, 10).expect("v1")[1].ts_ns, 7_000_000);
    }

    fn error(body: &[u8]) -> String {
        match decode(body, 10) {
            Ok(_) => panic!("must fail"),
            Err(e) => e.into_message(),
        }
    }

    #[test]
    fn bad_batches_name_the_offset() {
        let good = batch(&[("car-1", "speed", 1, b"x")]);
        assert!(error(b"RKV").starts_with("at byte 0"), "{}", error(b"RKV"));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(error(&bad).contains("magic"));
        let mut bad = good.clone();
        bad[4] = 3;
        assert!(error(&bad).starts_with("at byte 4: version 3"));
        let mut bad = good.clone();
        bad[6] = 1;
        assert!(error(&bad).starts_with("at byte 5"));
        let mut bad = good.clone();
        bad[8] = 0;
        assert!(error(&bad).contains("no readings"));
        // Truncated inside the record: the offset of the field that runs out.
        assert!(
            error(&good[..good.len() - 1]).starts_with("record 1: at byte 38: the value"),
            "{}",
            error(&good[..good.len() - 1])
        );
        // An empty device id (lengths say 0): the record's offset.
        let empty = batch(&[("", "speed", 1, b"x")]);
        assert!(
            error(&empty).starts_with("record 1: at byte 12: "),
            "{}",
            error(&empty)
        );
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(error(&trailing).starts_with(&format!("at byte {}", good.len())));
        let mut not_utf8 = good.clone();
        not_utf8[28] = 0xff;
        assert!(error(&not_utf8).contains("at byte 28: the device id is not UTF-8"));
        let two = batch(&[("a", "s", 1, b""), ("a", "s", 2, b"")]);
        assert!(matches!(decode(&two, 1), Err(WireError::TooLarge { .. })));
    }
}
