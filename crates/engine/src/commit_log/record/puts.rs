//! A PUTS record's readings (docs/FORMAT.md, "Record"): what `decode` checked whole, read one
//! at a time; the layout of one reading and its reader.

use integer_encoding::VarInt;

use super::fields::id_at;
use crate::model::limits::{SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX};

/// The readings of a PUTS record: checked whole when the record was decoded, read on demand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutsReadings<'a> {
    pub(super) count: usize,
    pub(super) first_ts_ns: i64,
    /// The encoded readings, from the first to the end of the payload.
    pub(super) bytes: &'a [u8],
}

/// One reading of a PUTS record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutsReading<'a> {
    pub sensor: &'a str,
    pub ts_ns: i64,
    pub value: &'a [u8],
}

impl<'a> PutsReadings<'a> {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn iter(&self) -> PutsIter<'a> {
        PutsIter {
            left: self.count,
            ts_ns: self.first_ts_ns,
            rest: self.bytes,
        }
    }
}

/// The readings of a PUTS record, in order. The record was checked when it was decoded; should
/// its bytes still not parse, the iteration ends (it never panics).
#[derive(Debug, Clone)]
pub struct PutsIter<'a> {
    left: usize,
    ts_ns: i64,
    rest: &'a [u8],
}

impl<'a> Iterator for PutsIter<'a> {
    type Item = PutsReading<'a>;

    fn next(&mut self) -> Option<PutsReading<'a>> {
        if self.left == 0 {
            return None;
        }
        let (reading, used) = puts_reading(self.rest, self.ts_ns).ok()?;
        self.rest = &self.rest[used..];
        self.ts_ns = reading.ts_ns;
        self.left -= 1;
        Some(reading)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

/// Exact for a record `decode` accepted (every reading was parsed there).
impl ExactSizeIterator for PutsIter<'_> {}

/// One reading of a PUTS record at the start of `b` (the one before it at `prev_ts_ns`), and
/// the bytes it takes.
pub(super) fn puts_reading(b: &[u8], prev_ts_ns: i64) -> Result<(PutsReading<'_>, usize), String> {
    let mut at = 0;
    let mut varint = |what: &str| -> Result<u64, String> {
        let (v, used) = u64::decode_var(&b[at..]).ok_or_else(|| format!("bad {what} varint"))?;
        at += used;
        Ok(v)
    };
    let sensor_len = varint("sensor length")?;
    let value_len = varint("value length")?;
    let delta = varint("ts delta")?;
    // zigzag, as `i64::encode_var` writes it
    let delta = ((delta >> 1) as i64) ^ -((delta & 1) as i64);
    if sensor_len > SENSOR_ID_BYTES_MAX as u64 || value_len > VALUE_BYTES_MAX as u64 {
        return Err(format!(
            "a sensor of {sensor_len} bytes or a value of {value_len} bytes is over its limit"
        ));
    }
    let (sensor_len, value_len) = (sensor_len as usize, value_len as usize);
    let sensor = id_at(b, at, sensor_len, "sensor", SENSOR_ID_BYTES_MAX)?;
    let value = b
        .get(at + sensor_len..at + sensor_len + value_len)
        .ok_or("value runs past the payload")?;
    let reading = PutsReading {
        sensor,
        ts_ns: prev_ts_ns.wrapping_add(delta),
        value,
    };
    Ok((reading, at + sensor_len + value_len))
}
