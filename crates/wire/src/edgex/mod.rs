//! EdgeX core-data v3 events in, readings out: an AddEventRequest parsed (JSON or CBOR), checked
//! whole, and mapped onto the engine's keys. The shapes are in `dto`, the stored value in
//! `stored`, the contract's constants in `contract`, a value's check against its type in `value`;
//! all are re-exported here.
//!
//! Mapping (docs/SERVER.md says why):
//! - engine device  = the reading's `deviceName` (equal to the event's),
//! - engine sensor  = the reading's `resourceName`,
//! - engine ts_ns   = the reading's `origin` (ns), exactly,
//! - engine value   = a compact CBOR array (compact.rs; [`StoredReading`] when decoded) with
//!   everything else of the reading and of its event: reading id, valueType, units, the value
//!   itself, tags, and the event's id, origin, profileName and sourceName (the event's tags
//!   ride on its first reading). Events are rebuilt from their readings when queried.

use roamkv_engine::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX};

use crate::error::WireError;
use crate::keyed::KeyedReading;
use crate::names::check_name;

pub mod aggregate;
mod borrowed;
mod compact;
pub mod contract;
mod dto;
pub mod event_index;
pub mod readable;
mod stored;
mod value;

pub use borrowed::{AddEventView, EventView, ReadingView, Text};
use contract::{API_VERSION, VALUE_TYPES};
pub use dto::{AddEventRequest, BinaryValue, Event, Reading};
use stored::keyed_reading;
pub use stored::{
    Decoded, StoredForm, StoredReading, decode, group_events, stored_encoding, stored_form,
    stored_of,
};

/// Where an event arrived from, to check its fields against (the POST route's path).
#[derive(Clone, Copy)]
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
    if let Some(unit) = unit_mistake(origin) {
        return Err(WireError::bad_input(format!(
            "{what} origin {origin} is a time between 2000 and 2100 in {unit}, and a moment of \
             1970 in nanoseconds, which EdgeX origins are: refused rather than stored in 1970"
        )));
    }
    Ok(())
}

/// The years an origin given in the wrong unit lands in when read as that unit.
const PLAUSIBLE_SECONDS: std::ops::Range<i64> = 946_684_800..4_102_444_800; // 2000..2100

/// The unit an origin was likely given in, if it is a time of 2000..2100 in seconds,
/// milliseconds or microseconds: as nanoseconds those are the first weeks of 1970, when no
/// EdgeX device read anything. Any other origin is taken as it is.
fn unit_mistake(origin: i64) -> Option<&'static str> {
    [
        ("seconds", 1i64),
        ("milliseconds", 1_000),
        ("microseconds", 1_000_000),
    ]
    .into_iter()
    .find(|(_, per_second)| {
        (PLAUSIBLE_SECONDS.start * per_second..PLAUSIBLE_SECONDS.end * per_second).contains(&origin)
    })
    .map(|(unit, _)| unit)
}

/// Parses a JSON AddEventRequest borrowing its text from `body` (borrowed.rs: why). Accepts
/// and refuses what [`parse_add_event`] does, in the same words.
pub fn parse_add_event_json(body: &[u8]) -> Result<AddEventView<'_>, WireError> {
    serde_json::from_slice(body)
        .map_err(|e| WireError::bad_input(format!("body is not a JSON AddEventRequest: {e}")))
}

/// Checks an event completely and turns it into engine readings; on any error nothing is
/// returned, so nothing is written.
pub fn event_to_readings(
    request: AddEventView<'_>,
    path: Option<PathNames<'_>>,
    readings_max: usize,
) -> Result<Vec<KeyedReading>, WireError> {
    if *request.api_version != *API_VERSION {
        return Err(WireError::bad_input(format!(
            "apiVersion is {:?}; this server speaks \"{API_VERSION}\"",
            &*request.api_version
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
            r.id = Text(uuid::Uuid::new_v4().to_string().into());
        } else {
            check_uuid("reading id", &r.id).map_err(|e| at(e.into_message()))?;
        }
        // The event's tags ride on its first reading.
        let event_tags = if i == 0 { event.tags.as_deref() } else { None };
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
    event: &EventView<'_>,
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
            ("profileName", path.profile_name, &*event.profile_name),
            ("deviceName", path.device_name, &*event.device_name),
            ("sourceName", path.source_name, &*event.source_name),
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
fn check_reading(event: &EventView<'_>, r: &ReadingView<'_>) -> Result<(), String> {
    if *r.device_name != *event.device_name {
        return Err(format!(
            "deviceName {:?} differs from the event's {:?}",
            &*r.device_name, &*event.device_name
        ));
    }
    check_name("resourceName", &r.resource_name, SENSOR_ID_BYTES_MAX)
        .map_err(WireError::into_message)?;
    check_name("profileName", &r.profile_name, DEVICE_ID_BYTES_MAX)
        .map_err(WireError::into_message)?;
    check_origin("reading", r.origin).map_err(WireError::into_message)?;
    if !VALUE_TYPES.contains(&&*r.value_type) {
        return Err(format!(
            "valueType {:?} is not an EdgeX value type",
            &*r.value_type
        ));
    }
    match (&*r.value_type, &r.value, &r.binary_value, &r.object_value) {
        ("Binary", None, Some(_), None) => {
            if r.media_type.as_deref().is_none_or(str::is_empty) {
                return Err("a Binary reading needs a mediaType".into());
            }
            Ok(())
        }
        ("Object" | "ObjectArray", None, None, Some(_)) => Ok(()),
        // A null reading (go-mod-core-contracts v4 `NewNullReading`: a resource read with no
        // value; `value`, `binaryValue` and `objectValue` null or absent) of any type, as
        // core-data v4 takes it; it comes back without a value, which EdgeX reads as null.
        (_, None, None, None) => Ok(()),
        (t, Some(v), None, None) if !matches!(t, "Binary" | "Object" | "ObjectArray") => {
            value::check_value(t, v)
        }
        (t, ..) => Err(format!(
            "valueType {t} needs exactly one of {}",
            match t {
                "Binary" => "binaryValue (with mediaType)",
                "Object" | "ObjectArray" => "objectValue",
                _ => "value",
            }
        )),
    }
}

/// EdgeX's inclusive [start, end] (ns) as the engine's [from, to).
pub fn inclusive_range(start_ns: i64, end_ns: i64) -> (i64, i64) {
    (start_ns, end_ns.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

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

    /// The readings of `req` parsed from its JSON, borrowing (the HTTP route's way), checked
    /// against those of `req` viewed (CBOR's and the bus's way): the same outcome, the same
    /// words. Readings without an id get a new one each time, so their values are compared
    /// by length.
    fn to_readings(
        req: &AddEventRequest,
        path: Option<PathNames<'_>>,
        readings_max: usize,
    ) -> Result<Vec<KeyedReading>, WireError> {
        let json = serde_json::to_vec(req).expect("json");
        let parsed = parse_add_event_json(&json).expect("parses");
        let from_json = event_to_readings(parsed, path, readings_max);
        let viewed = event_to_readings(req.view(), path, readings_max);
        match (&from_json, &viewed) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.len(), b.len());
                for (a, b) in a.iter().zip(b) {
                    assert_eq!(
                        (&a.device, &a.sensor, a.ts_ns),
                        (&b.device, &b.sensor, b.ts_ns)
                    );
                    assert_eq!(a.value.len(), b.value.len());
                }
            }
            (Err(a), Err(b)) => assert_eq!(a.message(), b.message()),
            _ => panic!("parsed {from_json:?}, viewed {viewed:?}"),
        }
        viewed
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
        let keyed = to_readings(&req, None, 10).expect("valid");
        assert_eq!(keyed.len(), 3);
        assert_eq!(keyed[0].ts_ns, 1602168089665565300);
        // What a reading is stored as reads back, and the owned form writes the same bytes.
        for k in &keyed {
            assert_eq!(
                stored_form(&k.value),
                Some(StoredForm::Compact),
                "{}",
                k.sensor
            );
            let owned = stored_of(&k.value, k.ts_ns).expect("a stored reading");
            let again = stored_encoding(&owned, k.ts_ns, StoredForm::Compact).expect("encode");
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
            let error = to_readings(&req, None, 10).expect_err(needle);
            assert!(
                error.message().contains(needle),
                "{needle}: {}",
                error.message()
            );
        }
        let many: Vec<Value> = (0..11).map(|i| reading("t", (i + 1) * 1_000_000)).collect();
        let error = to_readings(&request(Value::Array(many)), None, 10).expect_err("413");
        assert!(matches!(error, WireError::TooLarge { .. }), "{error:?}");
        let error = to_readings(
            &request(serde_json::json!([reading("t", 5)])),
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
    fn origins_in_the_wrong_unit_are_refused_and_others_taken() {
        assert_eq!(unit_mistake(1_764_000_000), Some("seconds"));
        assert_eq!(unit_mistake(1_764_000_000_000), Some("milliseconds"));
        assert_eq!(unit_mistake(1_764_000_000_000_000), Some("microseconds"));
        for origin in [
            1,
            1_000,
            5_000_000,
            1_764_000_000_000_000_000,
            946_684_799_999_999_999,
        ] {
            assert_eq!(unit_mistake(origin), None, "{origin}");
        }
        let message = check_origin("event", 1_764_000_000_000).expect_err("refused");
        assert!(message.message().contains("milliseconds"), "{message:?}");
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
