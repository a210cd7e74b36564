//! An EdgeX reading as the native API and the CLI show it: the stored reading
//! ([`StoredReading`], compact or the first form's map) as the reading EdgeX would show it (its
//! value decoded: text, binary in base64 with its media type, an object as JSON), with its
//! event's fields beside; and read back into exactly the bytes it came from, so that
//! `roamkv scan` output loads back unchanged.
//!
//! Only a value that *is* a stored reading is shown so: one that decodes as a `StoredReading`
//! and encodes back to the same bytes. Any other value (a native reading that happens to be
//! CBOR, say) stays raw, so no value is shown as something it does not round-trip to.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::dto::BinaryValue;
use super::stored::{StoredForm, StoredReading, stored_encoding, stored_form, stored_of};
use crate::error::WireError;

/// A stored EdgeX reading in JSON (EdgeX's camelCase names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadableReading {
    pub value_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<BinaryValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    /// The reading's id and exact origin (ns).
    pub id: String,
    pub origin: i64,
    pub profile_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Map<String, Value>>,
    /// Its event's id, origin and source; the event's tags ride on its first reading.
    pub event_id: String,
    pub event_origin: i64,
    pub source_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_tags: Option<Map<String, Value>>,
    /// Stored in the first form (a CBOR map, before format 3): said so that loading the line
    /// back writes the very bytes it came from.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub map_form: bool,
}

/// The readable form of a stored value keyed at `key_ts_ns`, if the value is exactly a stored
/// reading's encoding (in either form: stored.rs).
pub fn readable(value: &[u8], key_ts_ns: i64) -> Option<ReadableReading> {
    let form = stored_form(value)?;
    let stored = stored_of(value, key_ts_ns)?;
    if stored_encoding(&stored, key_ts_ns, form).ok()?.as_slice() != value {
        return None;
    }
    Some(ReadableReading {
        value_type: stored.value_type,
        value: stored.value,
        binary_value: stored.binary_value.map(|b| BinaryValue(b.into_vec())),
        media_type: stored.media_type,
        object_value: stored.object_value,
        units: stored.units,
        id: stored.id,
        origin: stored.origin,
        profile_name: stored.profile_name,
        tags: stored.tags,
        event_id: stored.event_id,
        event_origin: stored.event_origin,
        source_name: stored.source_name,
        event_tags: stored.event_tags,
        map_form: form == StoredForm::Map,
    })
}

/// The stored bytes of a readable reading keyed at `key_ts_ns`, in the form it was read from:
/// the inverse of [`readable`].
pub fn stored_bytes(r: ReadableReading, key_ts_ns: i64) -> Result<Vec<u8>, WireError> {
    let form = if r.map_form {
        StoredForm::Map
    } else {
        StoredForm::Compact
    };
    let stored = StoredReading {
        event_id: r.event_id,
        event_origin: r.event_origin,
        profile_name: r.profile_name,
        source_name: r.source_name,
        id: r.id,
        origin: r.origin,
        value_type: r.value_type,
        units: r.units,
        value: r.value,
        binary_value: r.binary_value.map(|b| serde_bytes::ByteBuf::from(b.0)),
        media_type: r.media_type,
        object_value: r.object_value,
        tags: r.tags,
        event_tags: r.event_tags,
    };
    stored_encoding(&stored, key_ts_ns, form)
}

/// A reading as the CLI prints it (crates/cli/src/json.rs), the native API answers it and an
/// export writes it as JSON lines: `value` text, `value_b64`, or, for a reading stored from an
/// EdgeX event, `edgex`: the reading with its value decoded.
pub fn reading_json(r: roamkv_engine::Reading) -> Value {
    use base64::Engine as _;
    let mut out = serde_json::json!({
        "device": r.device, "sensor": r.sensor, "ts_ns": r.ts_ns,
        "ts": crate::time_arg::format_time(r.ts_ns),
    });
    if let Some(edgex) = readable(&r.value, r.ts_ns) {
        out["edgex"] = serde_json::to_value(edgex).unwrap_or(Value::Null);
        return out;
    }
    match String::from_utf8(r.value) {
        Ok(text) => out["value"] = Value::String(text),
        Err(e) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
            out["value_b64"] = Value::String(b64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edgex::{AddEventRequest, event_to_readings};

    #[test]
    fn stored_readings_read_back_to_their_bytes_and_others_are_not_taken() {
        let request: AddEventRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": "v3",
            "event": {
                "apiVersion": "v3", "id": "040bd523-ec33-440d-9d72-e5813a465f37",
                "deviceName": "cam", "profileName": "p", "sourceName": "s", "origin": 7,
                "tags": {"site": "a"},
                "readings": [
                    {"deviceName": "cam", "resourceName": "t", "profileName": "p", "origin": 7,
                     "valueType": "Float64", "value": "21.5", "units": "C"},
                    {"deviceName": "cam", "resourceName": "img", "profileName": "p", "origin": 8,
                     "valueType": "Binary", "binaryValue": "AAEC", "mediaType": "image/jpeg"},
                    {"deviceName": "cam", "resourceName": "pos", "profileName": "p", "origin": 9,
                     "valueType": "Object", "objectValue": {"lat": 1.5}}
                ]
            }
        }))
        .expect("request");
        for keyed in event_to_readings(request.view(), None, 10).expect("readings") {
            let shown = readable(&keyed.value, keyed.ts_ns).expect("a stored reading");
            let json = serde_json::to_value(&shown).expect("json");
            let back: ReadableReading = serde_json::from_value(json).expect("parses back");
            assert_eq!(
                stored_bytes(back, keyed.ts_ns).expect("encodes"),
                keyed.value
            );
            // The first form (a map) still shows, as the same reading.
            let stored = stored_of(&keyed.value, keyed.ts_ns).expect("stored");
            let map = stored_encoding(&stored, keyed.ts_ns, StoredForm::Map).expect("map");
            let shown_map = readable(&map, keyed.ts_ns).expect("the first form shows");
            assert!(shown_map.map_form && !shown.map_form);
            assert_eq!(stored_bytes(shown_map, keyed.ts_ns).expect("encodes"), map);
        }
        assert!(readable(b"21.5", 7).is_none());
        let mut extra = Vec::new();
        ciborium::into_writer(&serde_json::json!({"e": "x", "unknown": 1}), &mut extra)
            .expect("cbor");
        assert!(readable(&extra, 7).is_none());
    }
}
