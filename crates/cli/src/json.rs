//! The JSON-lines form of a reading, shared by `load` (input) and `get`/`scan` (output).
//!
//! Output: `{"device":"car-17","sensor":"speed","ts_ns":1700000000000000000,
//! "ts":"2023-11-14T22:13:20Z","value":"88.5"}`; a value that is not UTF-8 travels as
//! `"value_b64"` (standard base64) instead, and a reading `roamkv serve` stored from an EdgeX
//! event as `"edgex"`: the reading as EdgeX shows it, value decoded, with its event's fields
//! (`roamkv_wire::edgex::readable`). Input takes the same form, or `"ts"` alone: an RFC 3339
//! time (with any fraction) or an integer of milliseconds since the epoch. When both are given
//! they must name the same time, so printed lines load back unchanged (an `"edgex"` reading to
//! the very bytes it was stored as).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use roamkv_wire::edgex::readable::{ReadableReading, readable, stored_bytes};
use roamkv_wire::time_arg::{format_time, ms_to_ns, parse_time};
use serde::{Deserialize, Serialize};

/// The `ts` field as given: milliseconds, or a time in text.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum TsField {
    Ms(i64),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputLine {
    pub device: String,
    pub sensor: String,
    pub ts_ns: Option<i64>,
    pub ts: Option<TsField>,
    pub value: Option<String>,
    pub value_b64: Option<String>,
    pub edgex: Option<ReadableReading>,
}

impl InputLine {
    /// The reading's time in nanoseconds since the epoch.
    pub fn ts_ns(&self) -> Result<i64, String> {
        let from_ts = match &self.ts {
            None => None,
            Some(TsField::Ms(ms)) => Some(ms_to_ns(*ms)),
            Some(TsField::Text(text)) => Some(parse_time(text)?),
        };
        match (self.ts_ns, from_ts) {
            (Some(ns), None) | (None, Some(ns)) => Ok(ns),
            (Some(ns), Some(other)) if ns == other => Ok(ns),
            (Some(ns), Some(other)) => Err(format!(
                "ts_ns {ns} and ts ({other} ns) name different times"
            )),
            (None, None) => Err("missing \"ts_ns\" (or \"ts\")".into()),
        }
    }

    /// The value's bytes; exactly one of `value`, `value_b64` and `edgex` must be present.
    pub fn value_bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.value, &self.value_b64, &self.edgex) {
            (Some(text), None, None) => Ok(text.as_bytes().to_vec()),
            (None, Some(b64), None) => BASE64
                .decode(b64)
                .map_err(|e| format!("value_b64 is not base64: {e}")),
            (None, None, Some(reading)) => stored_bytes(reading.clone(), self.ts_ns()?)
                .map_err(|e| format!("edgex: {}", e.message())),
            (None, None, None) => Err("missing \"value\" (or \"value_b64\" or \"edgex\")".into()),
            _ => Err("give one of \"value\", \"value_b64\" and \"edgex\"".into()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct OutputLine<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    pub ts_ns: i64,
    /// RFC 3339; left out before 1970 (`roamkv_wire::time_arg`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edgex: Option<ReadableReading>,
}

impl<'a> OutputLine<'a> {
    pub fn new(device: &'a str, sensor: &'a str, ts_ns: i64, value: &'a [u8]) -> OutputLine<'a> {
        let edgex = readable(value, ts_ns);
        let (value, value_b64) = match std::str::from_utf8(value) {
            _ if edgex.is_some() => (None, None),
            Ok(text) => (Some(text), None),
            Err(_) => (None, Some(BASE64.encode(value))),
        };
        OutputLine {
            device,
            sensor,
            ts_ns,
            ts: format_time(ts_ns),
            value,
            value_b64,
            edgex,
        }
    }
}
