//! The stored reading form: what the engine keeps as a reading's value (a CBOR
//! [`StoredReading`] with everything of the reading and its event that the engine's key does not
//! hold), written from a checked EdgeX reading and read back into readings and events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::contract::API_VERSION;
use super::dto::{BinaryValue, Event, Reading};
use crate::error::WireError;
use crate::keyed::KeyedReading;

/// What the engine stores as a reading's value (CBOR; short field names: it is per reading).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct StoredReading {
    #[serde(rename = "e")]
    pub event_id: String,
    #[serde(rename = "eo")]
    pub event_origin: i64,
    #[serde(rename = "p")]
    pub profile_name: String,
    #[serde(rename = "s")]
    pub source_name: String,
    #[serde(rename = "i")]
    pub id: String,
    #[serde(rename = "o")]
    pub origin: i64,
    #[serde(rename = "t")]
    pub value_type: String,
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    #[serde(rename = "v", default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(rename = "b", default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<serde_bytes::ByteBuf>,
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(rename = "ov", default, skip_serializing_if = "Option::is_none")]
    pub object_value: Option<Value>,
    #[serde(rename = "rt", default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Map<String, Value>>,
    /// The event's tags, stored with the event's first reading only.
    #[serde(rename = "et", default, skip_serializing_if = "Option::is_none")]
    pub event_tags: Option<Map<String, Value>>,
}

/// `StoredReading` as it is written: the same fields, names and order, borrowed from the
/// request, so that encoding a reading copies no string twice.
#[derive(Serialize)]
struct StoredReadingRef<'a> {
    #[serde(rename = "e")]
    event_id: &'a str,
    #[serde(rename = "eo")]
    event_origin: i64,
    #[serde(rename = "p")]
    profile_name: &'a str,
    #[serde(rename = "s")]
    source_name: &'a str,
    #[serde(rename = "i")]
    id: &'a str,
    #[serde(rename = "o")]
    origin: i64,
    #[serde(rename = "t")]
    value_type: &'a str,
    #[serde(rename = "u", skip_serializing_if = "Option::is_none")]
    units: Option<&'a str>,
    #[serde(rename = "v", skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(rename = "b", skip_serializing_if = "Option::is_none")]
    binary_value: Option<&'a serde_bytes::Bytes>,
    #[serde(rename = "m", skip_serializing_if = "Option::is_none")]
    media_type: Option<&'a str>,
    #[serde(rename = "ov", skip_serializing_if = "Option::is_none")]
    object_value: Option<&'a Value>,
    #[serde(rename = "rt", skip_serializing_if = "Option::is_none")]
    tags: Option<&'a Map<String, Value>>,
    #[serde(rename = "et", skip_serializing_if = "Option::is_none")]
    event_tags: Option<&'a Map<String, Value>>,
}

/// Bytes a stored reading usually takes (two UUIDs, names, a value): the buffer's first size.
const STORED_READING_BYTES_TYPICAL: usize = 256;

/// The engine reading of a checked EdgeX reading: its key, and its value as a CBOR
/// `StoredReading` carrying everything else.
pub(super) fn keyed_reading(
    event: &Event,
    mut r: Reading,
    event_tags: Option<&Map<String, Value>>,
) -> Result<KeyedReading, WireError> {
    let stored = StoredReadingRef {
        event_id: &event.id,
        event_origin: event.origin,
        profile_name: &r.profile_name,
        source_name: &event.source_name,
        id: &r.id,
        origin: r.origin,
        value_type: &r.value_type,
        units: r.units.as_deref(),
        value: r.value.as_deref(),
        binary_value: r
            .binary_value
            .as_ref()
            .map(|b| serde_bytes::Bytes::new(&b.0)),
        media_type: r.media_type.as_deref(),
        object_value: r.object_value.as_ref(),
        tags: r.tags.as_ref(),
        event_tags,
    };
    let mut value = Vec::with_capacity(STORED_READING_BYTES_TYPICAL);
    ciborium::into_writer(&stored, &mut value).map_err(|e| WireError::Encoding {
        message: format!("encoding a reading: {e}"),
    })?;
    Ok(KeyedReading {
        device: event.device_name.clone(),
        sensor: std::mem::take(&mut r.resource_name),
        ts_ns: r.origin,
        value,
    })
}

/// A stored reading with its key, decoded.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub device: String,
    pub resource_name: String,
    pub stored: StoredReading,
}

/// The stored reading a value holds, if it holds one (a reading written from an EdgeX event).
pub fn stored_of(value: &[u8]) -> Option<StoredReading> {
    ciborium::from_reader(value).ok()
}

/// Decodes an engine reading written by this server. Readings written through the native API
/// (not EdgeX events) have no event: they are shown as String readings of their raw value.
pub fn decode(reading: roamkv_engine::Reading) -> Decoded {
    let stored = stored_of(&reading.value).unwrap_or_else(|| StoredReading {
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
