//! An export's columns (Parquet and Arrow; CSV has the same minus the numbers, docs/SERVER.md):
//!
//! | column | type | holds |
//! |---|---|---|
//! | `device` | utf8 | the device |
//! | `sensor` | utf8 | the sensor (an EdgeX reading's `resourceName`) |
//! | `ts` | timestamp[ns, UTC] | the reading's timestamp, the engine's key |
//! | `value` | binary | the value's bytes as stored (an EdgeX reading: its CBOR form) |
//! | `value_type` | utf8, null | an EdgeX reading's `valueType`; null for a native reading |
//! | `value_text` | utf8, null | an EdgeX reading's `value`; a native value that is UTF-8 |
//! | `value_int` | int64, null | an EdgeX `Int8`..`Int64` reading's number |
//! | `value_uint` | uint64, null | an EdgeX `Uint8`..`Uint64` reading's number |
//! | `value_float` | float64, null | an EdgeX `Float32`/`Float64` reading's number |
//! | `units` | utf8, null | an EdgeX reading's `units` |

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Float64Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use roamkv_engine::Reading;
use roamkv_wire::edgex::aggregate::{Number, numeric_value};
use roamkv_wire::edgex::{stored_form, stored_of};

use crate::error::Result;

/// The time zone of the `ts` column: the engine's timestamps are nanoseconds since the epoch.
const TS_ZONE: &str = "UTC";

/// The Arrow schema every Parquet and Arrow export has.
pub fn schema() -> SchemaRef {
    let utf8 = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        utf8("device", false),
        utf8("sensor", false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, Some(TS_ZONE.into())),
            false,
        ),
        Field::new("value", DataType::Binary, false),
        utf8("value_type", true),
        utf8("value_text", true),
        Field::new("value_int", DataType::Int64, true),
        Field::new("value_uint", DataType::UInt64, true),
        Field::new("value_float", DataType::Float64, true),
        utf8("units", true),
    ]))
}

/// What a value says beyond its bytes: an EdgeX reading decoded, or a native value's text.
#[derive(Debug, Default, PartialEq)]
pub struct Decoded<'a> {
    pub value_type: Option<String>,
    /// Borrowed from the value when it is text itself (no copy per reading).
    pub text: Option<Cow<'a, str>>,
    pub number: Option<Number>,
    pub units: Option<String>,
}

/// The columns of a value keyed at `ts_ns`: a stored EdgeX reading's type, value and units, or
/// a native value's text. `stored_form` is the cheap first-byte test that spares native
/// readings (text, mostly) the decoder.
pub fn decode(value: &[u8], ts_ns: i64) -> Decoded<'_> {
    if stored_form(value).is_some()
        && let Some(stored) = stored_of(value, ts_ns)
    {
        let number = stored
            .value
            .as_deref()
            .and_then(|v| numeric_value(&stored.value_type, v));
        return Decoded {
            value_type: Some(stored.value_type),
            text: stored.value.map(Cow::Owned),
            number,
            units: stored.units,
        };
    }
    Decoded {
        text: std::str::from_utf8(value).ok().map(Cow::Borrowed),
        ..Decoded::default()
    }
}

/// Columns being filled, for one record batch.
pub struct Columns {
    device: StringBuilder,
    sensor: StringBuilder,
    ts: TimestampNanosecondBuilder,
    value: BinaryBuilder,
    value_type: StringBuilder,
    value_text: StringBuilder,
    value_int: Int64Builder,
    value_uint: UInt64Builder,
    value_float: Float64Builder,
    units: StringBuilder,
    rows: usize,
    bytes: usize,
}

impl Columns {
    pub fn new() -> Columns {
        Columns {
            device: StringBuilder::new(),
            sensor: StringBuilder::new(),
            ts: TimestampNanosecondBuilder::new().with_timezone(TS_ZONE),
            value: BinaryBuilder::new(),
            value_type: StringBuilder::new(),
            value_text: StringBuilder::new(),
            value_int: Int64Builder::new(),
            value_uint: UInt64Builder::new(),
            value_float: Float64Builder::new(),
            units: StringBuilder::new(),
            rows: 0,
            bytes: 0,
        }
    }

    pub fn push(&mut self, reading: &Reading, decoded: &Decoded) {
        self.device.append_value(&reading.device);
        self.sensor.append_value(&reading.sensor);
        self.ts.append_value(reading.ts_ns);
        self.value.append_value(&reading.value);
        self.value_type.append_option(decoded.value_type.as_deref());
        self.value_text.append_option(decoded.text.as_deref());
        let (int, uint, float) = match decoded.number {
            Some(Number::Int(i)) => (Some(i), None, None),
            Some(Number::Uint(u)) => (None, Some(u), None),
            Some(Number::Float(f)) => (None, None, Some(f)),
            None => (None, None, None),
        };
        self.value_int.append_option(int);
        self.value_uint.append_option(uint);
        self.value_float.append_option(float);
        self.units.append_option(decoded.units.as_deref());
        self.rows += 1;
        self.bytes += reading.device.len()
            + reading.sensor.len()
            + reading.value.len()
            + decoded.text.as_ref().map_or(0, |t| t.len())
            + 48;
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// About what the columns hold in memory.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The columns as a record batch; the builders start again empty.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.device.finish()),
            Arc::new(self.sensor.finish()),
            Arc::new(self.ts.finish()),
            Arc::new(self.value.finish()),
            Arc::new(self.value_type.finish()),
            Arc::new(self.value_text.finish()),
            Arc::new(self.value_int.finish()),
            Arc::new(self.value_uint.finish()),
            Arc::new(self.value_float.finish()),
            Arc::new(self.units.finish()),
        ];
        self.rows = 0;
        self.bytes = 0;
        Ok(RecordBatch::try_new(schema(), columns)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_text_is_text_and_binary_is_not() {
        assert_eq!(decode(b"21.5", 1).text.as_deref(), Some("21.5"));
        assert_eq!(decode(b"21.5", 1).value_type, None);
        assert_eq!(decode(&[0xff, 0x00], 1), Decoded::default());
        // A CBOR map or array that is no stored reading stays a native value.
        assert_eq!(decode(&[0xA0], 1).value_type, None);
        assert_eq!(decode(&[0x87, 0x00], 1).value_type, None);
    }
}
