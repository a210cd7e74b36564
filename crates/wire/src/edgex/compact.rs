//! The compact stored reading: how an EdgeX reading is stored since format 3 (docs/FORMAT.md,
//! "The server's records and EdgeX readings in the engine"). A CBOR array of 7 or 8 items, no
//! field names:
//!
//! ```text
//! [0] event id        bstr(16) when a lowercase hyphenated UUID, else tstr
//! [1] event origin    int: the event's origin minus the reading's
//! [2] profileName     tstr
//! [3] sourceName      tstr
//! [4] reading id      bstr(16) or tstr, as [0]
//! [5] valueType       uint: its place in `VALUE_TYPES`, else tstr
//! [6] value           tstr, or null when the reading has none (Binary, Object)
//! [7] the rest        map, only when a reading has any of: "o" its origin when it is not the
//!                     key's timestamp, "u" units, "b" binaryValue, "m" mediaType,
//!                     "ov" objectValue, "rt" its tags, "et" its event's tags
//! ```
//!
//! Why: the first form (a CBOR map with both ids as 36-character text, the names of every
//! field and the origin the key already holds) took 178 bytes for a typical reading; this one
//! about 75, in the log and in the lower tier. Values of the first form still read (stored.rs
//! tells them apart by their first byte: a map, not an array).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::contract::VALUE_TYPES;
use super::dto::StoredReading;
use crate::error::WireError;

/// Items of a compact reading without, and with, the map of the rest.
const ITEMS: u64 = 7;
const ITEMS_WITH_REST: u64 = 8;

/// CBOR's major types (RFC 8949 §3.1) and its null.
const UINT: u8 = 0;
const NINT: u8 = 1;
const BYTES: u8 = 2;
const TEXT: u8 = 3;
const ARRAY: u8 = 4;
const NULL: u8 = 0xf6;

/// A reading's fields, borrowed: what the compact form is written from.
pub(super) struct Fields<'a> {
    pub event_id: &'a str,
    pub event_origin: i64,
    pub profile_name: &'a str,
    pub source_name: &'a str,
    pub id: &'a str,
    pub origin: i64,
    pub value_type: &'a str,
    pub value: Option<&'a str>,
    pub rest: Rest<'a>,
}

/// The fields most readings lack (item [7]).
#[derive(Serialize, Default)]
pub(super) struct Rest<'a> {
    #[serde(rename = "o", skip_serializing_if = "Option::is_none")]
    pub origin: Option<i64>,
    #[serde(rename = "u", skip_serializing_if = "Option::is_none")]
    pub units: Option<&'a str>,
    #[serde(rename = "b", skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<&'a serde_bytes::Bytes>,
    #[serde(rename = "m", skip_serializing_if = "Option::is_none")]
    pub media_type: Option<&'a str>,
    #[serde(rename = "ov", skip_serializing_if = "Option::is_none")]
    pub object_value: Option<&'a Value>,
    #[serde(rename = "rt", skip_serializing_if = "Option::is_none")]
    pub tags: Option<&'a Map<String, Value>>,
    #[serde(rename = "et", skip_serializing_if = "Option::is_none")]
    pub event_tags: Option<&'a Map<String, Value>>,
}

impl Rest<'_> {
    fn is_empty(&self) -> bool {
        self.origin.is_none()
            && self.units.is_none()
            && self.binary_value.is_none()
            && self.media_type.is_none()
            && self.object_value.is_none()
            && self.tags.is_none()
            && self.event_tags.is_none()
    }
}

/// Item [7] as read back (empty when the reading has none).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestOwned {
    #[serde(rename = "o", default)]
    origin: Option<i64>,
    #[serde(rename = "u", default)]
    units: Option<String>,
    #[serde(rename = "b", default)]
    binary_value: Option<serde_bytes::ByteBuf>,
    #[serde(rename = "m", default)]
    media_type: Option<String>,
    #[serde(rename = "ov", default)]
    object_value: Option<Value>,
    #[serde(rename = "rt", default)]
    tags: Option<Map<String, Value>>,
    #[serde(rename = "et", default)]
    event_tags: Option<Map<String, Value>>,
}

impl<'a> Fields<'a> {
    /// The fields of an owned stored reading.
    pub fn of(s: &'a StoredReading) -> Fields<'a> {
        Fields {
            event_id: &s.event_id,
            event_origin: s.event_origin,
            profile_name: &s.profile_name,
            source_name: &s.source_name,
            id: &s.id,
            origin: s.origin,
            value_type: &s.value_type,
            value: s.value.as_deref(),
            rest: Rest {
                origin: None,
                units: s.units.as_deref(),
                binary_value: s
                    .binary_value
                    .as_ref()
                    .map(|b| serde_bytes::Bytes::new(b.as_slice())),
                media_type: s.media_type.as_deref(),
                object_value: s.object_value.as_ref(),
                tags: s.tags.as_ref(),
                event_tags: s.event_tags.as_ref(),
            },
        }
    }
}

/// Writes `f` in the compact form, for a reading keyed at `key_ts_ns`.
pub(super) fn encode(
    mut f: Fields<'_>,
    key_ts_ns: i64,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    f.rest.origin = (f.origin != key_ts_ns).then_some(f.origin);
    let with_rest = !f.rest.is_empty();
    head(out, ARRAY, if with_rest { ITEMS_WITH_REST } else { ITEMS });
    id(out, f.event_id);
    int(out, f.event_origin.wrapping_sub(f.origin));
    text(out, f.profile_name);
    text(out, f.source_name);
    id(out, f.id);
    match VALUE_TYPES.iter().position(|t| *t == f.value_type) {
        Some(code) => head(out, UINT, code as u64),
        None => text(out, f.value_type),
    }
    match f.value {
        Some(v) => text(out, v),
        None => out.push(NULL),
    }
    if with_rest {
        ciborium::into_writer(&f.rest, &mut *out).map_err(|e| WireError::Encoding {
            message: format!("encoding a reading: {e}"),
        })?;
    }
    Ok(())
}

/// Whether `value` begins as a compact reading does (an array of 7 or 8 items).
pub(super) fn is_compact(value: &[u8]) -> bool {
    let array_of = |items: u64| (ARRAY << 5) | items as u8;
    value
        .first()
        .is_some_and(|&b| b == array_of(ITEMS) || b == array_of(ITEMS_WITH_REST))
}

/// The leading items of a compact reading, borrowed: what an aggregate reads.
pub(super) struct Head<'a> {
    pub event_id: IdRef<'a>,
    /// The event's origin minus the reading's (item [1]).
    event_origin_delta: i64,
    pub profile_name: &'a str,
    pub source_name: &'a str,
    pub id: IdRef<'a>,
    pub value_type: &'a str,
    pub value: Option<&'a str>,
    /// The bytes of item [7], if present.
    rest: Option<&'a [u8]>,
    /// The reading's origin: the key's timestamp unless item [7] says otherwise.
    origin_from_key: i64,
}

/// An id as stored: 16 bytes of a UUID, or text.
pub(super) enum IdRef<'a> {
    Uuid([u8; 16]),
    Text(&'a str),
}

impl IdRef<'_> {
    fn to_text(&self) -> String {
        match self {
            IdRef::Uuid(b) => uuid::Uuid::from_bytes(*b).hyphenated().to_string(),
            IdRef::Text(t) => (*t).to_string(),
        }
    }
}

/// Reads the leading items of a compact reading keyed at `key_ts_ns`; None if it is not one.
pub(super) fn head_of(bytes: &[u8], key_ts_ns: i64) -> Option<Head<'_>> {
    let mut c = Cursor { b: bytes, at: 0 };
    let items = match c.head()? {
        (ARRAY, n) if n == ITEMS || n == ITEMS_WITH_REST => n,
        _ => return None,
    };
    let event_id = c.id()?;
    let event_origin_delta = c.int()?;
    let profile_name = c.text()?;
    let source_name = c.text()?;
    let id = c.id()?;
    let value_type = match c.peek_major()? {
        UINT => *VALUE_TYPES.get(usize::try_from(c.head()?.1).ok()?)?,
        _ => c.text()?,
    };
    let value = if c.b.get(c.at) == Some(&NULL) {
        c.at += 1;
        None
    } else {
        Some(c.text()?)
    };
    let rest = if items == ITEMS_WITH_REST {
        Some(&bytes[c.at..])
    } else if c.at == bytes.len() {
        None
    } else {
        return None; // bytes after the last item
    };
    Some(Head {
        event_id,
        event_origin_delta,
        profile_name,
        source_name,
        id,
        value_type,
        value,
        rest,
        origin_from_key: key_ts_ns,
    })
}

impl Head<'_> {
    /// The reading's origin (item [7]'s "o" if present, else the key's timestamp); None if
    /// item [7] is damaged.
    pub fn origin(&self) -> Option<i64> {
        match self.rest {
            None => Some(self.origin_from_key),
            Some(bytes) => Some(rest_of(bytes)?.origin.unwrap_or(self.origin_from_key)),
        }
    }

    /// The event's origin (stored relative to the reading's).
    pub fn event_origin(&self, origin: i64) -> i64 {
        origin.wrapping_add(self.event_origin_delta)
    }
}

fn rest_of(bytes: &[u8]) -> Option<RestOwned> {
    let mut reader = bytes;
    let rest: RestOwned = ciborium::from_reader(&mut reader).ok()?;
    reader.is_empty().then_some(rest)
}

/// Decodes a compact reading keyed at `key_ts_ns` whole; None if it is not one.
pub(super) fn decode(value: &[u8], key_ts_ns: i64) -> Option<StoredReading> {
    let h = head_of(value, key_ts_ns)?;
    let rest = match h.rest {
        Some(bytes) => rest_of(bytes)?,
        None => RestOwned::default(),
    };
    let origin = rest.origin.unwrap_or(key_ts_ns);
    Some(StoredReading {
        event_id: h.event_id.to_text(),
        event_origin: h.event_origin(origin),
        profile_name: h.profile_name.to_string(),
        source_name: h.source_name.to_string(),
        id: h.id.to_text(),
        origin,
        value_type: h.value_type.to_string(),
        units: rest.units,
        value: h.value.map(str::to_string),
        binary_value: rest.binary_value,
        media_type: rest.media_type,
        object_value: rest.object_value,
        tags: rest.tags,
        event_tags: rest.event_tags,
    })
}

fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    if n < 24 {
        out.push(m | n as u8);
    } else if n <= u8::MAX as u64 {
        out.extend_from_slice(&[m | 24, n as u8]);
    } else if n <= u16::MAX as u64 {
        out.push(m | 25);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= u32::MAX as u64 {
        out.push(m | 26);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn int(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        head(out, UINT, v as u64);
    } else {
        head(out, NINT, !(v as u64)); // -1 - v
    }
}

fn text(out: &mut Vec<u8>, s: &str) {
    head(out, TEXT, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// An id: 16 bytes when it is a UUID written as `Uuid::hyphenated` writes it (so that it reads
/// back as the same text), else its text.
fn id(out: &mut Vec<u8>, s: &str) {
    match uuid::Uuid::try_parse(s) {
        Ok(u) if u.hyphenated().encode_lower(&mut [0; 36]) == s => {
            head(out, BYTES, 16);
            out.extend_from_slice(u.as_bytes());
        }
        _ => text(out, s),
    }
}

/// A reader of CBOR items, definite lengths only (the only ones written).
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek_major(&self) -> Option<u8> {
        self.b.get(self.at).map(|b| b >> 5)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let bytes = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(bytes)
    }

    fn head(&mut self) -> Option<(u8, u64)> {
        let first = *self.take(1)?.first()?;
        let n = match first & 0x1f {
            n @ 0..24 => n as u64,
            24 => self.take(1)?[0] as u64,
            25 => u16::from_be_bytes(self.take(2)?.try_into().ok()?) as u64,
            26 => u32::from_be_bytes(self.take(4)?.try_into().ok()?) as u64,
            27 => u64::from_be_bytes(self.take(8)?.try_into().ok()?),
            _ => return None, // indefinite lengths and reserved values
        };
        Some((first >> 5, n))
    }

    fn int(&mut self) -> Option<i64> {
        match self.head()? {
            (UINT, n) => i64::try_from(n).ok(),
            (NINT, n) => Some(!(i64::try_from(n).ok()?)),
            _ => None,
        }
    }

    fn text(&mut self) -> Option<&'a str> {
        match self.head()? {
            (TEXT, n) => std::str::from_utf8(self.take(usize::try_from(n).ok()?)?).ok(),
            _ => None,
        }
    }

    fn id(&mut self) -> Option<IdRef<'a>> {
        match self.peek_major()? {
            BYTES => match self.head()? {
                (_, 16) => Some(IdRef::Uuid(self.take(16)?.try_into().ok()?)),
                _ => None,
            },
            _ => Some(IdRef::Text(self.text()?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(event_id: &str, id: &str, value_type: &str, origin: i64) -> StoredReading {
        StoredReading {
            event_id: event_id.into(),
            event_origin: 1_700_000_000_000_000_000,
            profile_name: "profile-001".into(),
            source_name: "source-0001".into(),
            id: id.into(),
            origin,
            value_type: value_type.into(),
            units: None,
            value: Some("2.153000e+01".into()),
            binary_value: None,
            media_type: None,
            object_value: None,
            tags: None,
            event_tags: None,
        }
    }

    fn round_trip(s: &StoredReading, key_ts_ns: i64) -> Vec<u8> {
        let mut bytes = Vec::new();
        encode(Fields::of(s), key_ts_ns, &mut bytes).expect("encodes");
        assert!(is_compact(&bytes));
        assert_eq!(decode(&bytes, key_ts_ns).as_ref(), Some(s));
        bytes
    }

    #[test]
    fn a_typical_reading_takes_74_bytes_and_reads_back() {
        let uuid = "040bd523-ec33-440d-9d72-e5813a465f37";
        let s = reading(uuid, uuid, "Float64", 1_700_000_000_000_000_000);
        assert_eq!(round_trip(&s, s.origin).len(), 74);
        let later = reading(uuid, uuid, "Float64", 1_700_000_000_000_000_123);
        assert_eq!(round_trip(&later, later.origin).len(), 75); // its event's origin: -123
    }

    #[test]
    fn what_is_not_the_usual_reads_back_as_it_was() {
        let upper = "040BD523-EC33-440D-9D72-E5813A465F37"; // a UUID, but not as it reads back
        let mut s = reading(upper, "r1", "Float128", -5);
        s.event_origin = i64::MAX;
        s.value = None;
        s.units = Some("C".into());
        s.binary_value = Some(serde_bytes::ByteBuf::from(vec![0, 1, 2]));
        s.media_type = Some("image/png".into());
        s.object_value = Some(serde_json::json!({"a": [1, 2.5]}));
        s.tags = Some(
            serde_json::json!({"t": 1})
                .as_object()
                .cloned()
                .expect("map"),
        );
        s.event_tags = s.tags.clone();
        // Keyed at its origin, and keyed elsewhere (its origin then rides in item [7]).
        round_trip(&s, -5);
        let elsewhere = round_trip(&s, 99);
        assert_eq!(elsewhere[0], 0x88);
    }

    #[test]
    fn damaged_values_are_none_never_a_panic() {
        let uuid = "040bd523-ec33-440d-9d72-e5813a465f37";
        let mut s = reading(uuid, uuid, "Float64", 7);
        s.event_origin = 7;
        s.units = Some("C".into());
        let bytes = round_trip(&s, 7);
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut], 7), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, 7), None);
        let mut unknown_type = bytes;
        unknown_type[1 + 17 + 1 + 12 + 12 + 17] = 0x18; // type 0x6c (the value's head): none
        assert_eq!(decode(&unknown_type, 7), None);
    }
}
