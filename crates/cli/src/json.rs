//! The JSON-lines form of a reading, shared by `load` (input) and `get`/`scan` (output).
//!
//! `{"device":"car-17","sensor":"speed","ts":1700000000000,"value":"88.5"}`; a value that is
//! not UTF-8 travels as `"value_b64"` (standard base64) instead.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputLine {
    pub device: String,
    pub sensor: String,
    pub ts: i64,
    pub value: Option<String>,
    pub value_b64: Option<String>,
}

impl InputLine {
    /// The value's bytes; exactly one of `value` and `value_b64` must be present.
    pub fn value_bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.value, &self.value_b64) {
            (Some(text), None) => Ok(text.as_bytes().to_vec()),
            (None, Some(b64)) => BASE64
                .decode(b64)
                .map_err(|e| format!("value_b64 is not base64: {e}")),
            (Some(_), Some(_)) => Err("give either \"value\" or \"value_b64\", not both".into()),
            (None, None) => Err("missing \"value\" (or \"value_b64\")".into()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct OutputLine<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    pub ts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_b64: Option<String>,
}

impl<'a> OutputLine<'a> {
    pub fn new(device: &'a str, sensor: &'a str, ts: i64, value: &'a [u8]) -> OutputLine<'a> {
        match std::str::from_utf8(value) {
            Ok(text) => OutputLine {
                device,
                sensor,
                ts,
                value: Some(text),
                value_b64: None,
            },
            Err(_) => OutputLine {
                device,
                sensor,
                ts,
                value: None,
                value_b64: Some(BASE64.encode(value)),
            },
        }
    }
}
