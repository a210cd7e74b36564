//! The stream in each system's own wire form, the way its users send it:
//!
//! - **EdgeX** (roamkv's core-data route): one AddEventRequest (JSON) per event, every reading
//!   with its id, value type and value text — exactly what a device service POSTs.
//! - **native JSON lines** (roamkv's `POST /api/roamkv/v1/readings`): a batch of
//!   `{"device","sensor","ts_ns","value"}` lines, the value as the EdgeX text.
//! - **line protocol** (InfluxDB 1.6 and QuestDB 9.2, as `bench serve` sends it): one point per
//!   reading, device, resource, profile and source as tags; the value as a typed field named by
//!   its type (a field keeps one type per measurement in both stores), the value type and the
//!   reading and event ids as string fields, the origin in ns. The ids are kept so that every
//!   system stores the same readings (EdgeX's read routes return them).
//! - **RocksDB**: the native batch's readings under the mobility bench's baseline keys (device,
//!   sensor, ms), one WriteBatch per batch.
//!
//! Batches (everything but EdgeX, whose unit is the event) cut the stream in time order into
//! runs of `--batch-readings` readings: the same shapes for every system.

use std::fmt::Write as _;

use crate::footprint::stream::{Event, Kind, PROFILE, SOURCE, StreamSpec};

/// One reading with everything any system stores of it.
#[derive(Debug, Clone)]
pub struct Flat {
    pub device: usize,
    pub sensor: usize,
    pub ts_ns: i64,
    pub value: String,
    pub id: String,
    pub event_id: String,
}

/// The stream's readings in time order, cut into batches of `batch_readings`.
pub fn batches(spec: &StreamSpec, batch_readings: usize) -> impl Iterator<Item = Vec<Flat>> {
    let mut readings = spec.events().flat_map(|event| {
        let ts_ns = event.origin_ns();
        let (device, event_id) = (event.device, event.id);
        event.readings.into_iter().map(move |r| Flat {
            device,
            sensor: r.sensor,
            ts_ns,
            value: r.value,
            id: r.id,
            event_id: event_id.clone(),
        })
    });
    std::iter::from_fn(move || {
        let batch: Vec<Flat> = readings.by_ref().take(batch_readings.max(1)).collect();
        (!batch.is_empty()).then_some(batch)
    })
}

/// The core-data route an event of `device` is posted to.
pub fn edgex_path(spec: &StreamSpec, device: usize) -> String {
    format!(
        "/api/v3/event/footprint/{PROFILE}/{}/{SOURCE}",
        spec.device_name(device)
    )
}

/// An EdgeX v3 AddEventRequest (JSON), as a device service sends it.
pub fn edgex_json(spec: &StreamSpec, event: &Event) -> String {
    let device = spec.device_name(event.device);
    let origin = event.origin_ns();
    let mut out = String::with_capacity(300 + event.readings.len() * 260);
    let _ = write!(
        out,
        r#"{{"apiVersion":"v3","event":{{"apiVersion":"v3","id":"{}","deviceName":"{device}","profileName":"{PROFILE}","sourceName":"{SOURCE}","origin":{origin},"readings":["#,
        event.id
    );
    for (i, r) in event.readings.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            r#"{{"id":"{}","origin":{origin},"deviceName":"{device}","resourceName":"{}","profileName":"{PROFILE}","valueType":"{}","value":"{}"}}"#,
            r.id,
            spec.sensor_name(r.sensor),
            spec.kind(r.sensor).value_type(),
            r.value
        );
    }
    out.push_str("]}}");
    out
}

/// A batch as the native route's JSON lines.
pub fn native_lines(spec: &StreamSpec, batch: &[Flat]) -> String {
    let mut out = String::with_capacity(batch.len() * 110);
    for r in batch {
        let _ = writeln!(
            out,
            r#"{{"device":"{}","sensor":"{}","ts_ns":{},"value":"{}"}}"#,
            spec.device_name(r.device),
            spec.sensor_name(r.sensor),
            r.ts_ns,
            r.value
        );
    }
    out
}

/// The field a value of `kind` is stored in by the line-protocol stores.
pub fn value_field(kind: Kind) -> &'static str {
    match kind {
        Kind::Float => "value_float",
        Kind::Counter | Kind::Constant => "value_int",
        Kind::Bool => "value_bool",
        Kind::State => "value_str",
    }
}

/// A batch as InfluxDB line protocol (nanosecond timestamps).
pub fn line_protocol(spec: &StreamSpec, batch: &[Flat]) -> String {
    let mut out = String::with_capacity(batch.len() * 230);
    for r in batch {
        let kind = spec.kind(r.sensor);
        let value = match kind {
            Kind::Counter | Kind::Constant => format!("{}i", r.value),
            Kind::State => format!("\"{}\"", r.value),
            Kind::Float | Kind::Bool => r.value.clone(),
        };
        let _ = writeln!(
            out,
            r#"edgex,device={},resource={},profile={PROFILE},source={SOURCE} {}={value},valueType="{}",reading_id="{}",event_id="{}" {}"#,
            spec.device_name(r.device),
            spec.sensor_name(r.sensor),
            value_field(kind),
            kind.value_type(),
            r.id,
            r.event_id,
            r.ts_ns
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::footprint::stream::MIX_DEFAULT;

    #[test]
    fn batches_cover_the_stream_in_order_and_bodies_parse() {
        let spec = StreamSpec {
            devices: 2,
            sensors: 10,
            seconds: 3,
            seed: 1,
            mix: MIX_DEFAULT.to_vec(),
            send_from_second: 0,
        };
        let all: Vec<Vec<Flat>> = batches(&spec, 7).collect();
        assert_eq!(all.iter().map(Vec::len).sum::<usize>(), 60);
        assert!(all[..all.len() - 1].iter().all(|b| b.len() == 7));
        let lines = native_lines(&spec, &all[0]);
        for line in lines.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            assert!(v["value"].is_string());
        }
        let event = spec.events().next().expect("an event");
        let json = edgex_json(&spec, &event);
        let request = roamkv_wire::edgex::parse_add_event_json(json.as_bytes())
            .expect("a valid AddEventRequest");
        let readings =
            roamkv_wire::edgex::event_to_readings(request, None, usize::MAX).expect("readings");
        assert_eq!(readings.len(), 10);
        let lp = line_protocol(&spec, &all[0]);
        assert!(
            lp.contains("value_float=") && lp.contains("value_int="),
            "{lp}"
        );
    }
}
