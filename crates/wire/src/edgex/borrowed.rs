//! An AddEventRequest borrowed from the bytes it was parsed from: what the ingest path checks
//! and stores. `dto`'s owned shapes copy every name, id and value into a `String` of its own
//! (about ten allocations per reading); here a JSON string without escapes is a slice of the
//! request body, and only what must be owned (an escaped string, tags, an object or binary
//! value) is. The fields, their names and what each accepts are `dto`'s, one for one; a
//! CBOR request (ciborium reads into owned values only) and a bus message are parsed into
//! `dto`'s shapes and viewed with [`AddEventRequest::view`].
//!
//! Why: the owned parse was the largest part of a 10-reading event's own cost in the server
//! (docs/BENCHMARKS.md, "HTTP ingest: the JSON event's own cost").

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::dto::{AddEventRequest, BinaryValue, Event, Reading};

/// Text that is borrowed when it can be (a JSON string without escapes), owned otherwise.
/// It accepts what a `String` field accepts, with the same words when it refuses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(text: &'a str) -> Text<'a> {
        Text(Cow::Borrowed(text))
    }
}

impl Text<'_> {
    pub fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                // A `String`'s words (serde's StringVisitor), so that errors read the same.
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Text<'de>, E> {
                match std::str::from_utf8(v) {
                    Ok(s) => Ok(Text(Cow::Owned(s.to_owned()))),
                    Err(_) => Err(E::invalid_value(serde::de::Unexpected::Bytes(v), &self)),
                }
            }
        }
        d.deserialize_string(Visitor)
    }
}

/// `dto::AddEventRequest`, borrowed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddEventView<'a> {
    #[serde(borrow)]
    pub api_version: Text<'a>,
    #[serde(default, borrow)]
    pub request_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub event: EventView<'a>,
}

/// `dto::Event`, borrowed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView<'a> {
    #[serde(default, borrow)]
    pub api_version: Option<Text<'a>>,
    #[serde(borrow)]
    pub id: Text<'a>,
    #[serde(borrow)]
    pub device_name: Text<'a>,
    #[serde(borrow)]
    pub profile_name: Text<'a>,
    #[serde(borrow)]
    pub source_name: Text<'a>,
    pub origin: i64,
    #[serde(borrow)]
    pub readings: Vec<ReadingView<'a>>,
    #[serde(default)]
    pub tags: Option<Cow<'a, Map<String, Value>>>,
}

/// `dto::Reading`, borrowed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadingView<'a> {
    #[serde(default, borrow)]
    pub id: Text<'a>,
    pub origin: i64,
    #[serde(borrow)]
    pub device_name: Text<'a>,
    #[serde(borrow)]
    pub resource_name: Text<'a>,
    #[serde(borrow)]
    pub profile_name: Text<'a>,
    #[serde(borrow)]
    pub value_type: Text<'a>,
    #[serde(default, borrow)]
    pub units: Option<Text<'a>>,
    #[serde(default)]
    pub tags: Option<Cow<'a, Map<String, Value>>>,
    #[serde(default, borrow)]
    pub value: Option<Text<'a>>,
    #[serde(default)]
    pub binary_value: Option<Cow<'a, BinaryValue>>,
    #[serde(default, borrow)]
    pub media_type: Option<Text<'a>>,
    #[serde(default)]
    pub object_value: Option<Cow<'a, Value>>,
}

fn text(s: &str) -> Text<'_> {
    Text(Cow::Borrowed(s))
}

fn optional(s: &Option<String>) -> Option<Text<'_>> {
    s.as_deref().map(text)
}

impl AddEventRequest {
    /// This request, borrowed (a CBOR request, a bus message: parsed owned, checked as a view).
    pub fn view(&self) -> AddEventView<'_> {
        AddEventView {
            api_version: text(&self.api_version),
            request_id: optional(&self.request_id),
            event: self.event.view(),
        }
    }
}

impl Event {
    fn view(&self) -> EventView<'_> {
        EventView {
            api_version: optional(&self.api_version),
            id: text(&self.id),
            device_name: text(&self.device_name),
            profile_name: text(&self.profile_name),
            source_name: text(&self.source_name),
            origin: self.origin,
            readings: self.readings.iter().map(Reading::view).collect(),
            tags: self.tags.as_ref().map(Cow::Borrowed),
        }
    }
}

impl Reading {
    fn view(&self) -> ReadingView<'_> {
        ReadingView {
            id: text(&self.id),
            origin: self.origin,
            device_name: text(&self.device_name),
            resource_name: text(&self.resource_name),
            profile_name: text(&self.profile_name),
            value_type: text(&self.value_type),
            units: optional(&self.units),
            tags: self.tags.as_ref().map(Cow::Borrowed),
            value: optional(&self.value),
            binary_value: self.binary_value.as_ref().map(Cow::Borrowed),
            media_type: optional(&self.media_type),
            object_value: self.object_value.as_ref().map(Cow::Borrowed),
        }
    }
}
