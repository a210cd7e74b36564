//! The stored reading form: what the engine keeps as a reading's value (a CBOR
//! [`StoredReading`] with everything of the reading and its event that the engine's key does not
//! hold), written from a checked EdgeX reading and read back into readings and events.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::borrowed::{EventView, ReadingView};
use super::compact::{self, Fields, Rest};
use super::contract::API_VERSION;
pub use super::dto::StoredReading;
use super::dto::{BinaryValue, Event, Reading};
use crate::error::WireError;
use crate::keyed::KeyedReading;

/// Bytes a stored reading usually takes (two UUIDs, names, a value): the buffer's first size.
const STORED_READING_BYTES_TYPICAL: usize = 96;

/// The engine reading of a checked EdgeX reading: its key, and its value, a compact stored
/// reading (compact.rs) carrying everything else.
pub(super) fn keyed_reading(
    event: &EventView<'_>,
    r: ReadingView<'_>,
    event_tags: Option<&Map<String, Value>>,
) -> Result<KeyedReading, WireError> {
    let fields = Fields {
        event_id: &event.id,
        event_origin: event.origin,
        profile_name: &r.profile_name,
        source_name: &event.source_name,
        id: &r.id,
        origin: r.origin,
        value_type: &r.value_type,
        value: r.value.as_deref(),
        rest: Rest {
            origin: None,
            units: r.units.as_deref(),
            binary_value: r
                .binary_value
                .as_deref()
                .map(|b| serde_bytes::Bytes::new(&b.0)),
            media_type: r.media_type.as_deref(),
            object_value: r.object_value.as_deref(),
            tags: r.tags.as_deref(),
            event_tags,
        },
    };
    let mut value = Vec::with_capacity(STORED_READING_BYTES_TYPICAL);
    compact::encode(fields, r.origin, &mut value)?;
    Ok(KeyedReading {
        device: event.device_name.to_string(),
        sensor: r.resource_name.into_owned(),
        ts_ns: r.origin,
        value,
    })
}

/// How a stored value is written: compact (compact.rs, since format 3), or the first form, a
/// CBOR map with field names (the `StoredReading` derive), which still reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredForm {
    Compact,
    Map,
}

/// The form a value is in, if it can be a stored reading at all (a cheap test of its first
/// byte that spares native readings, text mostly, the decoder).
pub fn stored_form(value: &[u8]) -> Option<StoredForm> {
    if compact::is_compact(value) {
        Some(StoredForm::Compact)
    } else if value.first().is_some_and(|b| b >> 5 == 5) {
        Some(StoredForm::Map)
    } else {
        None
    }
}

/// The stored reading a value holds, if it holds one (a reading written from an EdgeX event),
/// for a reading keyed at `key_ts_ns` (the compact form takes the reading's origin from it).
pub fn stored_of(value: &[u8], key_ts_ns: i64) -> Option<StoredReading> {
    match stored_form(value)? {
        StoredForm::Compact => compact::decode(value, key_ts_ns),
        StoredForm::Map => ciborium::from_reader(value).ok(),
    }
}

/// A stored reading's bytes in `form`, for a reading keyed at `key_ts_ns`.
pub fn stored_encoding(
    stored: &StoredReading,
    key_ts_ns: i64,
    form: StoredForm,
) -> Result<Vec<u8>, WireError> {
    let mut bytes = Vec::with_capacity(STORED_READING_BYTES_TYPICAL);
    match form {
        StoredForm::Compact => compact::encode(Fields::of(stored), key_ts_ns, &mut bytes)?,
        StoredForm::Map => {
            ciborium::into_writer(stored, &mut bytes).map_err(|e| WireError::Encoding {
                message: format!("encoding a reading: {e}"),
            })?
        }
    }
    Ok(bytes)
}

/// A stored reading with its key, decoded.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub device: String,
    pub resource_name: String,
    pub stored: StoredReading,
}

/// Decodes an engine reading written by this server. Readings written through the native API
/// (not EdgeX events) have no event: they are shown as String readings of their raw value.
pub fn decode(reading: roamkv_engine::Reading) -> Decoded {
    let stored = stored_of(&reading.value, reading.ts_ns).unwrap_or_else(|| StoredReading {
        event_id: String::new(),
        event_origin: reading.ts_ns,
        profile_name: String::new(),
        source_name: String::new(),
        id: String::new(),
        origin: reading.ts_ns,
        value_type: "String".into(),
        units: None,
        value: Some(String::from_utf8_lossy(&reading.value).into_owned()),
        binary_value: None,
        media_type: None,
        object_value: None,
        tags: None,
        event_tags: None,
    });
    Decoded {
        device: reading.device,
        resource_name: reading.sensor,
        stored,
    }
}

impl Decoded {
    pub fn to_reading(&self) -> Reading {
        let s = &self.stored;
        Reading {
            id: s.id.clone(),
            origin: s.origin,
            device_name: self.device.clone(),
            resource_name: self.resource_name.clone(),
            profile_name: s.profile_name.clone(),
            value_type: s.value_type.clone(),
            units: s.units.clone(),
            tags: s.tags.clone(),
            value: s.value.clone(),
            binary_value: s.binary_value.as_ref().map(|b| BinaryValue(b.to_vec())),
            media_type: s.media_type.clone(),
            object_value: s.object_value.clone(),
        }
    }
}

/// Groups readings into their events (by device and event id), readings in resource order.
pub fn group_events(readings: &[Decoded]) -> Vec<Event> {
    let mut events: BTreeMap<(&str, &str), Event> = BTreeMap::new();
    for d in readings {
        let event = events
            .entry((d.device.as_str(), d.stored.event_id.as_str()))
            .or_insert_with(|| Event {
                api_version: Some(API_VERSION.into()),
                id: d.stored.event_id.clone(),
                device_name: d.device.clone(),
                profile_name: d.stored.profile_name.clone(),
                source_name: d.stored.source_name.clone(),
                origin: d.stored.event_origin,
                readings: Vec::new(),
                tags: None,
            });
        if d.stored.event_tags.is_some() {
            event.tags = d.stored.event_tags.clone();
        }
        event.readings.push(d.to_reading());
    }
    events.into_values().collect()
}
