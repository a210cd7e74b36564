//! A reading as the caller writes it (`Record`) and reads it back (`Reading`), and the checks
//! every id and value pass before anything is written (docs/FORMAT.md, "Limits").

use crate::model::error::{Error, Result};
use crate::model::limits;

/// Nanoseconds in a millisecond: the engine keeps time in nanoseconds since the Unix epoch
/// (i64: 1677-09-21 to 2262-04-11); callers that count milliseconds convert with this.
pub const NS_PER_MS: i64 = 1_000_000;

/// One reading, as the caller writes it. A device, sensor and timestamp name one reading:
/// writing the same three again replaces its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    pub value: &'a [u8],
}

impl<'a> Record<'a> {
    /// A reading timestamped in milliseconds since the epoch (stored as nanoseconds).
    pub fn at_ms(device: &'a str, sensor: &'a str, ts_ms: i64, value: &'a [u8]) -> Record<'a> {
        Record {
            device,
            sensor,
            ts_ns: ms_to_ns(ts_ms),
            value,
        }
    }
}

/// One reading, as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reading {
    pub device: String,
    pub sensor: String,
    /// Nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    pub value: Vec<u8>,
}

impl Reading {
    /// The timestamp in whole milliseconds (rounded down).
    pub fn ts_ms(&self) -> i64 {
        self.ts_ns.div_euclid(NS_PER_MS)
    }
}

/// Milliseconds to nanoseconds, saturating at the ends of i64 (1677 and 2262).
pub fn ms_to_ns(ms: i64) -> i64 {
    ms.saturating_mul(NS_PER_MS)
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

/// An id is 1..=`max` bytes of UTF-8 without NUL (the one rule, `limits::id_rule`).
pub(crate) fn validate_id(what: &'static str, id: &str, max: usize) -> Result<()> {
    match limits::id_rule(id, max) {
        None => Ok(()),
        Some(limits::IdProblem::Empty) => Err(Error::EmptyId { what }),
        Some(limits::IdProblem::TooLong { len }) => Err(Error::IdTooLong { what, len, max }),
        Some(limits::IdProblem::ContainsNul) => Err(Error::IdContainsNul { what }),
    }
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
