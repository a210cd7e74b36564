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
//! - value = a CBOR [`IndexEntry`]: the event's device and its readings' (resource, origin), as
//!   an array without field names, each origin as its offset from the event's (written since
//!   format 3: `[device, [resource…]]`, or `[device, [resource…], [offset…]]` when a reading's
//!   origin is not the event's); entries of the first form (a map `{d, r}` with every origin
//!   whole: 201 bytes for a 10-reading event where the compact form takes 97) still read.
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

/// The first byte of an entry of each form: an array of 2 or 3, or a map (the first form).
const COMPACT_NAMES: u8 = 0x82;
const COMPACT_OFFSETS: u8 = 0x83;

impl IndexEntry {
    /// The compact form: the readings' origins as offsets from the event's (`event_origin`, the
    /// entry's key time), left out when all are 0 (a device service's usual event).
    pub fn encode(&self, event_origin: i64) -> Result<Vec<u8>, WireError> {
        let names: Vec<&str> = self.readings.iter().map(|(r, _)| r.as_str()).collect();
        let offsets: Vec<i64> = self
            .readings
            .iter()
            .map(|(_, origin)| origin.wrapping_sub(event_origin))
            .collect();
        let mut value = Vec::with_capacity(16 + 12 * self.readings.len());
        let written = if offsets.iter().all(|o| *o == 0) {
            ciborium::into_writer(&(&self.device, names), &mut value)
        } else {
            ciborium::into_writer(&(&self.device, names, offsets), &mut value)
        };
        written.map_err(|e| WireError::Encoding {
            message: format!("encoding an event index entry: {e}"),
        })?;
        Ok(value)
    }

    /// Decodes an entry of either form found under `event_id` at `event_origin`; a value that is
    /// not one is named by the event id.
    pub fn decode(
        event_id: &str,
        event_origin: i64,
        value: &[u8],
    ) -> Result<IndexEntry, WireError> {
        let fail = |e: String| WireError::Encoding {
            message: format!("the index entry of event {event_id} does not decode: {e}"),
        };
        let entry = match value.first() {
            Some(&COMPACT_NAMES) => {
                let (device, names): (String, Vec<String>) =
                    ciborium::from_reader(value).map_err(|e| fail(e.to_string()))?;
                let readings = names.into_iter().map(|r| (r, event_origin)).collect();
                IndexEntry { device, readings }
            }
            Some(&COMPACT_OFFSETS) => {
                let (device, names, offsets): (String, Vec<String>, Vec<i64>) =
                    ciborium::from_reader(value).map_err(|e| fail(e.to_string()))?;
                if names.len() != offsets.len() {
                    return Err(fail(format!(
                        "{} resources and {} origin offsets",
                        names.len(),
                        offsets.len()
                    )));
                }
                let readings = names
                    .into_iter()
                    .zip(offsets)
                    .map(|(r, offset)| (r, event_origin.wrapping_add(offset)))
                    .collect();
                IndexEntry { device, readings }
            }
            _ => ciborium::from_reader(value).map_err(|e| fail(e.to_string()))?,
        };
        Ok(entry)
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
        value: entry.encode(event_origin)?,
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
        let entry = IndexEntry::decode("e1", 7, &r.value).expect("decodes");
        assert_eq!(entry.device, "car-1");
        assert_eq!(
            entry.readings,
            [("speed".to_string(), 7), ("fuel".to_string(), 8)]
        );
        assert_eq!(r.value[0], COMPACT_OFFSETS, "one origin is not the event's");
        assert!(IndexEntry::decode("e1", 7, b"\xff").is_err());
    }

    /// A 10-reading event as a device service sends it (every origin the event's): the entry
    /// is an array of the device and the names, less than half the first form's bytes.
    #[test]
    fn a_device_services_event_takes_its_names_and_little_else() {
        let origin = 1_700_000_000_000_000_000;
        let entry = IndexEntry {
            device: "gw-device-0042".into(),
            readings: (0..10).map(|i| (format!("float-{i}"), origin)).collect(),
        };
        let compact = entry.encode(origin).expect("encodes");
        assert_eq!(compact[0], COMPACT_NAMES);
        assert_eq!(compact.len(), 1 + 15 + 1 + 10 * 8);
        assert_eq!(
            IndexEntry::decode("e", origin, &compact).expect("decodes"),
            entry
        );
        let mut first_form = Vec::new();
        ciborium::into_writer(&entry, &mut first_form).expect("encodes");
        assert_eq!(first_form.len(), 201);
        assert_eq!(
            IndexEntry::decode("e", origin, &first_form).expect("decodes"),
            entry
        );
        // Origins before, after and far from the event's come back whole.
        let spread = IndexEntry {
            device: "d".into(),
            readings: vec![
                ("a".into(), i64::MIN),
                ("b".into(), origin - 1),
                ("c".into(), i64::MAX),
            ],
        };
        let bytes = spread.encode(origin).expect("encodes");
        assert_eq!(
            IndexEntry::decode("e", origin, &bytes).expect("decodes"),
            spread
        );
        // A deleted event's entry: no readings.
        let emptied = IndexEntry {
            device: "d".into(),
            readings: Vec::new(),
        };
        let bytes = emptied.encode(origin).expect("encodes");
        assert_eq!(bytes, [0x82, 0x61, b'd', 0x80]);
        assert_eq!(
            IndexEntry::decode("e", origin, &bytes).expect("decodes"),
            emptied
        );
        // Offsets that do not match the names, and every truncation, are errors.
        let mismatched = {
            let mut v = Vec::new();
            ciborium::into_writer(&("d", vec!["a", "b"], vec![1i64]), &mut v).expect("encodes");
            v
        };
        assert!(IndexEntry::decode("e", origin, &mismatched).is_err());
        for cut in 0..compact.len() {
            assert!(
                IndexEntry::decode("e", origin, &compact[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
