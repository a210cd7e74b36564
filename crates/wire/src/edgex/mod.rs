//! EdgeX core-data v3 data shapes (field names as in EdgeX's v3 OpenAPI: AddEventRequest,
//! Event, BaseReading, MultiEventsResponse, ...) and their mapping onto the engine's keys.
//!
//! Mapping (docs/SERVER.md says why):
//! - engine device  = the reading's `deviceName` (equal to the event's),
//! - engine sensor  = the reading's `resourceName`,
//! - engine ts_ns   = the reading's `origin` (ns), exactly,
//! - engine value   = a CBOR map ([`StoredReading`]) with everything else of the reading and
//!   of its event: reading id, exact origin in ns, valueType, units, the value itself, tags,
//!   and the event's id, origin, profileName and sourceName (the event's tags ride on its first
//!   reading). Events are rebuilt from their readings when queried.

use std::collections::BTreeMap;

use base64::Engine as _;
use roamkv_engine::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::WireError;
use crate::keyed::KeyedReading;
use crate::names::check_name;

pub mod contract;

use contract::{API_VERSION, VALUE_TYPES};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddEventRequest {
    pub api_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    pub event: Event,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub id: String,
    pub device_name: String,
    pub profile_name: String,
    pub source_name: String,
    pub origin: i64,
    pub readings: Vec<Reading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub origin: i64,
    pub device_name: String,
    pub resource_name: String,
    pub profile_name: String,
    pub value_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<BinaryValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_value: Option<Value>,
}

/// `binaryValue`: base64 text in JSON (Go's []byte), a byte string in CBOR. Written out as base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryValue(pub Vec<u8>);

impl Serialize for BinaryValue {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for BinaryValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = BinaryValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("base64 text or a byte string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BinaryValue, E> {
                base64::engine::general_purpose::STANDARD
                    .decode(v)
                    .map(BinaryValue)
                    .map_err(|e| E::custom(format!("binaryValue is not base64: {e}")))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<BinaryValue, E> {
                Ok(BinaryValue(v.to_vec()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<BinaryValue, A::Error> {
                let mut bytes = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(BinaryValue(bytes))
            }
        }
        d.deserialize_any(Visitor)
    }
}

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

/// Where an event arrived from, to check its fields against (the POST route's path).
pub struct PathNames<'a> {
    pub profile_name: &'a str,
    pub device_name: &'a str,
    pub source_name: &'a str,
}

/// Parses an AddEventRequest from JSON or CBOR.
pub fn parse_add_event(body: &[u8], cbor: bool) -> Result<AddEventRequest, WireError> {
    if cbor {
        ciborium::from_reader(body)
            .map_err(|e| WireError::bad_input(format!("body is not a CBOR AddEventRequest: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| WireError::bad_input(format!("body is not a JSON AddEventRequest: {e}")))
    }
}

fn check_uuid(what: &str, id: &str) -> Result<(), WireError> {
    uuid::Uuid::parse_str(id)
        .map(|_| ())
        .map_err(|_| WireError::bad_input(format!("{what} {id:?} is not a UUID")))
}

fn check_origin(what: &str, origin: i64) -> Result<(), WireError> {
    if origin <= 0 {
        return Err(WireError::bad_input(format!(
            "{what} origin {origin} is not a positive Unix time in nanoseconds"
        )));
    }
    Ok(())
}

/// Checks an event completely and turns it into engine readings; on any error nothing is
/// returned, so nothing is written.
pub fn event_to_readings(
    request: AddEventRequest,
    path: Option<PathNames<'_>>,
    readings_max: usize,
) -> Result<Vec<KeyedReading>, WireError> {
    if request.api_version != API_VERSION {
        return Err(WireError::bad_input(format!(
            "apiVersion is {:?}; this server speaks \"{API_VERSION}\"",
            request.api_version
        )));
    }
    let mut event = request.event;
    check_event(&event, path, readings_max)?;
    let readings = std::mem::take(&mut event.readings);
    let mut out = Vec::with_capacity(readings.len());
    for (i, mut r) in readings.into_iter().enumerate() {
        let at = |msg: String| WireError::bad_input(format!("reading {i}: {msg}"));
        check_reading(&event, &r).map_err(at)?;
        if r.id.is_empty() {
            r.id = uuid::Uuid::new_v4().to_string();
        } else {
            check_uuid("reading id", &r.id).map_err(|e| at(e.into_message()))?;
        }
        // The event's tags ride on its first reading.
        let event_tags = if i == 0 { event.tags.as_ref() } else { None };
        out.push(keyed_reading(&event, r, event_tags)?);
    }
    check_one_per_origin(&out)?;
    Ok(out)
}

/// The store keeps one reading per (device, resource, origin): two in one event with the same
/// origin, to the nanosecond, would silently become one. Checked on the finished batch (one
/// sort, no per-reading copies). The same reading posted again in another request replaces
/// itself: a retry is stored once.
fn check_one_per_origin(readings: &[KeyedReading]) -> Result<(), WireError> {
    let mut keys: Vec<(&str, i64, usize)> = readings
        .iter()
        .enumerate()
        .map(|(i, r)| (r.sensor.as_str(), r.ts_ns, i))
        .collect();
    keys.sort_unstable();
    match keys
        .windows(2)
        .find(|w| (w[0].0, w[0].1) == (w[1].0, w[1].1))
    {
        Some(w) => Err(WireError::bad_input(format!(
            "reading {}: a second reading of resource {:?} with the same origin: the store \
             keeps one reading per device, resource and origin (nanosecond)",
            w[1].2, w[1].0
        ))),
        None => Ok(()),
    }
}

/// The event's own fields, against the path it was posted to and the batch limit.
fn check_event(
    event: &Event,
    path: Option<PathNames<'_>>,
    readings_max: usize,
) -> Result<(), WireError> {
    check_uuid("event id", &event.id)?;
    // Profile and source names are no engine ids, but are held to the device id's rule.
    check_name("event deviceName", &event.device_name, DEVICE_ID_BYTES_MAX)?;
    check_name(
        "event profileName",
        &event.profile_name,
        DEVICE_ID_BYTES_MAX,
    )?;
    check_name("event sourceName", &event.source_name, DEVICE_ID_BYTES_MAX)?;
    check_origin("event", event.origin)?;
    if let Some(path) = path {
        for (what, in_path, in_event) in [
            ("profileName", path.profile_name, &event.profile_name),
            ("deviceName", path.device_name, &event.device_name),
            ("sourceName", path.source_name, &event.source_name),
        ] {
            if in_path != in_event {
                return Err(WireError::bad_input(format!(
                    "{what} {in_path:?} in the path does not match the event's {in_event:?}"
                )));
            }
        }
    }
    if event.readings.is_empty() {
        return Err(WireError::bad_input("event has no readings"));
    }
    if event.readings.len() > readings_max {
        return Err(WireError::too_large(format!(
            "event has {} readings; the limit is {readings_max}",
            event.readings.len()
        )));
    }
    Ok(())
}

/// One reading's names, origin, and that its value field matches its valueType.
fn check_reading(event: &Event, r: &Reading) -> Result<(), String> {
    if r.device_name != event.device_name {
        return Err(format!(
            "deviceName {:?} differs from the event's {:?}",
            r.device_name, event.device_name
        ));
    }
    check_name("resourceName", &r.resource_name, SENSOR_ID_BYTES_MAX)
        .map_err(WireError::into_message)?;
    check_name("profileName", &r.profile_name, DEVICE_ID_BYTES_MAX)
        .map_err(WireError::into_message)?;
    check_origin("reading", r.origin).map_err(WireError::into_message)?;
    if !VALUE_TYPES.contains(&r.value_type.as_str()) {
        return Err(format!(
            "valueType {:?} is not an EdgeX value type",
            r.value_type
        ));
    }
    match (
        r.value_type.as_str(),
        &r.value,
        &r.binary_value,
        &r.object_value,
    ) {
        ("Binary", None, Some(_), None) => {
            if r.media_type.as_deref().is_none_or(str::is_empty) {
                return Err("a Binary reading needs a mediaType".into());
            }
            Ok(())
        }
        ("Object", None, None, Some(_)) => Ok(()),
        (t, Some(_), None, None) if t != "Binary" && t != "Object" => Ok(()),
        (t, ..) => Err(format!(
            "valueType {t} needs exactly one of {}",
            match t {
                "Binary" => "binaryValue (with mediaType)",
                "Object" => "objectValue",
                _ => "value",
            }
        )),
    }
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
fn keyed_reading(
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

/// Decodes an engine reading written by this server. Readings written through the native API
/// (not EdgeX events) have no event: they are shown as String readings of their raw value.
pub fn decode(reading: roamkv_engine::Reading) -> Decoded {
    let stored = ciborium::from_reader::<StoredReading, _>(reading.value.as_slice())
        .unwrap_or_else(|_| StoredReading {
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

/// EdgeX's inclusive [start, end] (ns) as the engine's [from, to).
pub fn inclusive_range(start_ns: i64, end_ns: i64) -> (i64, i64) {
    (start_ns, end_ns.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(readings: Value) -> AddEventRequest {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v3",
            "event": {
                "id": "040bd523-ec33-440d-9d72-e5813a465f37",
                "deviceName": "device-001",
                "profileName": "profile-001",
                "sourceName": "source-1",
                "origin": 1602168089665565300i64,
                "tags": {"Gateway": "HoustonStore-000123"},
                "readings": readings,
            }
        }))
        .expect("request")
    }

    fn reading(resource: &str, origin: i64) -> Value {
        serde_json::json!({
            "deviceName": "device-001", "resourceName": resource, "profileName": "profile-001",
            "origin": origin, "valueType": "Float32", "value": "39.5"
        })
    }

    #[test]
    fn an_event_round_trips_through_the_stored_form() {
        let req = request(serde_json::json!([
            reading("temp", 1602168089665565300),
            {"deviceName": "device-001", "resourceName": "image", "profileName": "profile-001",
             "origin": 1602168089665565301i64, "valueType": "Binary",
             "binaryValue": "AAEC", "mediaType": "image/png"},
            {"deviceName": "device-001", "resourceName": "obj", "profileName": "profile-001",
             "origin": 1602168089665565302i64, "valueType": "Object",
             "objectValue": {"a": [1, 2.5, "x"]}},
        ]));
        let keyed = event_to_readings(req.clone(), None, 10).expect("valid");
        assert_eq!(keyed.len(), 3);
        assert_eq!(keyed[0].ts_ns, 1602168089665565300);
        // The borrowed form writes exactly what the owned StoredReading writes.
        for k in &keyed {
            let owned: StoredReading =
                ciborium::from_reader(k.value.as_slice()).expect("a stored reading");
            let mut again = Vec::new();
            ciborium::into_writer(&owned, &mut again).expect("encode");
            assert_eq!(again, k.value, "{}", k.sensor);
        }
        let decoded: Vec<Decoded> = keyed
            .into_iter()
            .map(|k| {
                decode(roamkv_engine::Reading {
                    device: k.device,
                    sensor: k.sensor,
                    ts_ns: k.ts_ns,
                    value: k.value,
                })
            })
            .collect();
        let events = group_events(&decoded);
        assert_eq!(events.len(), 1);
        let event = &events[0];
        assert_eq!(event.id, req.event.id);
        assert_eq!(event.origin, req.event.origin);
        assert_eq!(event.tags, req.event.tags);
        let image = event
            .readings
            .iter()
            .find(|r| r.resource_name == "image")
            .expect("image");
        assert_eq!(image.binary_value, Some(BinaryValue(vec![0, 1, 2])));
        assert_eq!(image.origin, 1602168089665565301);
        let obj = event
            .readings
            .iter()
            .find(|r| r.resource_name == "obj")
            .expect("obj");
        assert_eq!(
            obj.object_value,
            Some(serde_json::json!({"a": [1, 2.5, "x"]}))
        );
        assert!(
            event
                .readings
                .iter()
                .all(|r| uuid::Uuid::parse_str(&r.id).is_ok())
        );
    }

    #[test]
    fn bad_events_are_refused_with_a_reason() {
        let cases: Vec<(AddEventRequest, &str)> = vec![
            (request(serde_json::json!([])), "no readings"),
            (
                {
                    let mut r = request(serde_json::json!([reading("t", 5)]));
                    r.api_version = "v2".into();
                    r
                },
                "apiVersion",
            ),
            (
                {
                    let mut r = request(serde_json::json!([reading("t", 5)]));
                    r.event.id = "not-a-uuid".into();
                    r
                },
                "UUID",
            ),
            (request(serde_json::json!([reading("t", -5)])), "origin"),
            (request(serde_json::json!([reading("a\u{0}b", 5)])), "NUL"),
            (
                request(serde_json::json!([
                    reading("t", 5_000_001),
                    reading("t", 5_000_001)
                ])),
                "same origin",
            ),
            (
                request(
                    serde_json::json!([{"deviceName": "other", "resourceName": "t",
                    "profileName": "p", "origin": 5, "valueType": "Int8", "value": "1"}]),
                ),
                "differs",
            ),
            (
                request(
                    serde_json::json!([{"deviceName": "device-001", "resourceName": "t",
                    "profileName": "p", "origin": 5, "valueType": "Binary", "value": "1"}]),
                ),
                "binaryValue",
            ),
            (
                request(
                    serde_json::json!([{"deviceName": "device-001", "resourceName": "t",
                    "profileName": "p", "origin": 5, "valueType": "Weird", "value": "1"}]),
                ),
                "valueType",
            ),
        ];
        for (req, needle) in cases {
            let error = event_to_readings(req, None, 10).expect_err(needle);
            assert!(
                error.message().contains(needle),
                "{needle}: {}",
                error.message()
            );
        }
        let many: Vec<Value> = (0..11).map(|i| reading("t", (i + 1) * 1_000_000)).collect();
        let error = event_to_readings(request(Value::Array(many)), None, 10).expect_err("413");
        assert!(matches!(error, WireError::TooLarge { .. }), "{error:?}");
        let error = event_to_readings(
            request(serde_json::json!([reading("t", 5)])),
            Some(PathNames {
                profile_name: "profile-001",
                device_name: "device-002",
                source_name: "source-1",
            }),
            10,
        )
        .expect_err("path mismatch");
        assert!(error.message().contains("path"), "{}", error.message());
    }

    #[test]
    fn cbor_events_parse_and_binary_values_are_byte_strings() {
        let req = request(serde_json::json!([reading("t", 5)]));
        let mut body = Vec::new();
        ciborium::into_writer(&req, &mut body).expect("cbor");
        let parsed = parse_add_event(&body, true).expect("parse");
        assert_eq!(parsed.event, req.event);
        assert!(parse_add_event(b"\xff\x00", true).is_err());
        assert!(parse_add_event(b"{", false).is_err());
    }

    #[test]
    fn cbor_binary_values_may_be_byte_strings_as_edgex_sends_them() {
        use ciborium::Value as C;
        let text = |t: &str| C::Text(t.into());
        let reading = C::Map(vec![
            (text("deviceName"), text("cam")),
            (text("resourceName"), text("image")),
            (text("profileName"), text("p")),
            (
                text("origin"),
                C::Integer(1_700_000_000_000_000_000i64.into()),
            ),
            (text("valueType"), text("Binary")),
            (text("mediaType"), text("image/png")),
            (text("binaryValue"), C::Bytes(vec![0x89, b'P', b'N', b'G'])),
        ]);
        let request = C::Map(vec![
            (text("apiVersion"), text("v3")),
            (
                text("event"),
                C::Map(vec![
                    (text("id"), text("040bd523-ec33-440d-9d72-e5813a465f37")),
                    (text("deviceName"), text("cam")),
                    (text("profileName"), text("p")),
                    (text("sourceName"), text("s")),
                    (
                        text("origin"),
                        C::Integer(1_700_000_000_000_000_000i64.into()),
                    ),
                    (text("readings"), C::Array(vec![reading])),
                ]),
            ),
        ]);
        let mut body = Vec::new();
        ciborium::into_writer(&request, &mut body).expect("cbor");
        let parsed = parse_add_event(&body, true).expect("parse");
        assert_eq!(
            parsed.event.readings[0].binary_value,
            Some(BinaryValue(vec![0x89, b'P', b'N', b'G']))
        );
    }

    #[test]
    fn inclusive_ranges_end_one_nanosecond_later() {
        assert_eq!(
            inclusive_range(1_999_999, 3_000_000),
            (1_999_999, 3_000_001)
        );
        assert_eq!(inclusive_range(0, i64::MAX), (0, i64::MAX));
    }
}
