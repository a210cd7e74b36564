//! EdgeX core-data v3 DTOs, field for field as EdgeX's v3 OpenAPI names them (AddEventRequest,
//! Event, BaseReading): what arrives in a POST or on the MQTT bus, and what the query routes
//! answer, and the stored reading's fields (`StoredReading`). Shapes only; the checks are in
//! `edgex` and the stored forms in `edgex::stored` and `edgex::compact`.

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

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

/// A stored EdgeX reading, owned: what a value decodes to in either form (`edgex::StoredForm`).
/// Its serde derive is the first form's map (short field names: it is per reading).
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
