//! core-data 4's reading aggregates (`aggregateFunc=MIN|MAX|COUNT|SUM|AVG`) and numeric values
//! (`numeric=true`), as its PostgreSQL store computes them (edgex-go
//! internal/pkg/infrastructure/postgres/readingagg.go and sql.go):
//!
//! - readings are grouped by (deviceName, profileName, resourceName, valueType), groups ordered
//!   by deviceName (then the rest of the key, so that pages are stable);
//! - only numeric values count (the simple integer and float types); a group with none has no
//!   value (COUNT: 0), as a String or Bool reading's group has none in core-data;
//! - COUNT answers Uint64, AVG Float64; SUM, MIN and MAX answer Int64 for signed types, Uint64
//!   for unsigned ones and Float64 for floats, as core-data converts them.
//!
//! Beyond core-data: `every` buckets the groups by time (origin rounded down to a multiple of
//! the bucket), what a chart of a sensor over a day needs. Values are folded one by one as the
//! engine's paged scan yields them: the range is never held, only one accumulator per group.
//! Not finite floats (NaN, Inf) are skipped: JSON has no number for them.

use std::collections::BTreeMap;

use serde_json::{Map, Number as JsonNumber, Value};

use super::compact;
use super::stored::Decoded;
use crate::error::WireError;

/// One of core-data's aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateFunc {
    Min,
    Max,
    Count,
    Sum,
    Avg,
}

impl AggregateFunc {
    /// Parses `aggregateFunc` as core-data does (any case).
    pub fn parse(text: &str) -> Result<AggregateFunc, WireError> {
        match text.to_ascii_uppercase().as_str() {
            "MIN" => Ok(AggregateFunc::Min),
            "MAX" => Ok(AggregateFunc::Max),
            "COUNT" => Ok(AggregateFunc::Count),
            "SUM" => Ok(AggregateFunc::Sum),
            "AVG" => Ok(AggregateFunc::Avg),
            _ => Err(WireError::bad_input(format!(
                "aggregateFunc {text:?} is not one of MIN, MAX, COUNT, SUM, AVG"
            ))),
        }
    }

    /// The function's name as core-data spells it.
    pub fn name(self) -> &'static str {
        match self {
            AggregateFunc::Min => "MIN",
            AggregateFunc::Max => "MAX",
            AggregateFunc::Count => "COUNT",
            AggregateFunc::Sum => "SUM",
            AggregateFunc::Avg => "AVG",
        }
    }
}

/// A simple reading's value as a number, by its valueType.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Uint(u64),
    Float(f64),
}

/// What kind of number a valueType holds, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Uint,
    Float,
}

fn kind(value_type: &str) -> Option<Kind> {
    match value_type {
        "Int8" | "Int16" | "Int32" | "Int64" => Some(Kind::Int),
        "Uint8" | "Uint16" | "Uint32" | "Uint64" => Some(Kind::Uint),
        "Float32" | "Float64" => Some(Kind::Float),
        _ => None,
    }
}

/// The number a reading of `value_type` holds; `None` for types that hold none (Bool, String,
/// arrays, Binary, Object) and for values that do not parse (written before values were checked).
pub fn numeric_value(value_type: &str, value: &str) -> Option<Number> {
    match kind(value_type)? {
        Kind::Int => value.parse().ok().map(Number::Int),
        Kind::Uint => value.parse().ok().map(Number::Uint),
        Kind::Float => value.parse().ok().map(Number::Float),
    }
}

impl Number {
    /// The JSON number; `None` for a float that is not finite.
    pub fn to_json(self) -> Option<Value> {
        match self {
            Number::Int(i) => Some(Value::from(i)),
            Number::Uint(u) => Some(Value::from(u)),
            Number::Float(f) => JsonNumber::from_f64(f).map(Value::Number),
        }
    }
}

/// `numeric=true` on a reading's JSON: its `value` as a JSON number when its valueType is
/// numeric (core-data's NumericReading); other readings are left as they are.
pub fn make_numeric(reading: &mut Value) {
    let Some(object) = reading.as_object_mut() else {
        return;
    };
    let number = match (object.get("valueType"), object.get("value")) {
        (Some(Value::String(t)), Some(Value::String(v))) => {
            numeric_value(t, v).and_then(Number::to_json)
        }
        _ => None,
    };
    if let Some(number) = number {
        object.insert("value".into(), number);
    }
}

/// A group's key: the columns core-data groups by, and the bucket's start when bucketed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GroupKey {
    device: String,
    profile: String,
    resource: String,
    value_type: String,
    bucket_start_ns: Option<i64>,
}

/// What is kept of a group while folding: never its readings.
#[derive(Debug, Default, Clone)]
struct Accumulator {
    count: u64,
    int_sum: i128,
    float_sum: f64,
    min: Option<Number>,
    max: Option<Number>,
}

impl Accumulator {
    fn add(&mut self, n: Number) {
        match n {
            Number::Int(i) => self.int_sum += i128::from(i),
            Number::Uint(u) => self.int_sum += i128::from(u),
            Number::Float(f) if !f.is_finite() => return,
            Number::Float(f) => self.float_sum += f,
        }
        self.count += 1;
        if self.min.is_none_or(|m| less(n, m)) {
            self.min = Some(n);
        }
        if self.max.is_none_or(|m| less(m, n)) {
            self.max = Some(n);
        }
    }

    /// Takes in another accumulator of the same group.
    fn merge(&mut self, other: Accumulator) {
        self.count += other.count;
        self.int_sum += other.int_sum;
        self.float_sum += other.float_sum;
        for n in [other.min, other.max].into_iter().flatten() {
            if self.min.is_none_or(|m| less(n, m)) {
                self.min = Some(n);
            }
            if self.max.is_none_or(|m| less(m, n)) {
                self.max = Some(n);
            }
        }
    }

    fn sum(&self) -> f64 {
        // i128 → f64 rounds only beyond 2^53, where the exact sum was not asked for as a float.
        self.int_sum as f64 + self.float_sum
    }

    /// The group's answer: (valueType, value); no value for a group with no numbers.
    fn result(&self, func: AggregateFunc, value_type: &str) -> (String, Option<Value>) {
        let kind = kind(value_type);
        let typed = |k: Option<Kind>| match k {
            Some(Kind::Int) => "Int64",
            Some(Kind::Uint) => "Uint64",
            Some(Kind::Float) => "Float64",
            None => value_type,
        };
        match func {
            AggregateFunc::Count => ("Uint64".into(), Some(Value::from(self.count))),
            _ if self.count == 0 => (value_type.into(), None),
            AggregateFunc::Avg => (
                "Float64".into(),
                Number::Float(self.sum() / self.count as f64).to_json(),
            ),
            AggregateFunc::Min => (typed(kind).into(), self.min.and_then(Number::to_json)),
            AggregateFunc::Max => (typed(kind).into(), self.max.and_then(Number::to_json)),
            AggregateFunc::Sum => match kind {
                Some(Kind::Int) => match i64::try_from(self.int_sum) {
                    Ok(i) => ("Int64".into(), Some(Value::from(i))),
                    Err(_) => ("Float64".into(), Number::Float(self.sum()).to_json()),
                },
                Some(Kind::Uint) => match u64::try_from(self.int_sum) {
                    Ok(u) => ("Uint64".into(), Some(Value::from(u))),
                    Err(_) => ("Float64".into(), Number::Float(self.sum()).to_json()),
                },
                _ => ("Float64".into(), Number::Float(self.sum()).to_json()),
            },
        }
    }
}

/// a < b, across the kinds one group can hold (one valueType: one kind, in practice).
fn less(a: Number, b: Number) -> bool {
    match (a, b) {
        (Number::Int(x), Number::Int(y)) => x < y,
        (Number::Uint(x), Number::Uint(y)) => x < y,
        _ => as_f64(a) < as_f64(b),
    }
}

fn as_f64(n: Number) -> f64 {
    match n {
        Number::Int(i) => i as f64,
        Number::Uint(u) => u as f64,
        Number::Float(f) => f,
    }
}

/// What a fold reads of a stored reading of the first form (a map): the grouping fields and
/// the value, nothing else decoded (ids, tags and the rest of the map are skipped).
#[derive(serde::Deserialize)]
struct FoldedPart {
    #[serde(rename = "p")]
    profile: String,
    #[serde(rename = "o")]
    origin: i64,
    #[serde(rename = "t")]
    value_type: String,
    #[serde(rename = "v", default)]
    value: Option<String>,
}

/// An aggregation being folded: one accumulator per group, readings added one at a time. The
/// group being added to is kept apart (readings come in key order, so most follow their
/// predecessor's group): a reading costs a comparison, not a map lookup with a new key.
pub struct Aggregation {
    func: AggregateFunc,
    every_ns: Option<i64>,
    groups: BTreeMap<GroupKey, Accumulator>,
    current: Option<(GroupKey, Accumulator)>,
}

impl Aggregation {
    /// `every_ns`: the bucket width, if the groups are bucketed by time (must be > 0).
    pub fn new(func: AggregateFunc, every_ns: Option<i64>) -> Aggregation {
        Aggregation {
            func,
            every_ns: every_ns.filter(|e| *e > 0),
            groups: BTreeMap::new(),
            current: None,
        }
    }

    /// Folds one decoded reading in.
    pub fn add(&mut self, reading: &Decoded) {
        let s = &reading.stored;
        self.add_parts(
            &reading.device,
            &reading.resource_name,
            &s.profile_name,
            &s.value_type,
            s.origin,
            s.value.as_deref(),
        );
    }

    /// Folds one engine reading in, from its stored bytes (the server's fold: only what it
    /// groups and sums is decoded). A value that is no stored EdgeX reading (a native one) is
    /// grouped as a String reading, as `decode` shows it.
    pub fn add_stored(&mut self, device: &str, resource: &str, ts_ns: i64, value: &[u8]) {
        if compact::is_compact(value)
            && let Some(head) = compact::head_of(value, ts_ns)
            && let Some(origin) = head.origin()
        {
            return self.add_parts(
                device,
                resource,
                head.profile_name,
                head.value_type,
                origin,
                head.value,
            );
        }
        match ciborium::from_reader::<FoldedPart, _>(value) {
            Ok(part) => self.add_parts(
                device,
                resource,
                &part.profile,
                &part.value_type,
                part.origin,
                part.value.as_deref(),
            ),
            Err(_) => self.add_parts(device, resource, "", "String", ts_ns, None),
        }
    }

    fn add_parts(
        &mut self,
        device: &str,
        resource: &str,
        profile: &str,
        value_type: &str,
        origin: i64,
        value: Option<&str>,
    ) {
        let bucket_start_ns = self.every_ns.map(|every| origin.div_euclid(every) * every);
        let same = self.current.as_ref().is_some_and(|(key, _)| {
            key.bucket_start_ns == bucket_start_ns
                && key.resource == resource
                && key.device == device
                && key.value_type == value_type
                && key.profile == profile
        });
        if !same {
            self.park();
            self.current = Some((
                GroupKey {
                    device: device.to_string(),
                    profile: profile.to_string(),
                    resource: resource.to_string(),
                    value_type: value_type.to_string(),
                    bucket_start_ns,
                },
                Accumulator::default(),
            ));
        }
        if let (Some((_, group)), Some(n)) = (
            self.current.as_mut(),
            value.and_then(|v| numeric_value(value_type, v)),
        ) {
            group.add(n);
        }
    }

    /// Moves the current group into the map, merged with what the map has of it.
    fn park(&mut self) {
        if let Some((key, accumulator)) = self.current.take() {
            self.groups.entry(key).or_default().merge(accumulator);
        }
    }

    /// How many groups there are so far (the fold's memory).
    pub fn group_count(&self) -> usize {
        self.groups.len() + usize::from(self.current.is_some())
    }

    /// The groups as readings (JSON, core-data's aggregated reading shape; `origin` is the
    /// bucket's start when bucketed), in group order.
    pub fn into_readings(mut self) -> Vec<Value> {
        self.park();
        let func = self.func;
        self.groups
            .into_iter()
            .map(|(key, accumulator)| {
                let (value_type, value) = accumulator.result(func, &key.value_type);
                let mut reading = Map::new();
                reading.insert("deviceName".into(), key.device.into());
                reading.insert("resourceName".into(), key.resource.into());
                reading.insert("profileName".into(), key.profile.into());
                reading.insert("valueType".into(), value_type.into());
                if let Some(start_ns) = key.bucket_start_ns {
                    reading.insert("origin".into(), start_ns.into());
                }
                reading.insert("value".into(), value.unwrap_or_else(|| Value::from("")));
                Value::Object(reading)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edgex::StoredReading;

    fn reading(device: &str, value_type: &str, value: &str, origin: i64) -> Decoded {
        Decoded {
            device: device.into(),
            resource_name: "r".into(),
            stored: StoredReading {
                event_id: String::new(),
                event_origin: origin,
                profile_name: "p".into(),
                source_name: "s".into(),
                id: String::new(),
                origin,
                value_type: value_type.into(),
                units: None,
                value: Some(value.into()),
                binary_value: None,
                media_type: None,
                object_value: None,
                tags: None,
                event_tags: None,
            },
        }
    }

    fn fold(func: AggregateFunc, every: Option<i64>, readings: &[Decoded]) -> Vec<Value> {
        let mut aggregation = Aggregation::new(func, every);
        for r in readings {
            aggregation.add(r);
        }
        aggregation.into_readings()
    }

    #[test]
    fn each_function_answers_as_core_data_converts() {
        let rs = [
            reading("a", "Int8", "-3", 1),
            reading("a", "Int8", "10", 2),
            reading("a", "Int8", "5", 3),
        ];
        let value = |func| fold(func, None, &rs)[0].clone();
        assert_eq!(value(AggregateFunc::Min)["value"], -3);
        assert_eq!(value(AggregateFunc::Min)["valueType"], "Int64");
        assert_eq!(value(AggregateFunc::Max)["value"], 10);
        assert_eq!(value(AggregateFunc::Sum)["value"], 12);
        assert_eq!(value(AggregateFunc::Count)["value"], 3);
        assert_eq!(value(AggregateFunc::Count)["valueType"], "Uint64");
        assert_eq!(value(AggregateFunc::Avg)["value"], 4.0);
        assert_eq!(value(AggregateFunc::Avg)["valueType"], "Float64");
    }

    #[test]
    fn groups_are_by_device_and_type_and_non_numbers_have_no_value() {
        let rs = [
            reading("b", "Float32", "1.5", 1),
            reading("a", "String", "hello", 1),
            reading("b", "Float32", "NaN", 2),
            reading("b", "Float32", "2.5", 3),
        ];
        let out = fold(AggregateFunc::Sum, None, &rs);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0]["deviceName"], "a");
        assert_eq!(out[0]["value"], "");
        assert_eq!(out[0]["valueType"], "String");
        assert_eq!(out[1]["value"], 4.0);
        assert_eq!(fold(AggregateFunc::Count, None, &rs)[0]["value"], 0);
    }

    #[test]
    fn buckets_round_origins_down_and_sums_past_i64_turn_float() {
        let rs = [
            reading("a", "Uint64", "18446744073709551615", 5),
            reading("a", "Uint64", "1", 9),
            reading("a", "Uint64", "7", 10),
            reading("a", "Uint64", "1", -1),
        ];
        let out = fold(AggregateFunc::Sum, Some(10), &rs);
        let starts: Vec<i64> = out
            .iter()
            .map(|r| r["origin"].as_i64().expect("origin"))
            .collect();
        assert_eq!(starts, [-10, 0, 10]);
        assert_eq!(out[1]["valueType"], "Float64");
        assert_eq!(out[2]["value"], 7);
    }

    #[test]
    fn folding_stored_bytes_answers_what_folding_decoded_readings_does() {
        let request: crate::edgex::AddEventRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": "v3",
            "event": {
                "apiVersion": "v3", "id": "040bd523-ec33-440d-9d72-e5813a465f37",
                "deviceName": "d", "profileName": "p", "sourceName": "s", "origin": 5,
                "readings": [
                    {"deviceName": "d", "resourceName": "a", "profileName": "p", "origin": 5,
                     "valueType": "Int16", "value": "-7"},
                    {"deviceName": "d", "resourceName": "b", "profileName": "p", "origin": 5,
                     "valueType": "Float64", "value": "2.5"},
                    {"deviceName": "d", "resourceName": "c", "profileName": "p", "origin": 5,
                     "valueType": "String", "value": "x"}
                ]
            }
        }))
        .expect("request");
        let keyed = crate::edgex::event_to_readings(request.view(), None, 10).expect("readings");
        for func in [AggregateFunc::Sum, AggregateFunc::Count, AggregateFunc::Min] {
            let (mut stored, mut decoded, mut first_form) = (
                Aggregation::new(func, None),
                Aggregation::new(func, None),
                Aggregation::new(func, None),
            );
            // Twice, the second time after the others: groups met again merge.
            for r in keyed.iter().chain(keyed.iter()) {
                stored.add_stored(&r.device, &r.sensor, r.ts_ns, &r.value);
                let s = crate::edgex::stored_of(&r.value, r.ts_ns).expect("stored");
                let map = crate::edgex::stored_encoding(&s, r.ts_ns, crate::edgex::StoredForm::Map)
                    .expect("map");
                first_form.add_stored(&r.device, &r.sensor, r.ts_ns, &map);
                decoded.add(&crate::edgex::decode(roamkv_engine::Reading {
                    device: r.device.clone(),
                    sensor: r.sensor.clone(),
                    ts_ns: r.ts_ns,
                    value: r.value.clone(),
                }));
            }
            let stored = stored.into_readings();
            assert_eq!(stored, decoded.into_readings());
            assert_eq!(stored, first_form.into_readings());
        }
        let mut native = Aggregation::new(AggregateFunc::Count, None);
        native.add_stored("d", "n", 1, b"plain text");
        // A native reading is a String reading (as `decode` shows it): no number to count.
        assert_eq!(native.into_readings()[0]["value"], 0);
    }

    #[test]
    fn numeric_makes_numbers_of_numeric_types_only() {
        let mut r = serde_json::json!({"valueType": "Uint8", "value": "200"});
        make_numeric(&mut r);
        assert_eq!(r["value"], 200);
        let mut s = serde_json::json!({"valueType": "String", "value": "200"});
        make_numeric(&mut s);
        assert_eq!(s["value"], "200");
        let mut f = serde_json::json!({"valueType": "Float64", "value": "NaN"});
        make_numeric(&mut f);
        assert_eq!(f["value"], "NaN");
    }
}
