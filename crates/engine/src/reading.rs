//! A reading as the caller writes it (`Record`) and reads it back (`Reading`), and the checks
//! every id and value pass before anything is written (docs/FORMAT.md, "Limits").

use crate::error::{Error, Result};
use crate::limits;

/// One reading, as the caller writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    pub ts_ms: i64,
    pub value: &'a [u8],
}

/// One reading, as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reading {
    pub device: String,
    pub sensor: String,
    pub ts_ms: i64,
    pub value: Vec<u8>,
}

/// Checks one record against the engine's limits without writing it (what `put` checks first).
pub fn validate_record(r: &Record<'_>) -> Result<()> {
    validate_device(r.device)?;
    validate_sensor(r.sensor)?;
    if r.value.len() > limits::VALUE_BYTES_MAX {
        return Err(Error::ValueTooLarge {
            len: r.value.len(),
            max: limits::VALUE_BYTES_MAX,
        });
    }
    Ok(())
}

/// An id is 1..=`max` bytes of UTF-8 without NUL.
pub(crate) fn validate_id(what: &'static str, id: &str, max: usize) -> Result<()> {
    if id.is_empty() {
        return Err(Error::EmptyId { what });
    }
    if id.len() > max {
        return Err(Error::IdTooLong {
            what,
            len: id.len(),
            max,
        });
    }
    if id.as_bytes().contains(&0) {
        return Err(Error::IdContainsNul { what });
    }
    Ok(())
}

pub(crate) fn validate_device(device: &str) -> Result<()> {
    validate_id("device", device, limits::DEVICE_ID_BYTES_MAX)
}

pub(crate) fn validate_sensor(sensor: &str) -> Result<()> {
    validate_id("sensor", sensor, limits::SENSOR_ID_BYTES_MAX)
}

/// Bytes of a reading as the user sees them: the key's parts and the value.
pub(crate) fn user_bytes(device: &str, sensor: &str, value: &[u8]) -> u64 {
    (device.len() + sensor.len() + 8 + value.len()) as u64
}
