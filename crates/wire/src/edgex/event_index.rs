//! The index of event ids: what finds an event by its id (`GET`/`DELETE /event/id/{id}`) in
//! one engine lookup instead of a read of the whole store.
//!
//! An event is stored as its readings, keyed by (device, resource, origin); its id is only
//! inside their values. The index adds one engine reading per event, written in the event's own
//! batch (so after a crash both are there or neither), on an internal device:
//!
//! - device `INDEX_DEVICE` (U+0001 first: no client name can be it, `names::check_not_internal`),
//! - sensor = the event id (a UUID, 36 bytes),
//! - ts_ns = the event's origin (so that retention trims the index with the readings' ages),
//! - value = a CBOR [`IndexEntry`]: the event's device and its readings' (resource, origin).
//!
//! A lookup reads the entry, then each reading by its key, and keeps those whose stored event
//! id is the one asked for (a reading replaced since, or a departed device, is not the event's
//! any more). Deleting an event overwrites its readings with [`DELETED_READING`] and its entry
//! with one listing no readings: the keys stay until retention or a departure takes them, as
//! core-data's PostgreSQL store marks rows deleted.

use serde::{Deserialize, Serialize};

use crate::error::WireError;
use crate::keyed::KeyedReading;

/// The engine device that holds the index.
pub const INDEX_DEVICE: &str = "\u{1}edgex.event-ids";

/// What a deleted reading's value is overwritten with: the CBOR map `{"deleted": true}`. The
/// server's reads skip it ([`is_deleted`]); a stored reading never encodes to it (it has no
/// `deleted` field).
pub const DELETED_READING: &[u8] = &[0xA1, 0x67, b'd', b'e', b'l', b'e', b't', b'e', b'd', 0xF5];

/// Whether a stored value is a deleted reading's.
pub fn is_deleted(value: &[u8]) -> bool {
    value == DELETED_READING
}

/// One event's entry (CBOR; short names, it is per event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// The event's device.
    #[serde(rename = "d")]
    pub device: String,
    /// The event's readings as (resource, origin): their keys. Empty: the event was deleted.
    #[serde(rename = "r")]
    pub readings: Vec<(String, i64)>,
}

impl IndexEntry {
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        let mut value = Vec::with_capacity(32 + 24 * self.readings.len());
        ciborium::into_writer(self, &mut value).map_err(|e| WireError::Encoding {
            message: format!("encoding an event index entry: {e}"),
        })?;
        Ok(value)
    }

    /// Decodes an entry; a value that is not one is named by the event id it was found under.
    pub fn decode(event_id: &str, value: &[u8]) -> Result<IndexEntry, WireError> {
        ciborium::from_reader(value).map_err(|e| WireError::Encoding {
            message: format!("the index entry of event {event_id} does not decode: {e}"),
        })
    }
}

/// The index reading of an event (`readings`: its checked readings, all of `device`).
pub fn index_reading(
    event_id: &str,
    event_origin: i64,
    device: &str,
    readings: &[KeyedReading],
) -> Result<KeyedReading, WireError> {
    let entry = IndexEntry {
        device: device.to_string(),
        readings: readings
            .iter()
            .map(|r| (r.sensor.clone(), r.ts_ns))
            .collect(),
    };
    Ok(KeyedReading {
        device: INDEX_DEVICE.to_string(),
        sensor: event_id.to_string(),
        ts_ns: event_origin,
        value: entry.encode()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deleted_marker_is_the_cbor_it_says_and_no_stored_reading() {
        let mut encoded = Vec::new();
        ciborium::into_writer(&serde_json::json!({"deleted": true}), &mut encoded).expect("encode");
        assert_eq!(encoded, DELETED_READING);
        assert!(is_deleted(DELETED_READING));
        assert!(!is_deleted(b"deleted"));
    }

    #[test]
    fn an_entry_names_the_device_and_every_reading_key() {
        let reading = |sensor: &str, ts_ns: i64| KeyedReading {
            device: "car-1".into(),
            sensor: sensor.into(),
            ts_ns,
            value: Vec::new(),
        };
        let r = index_reading("e1", 7, "car-1", &[reading("speed", 7), reading("fuel", 8)])
            .expect("index reading");
        assert_eq!(
            (r.device.as_str(), r.sensor.as_str(), r.ts_ns),
            (INDEX_DEVICE, "e1", 7)
        );
        let entry = IndexEntry::decode("e1", &r.value).expect("decodes");
        assert_eq!(entry.device, "car-1");
        assert_eq!(
            entry.readings,
            [("speed".to_string(), 7), ("fuel".to_string(), 8)]
        );
        assert!(IndexEntry::decode("e1", b"\xff").is_err());
    }
}
