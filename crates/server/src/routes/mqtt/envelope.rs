//! The EdgeX MessageEnvelope a device service publishes, and the names its topic carries.
//! v3 carries the AddEventRequest base64-encoded in `payload` (JSON or CBOR per
//! `contentType`), v4 carries it as an object.

use base64::Engine as _;
use roamkv_wire::edgex::{self, AddEventRequest};
use serde::Deserialize;

use crate::http::error::ApiError;

/// Where EdgeX publishes events: edgex/events/device/{service}/{profile}/{device}/{source}.
const EDGEX_EVENT_TOPIC_PREFIX: &str = "edgex/events/device/";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageEnvelope {
    #[serde(default)]
    content_type: Option<String>,
    payload: Payload,
}

/// An envelope's payload, read in the envelope's one pass: v4's object straight into the
/// request (not through a `serde_json::Value` first: that detour was ~7 % of the bus's CPU),
/// v3's base64 text kept for decoding once `contentType` is known (it may come after it).
enum Payload {
    Base64(String),
    Event(Box<AddEventRequest>),
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Payload, D::Error> {
        struct PayloadVisitor;
        impl<'de> serde::de::Visitor<'de> for PayloadVisitor {
            type Value = Payload;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("base64 text (v3) or an AddEventRequest object (v4)")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Payload, E> {
                Ok(Payload::Base64(text.to_owned()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Payload, A::Error> {
                let object = serde::de::value::MapAccessDeserializer::new(map);
                AddEventRequest::deserialize(object).map(|r| Payload::Event(Box::new(r)))
            }
        }
        deserializer.deserialize_any(PayloadVisitor)
    }
}

/// Decodes an envelope into the event it carries.
pub fn parse_envelope(bytes: &[u8]) -> Result<AddEventRequest, ApiError> {
    let envelope: MessageEnvelope = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("message is not an EdgeX MessageEnvelope: {e}"))
    })?;
    let cbor = envelope
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/cbor"));
    match envelope.payload {
        Payload::Base64(b64) => {
            let payload = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| {
                    ApiError::bad_request(format!("envelope payload is not base64: {e}"))
                })?;
            Ok(edgex::parse_add_event(&payload, cbor)?)
        }
        Payload::Event(request) => Ok(*request),
    }
}

/// The profile/device/source levels of an EdgeX event topic, when the topic has that form.
pub(super) fn topic_names(topic: &str) -> Option<(&str, &str, &str)> {
    let rest = topic.strip_prefix(EDGEX_EVENT_TOPIC_PREFIX)?;
    let levels: Vec<&str> = rest.split('/').collect();
    match levels.as_slice() {
        [_service, profile, device, source] => Some((profile, device, source)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    fn event_json() -> Value {
        serde_json::json!({
            "apiVersion": "v3",
            "event": {
                "id": "040bd523-ec33-440d-9d72-e5813a465f37",
                "deviceName": "d", "profileName": "p", "sourceName": "s", "origin": 5,
                "readings": [{"deviceName": "d", "resourceName": "r", "profileName": "p",
                              "origin": 5, "valueType": "Int8", "value": "1"}]
            }
        })
    }

    #[test]
    fn v3_and_v4_envelopes_carry_events() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(event_json().to_string());
        let v3 = serde_json::json!({"apiVersion": "v3", "contentType": "application/json", "payload": b64});
        let v4 = serde_json::json!({"apiVersion": "v3", "contentType": "application/json", "payload": event_json()});
        for envelope in [v3, v4] {
            let request = parse_envelope(envelope.to_string().as_bytes()).expect("event");
            assert_eq!(request.event.device_name, "d");
        }
        assert!(parse_envelope(b"hello").is_err());
        assert!(parse_envelope(br#"{"payload": 5}"#).is_err());
        assert!(parse_envelope(br#"{"payload": "%%%"}"#).is_err());
        assert!(parse_envelope(br#"{"payload": {"apiVersion": "v3"}}"#).is_err());
        assert!(parse_envelope(br#"{"payload": null}"#).is_err());
    }

    #[test]
    fn a_v3_payload_is_decoded_by_the_content_type_that_follows_it() {
        let mut cbor = Vec::new();
        ciborium::into_writer(&event_json(), &mut cbor).expect("CBOR");
        let b64 = base64::engine::general_purpose::STANDARD.encode(cbor);
        let envelope = format!(r#"{{"payload":"{b64}","contentType":"application/cbor"}}"#);
        let request = parse_envelope(envelope.as_bytes()).expect("event");
        assert_eq!(request.event.device_name, "d");
    }

    #[test]
    fn edgex_topics_name_profile_device_and_source() {
        assert_eq!(
            topic_names("edgex/events/device/svc/prof/dev/src"),
            Some(("prof", "dev", "src"))
        );
        assert_eq!(topic_names("edgex/events/device/svc/prof"), None);
        assert_eq!(topic_names("other/topic"), None);
    }
}
