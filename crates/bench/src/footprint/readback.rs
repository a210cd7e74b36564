//! The read-back check: every reading of the stream, read back from each system and compared
//! with what was sent — the value exactly (roamkv and RocksDB: the same bytes; the line-protocol
//! stores: the same number, integer, bool or string, as they keep typed values), and the reading
//! and event ids where the system keeps them. A run whose read-back misses or alters a reading
//! fails: a footprint of a store that lost readings means nothing.
//!
//! The expected readings are regenerated from the seed (stream.rs), not kept from the ingest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;

use roamkv_engine::{Durability, Engine, Options};
use serde_json::Value;

use crate::error::{BenchError, Result};
use crate::footprint::stream::{Kind, START_MS, StreamSpec};
use crate::mobility::engines::BenchEngine;
use crate::serve::load::HttpClient;

/// What the read-back found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReadBack {
    pub expected: u64,
    /// Readings the system returned (of the stream's devices).
    pub found: u64,
    /// Of them, equal to what was sent.
    pub matched: u64,
    pub first_mismatch: Option<String>,
}

impl ReadBack {
    pub fn ok(&self) -> bool {
        self.matched == self.expected && self.found == self.expected
    }
    fn miss(&mut self, what: String) {
        if self.first_mismatch.is_none() {
            self.first_mismatch = Some(what);
        }
    }
}

/// One sent reading: value, reading id, event id.
struct Sent {
    value: String,
    id: String,
    event_id: String,
}

/// Every sent reading by [device][sensor][second].
struct Expected {
    spec: StreamSpec,
    sent: Vec<Vec<Vec<Sent>>>,
    sensor_index: HashMap<String, usize>,
}

impl Expected {
    fn new(spec: &StreamSpec) -> Expected {
        let mut sent: Vec<Vec<Vec<Sent>>> = (0..spec.devices)
            .map(|_| (0..spec.sensors).map(|_| Vec::new()).collect())
            .collect();
        for event in spec.events() {
            for r in event.readings {
                sent[event.device][r.sensor].push(Sent {
                    value: r.value,
                    id: r.id,
                    event_id: event.id.clone(),
                });
            }
        }
        let sensor_index = (0..spec.sensors)
            .map(|s| (spec.sensor_name(s), s))
            .collect();
        Expected {
            spec: spec.clone(),
            sent,
            sensor_index,
        }
    }

    fn at(&self, device: usize, sensor: &str, ts_ns: i64) -> Option<(usize, &Sent)> {
        let sensor = *self.sensor_index.get(sensor)?;
        let ms = ts_ns.checked_sub(START_MS * 1_000_000)? / 1_000_000;
        let second = usize::try_from(ms / 1000).ok()?;
        self.sent[device][sensor].get(second).map(|s| (sensor, s))
    }

    fn start(&self) -> ReadBack {
        ReadBack {
            expected: self.spec.readings(),
            ..ReadBack::default()
        }
    }
}

/// roamkv's data directory (`edgex`: values are EdgeX stored readings; else the value text),
/// opened read-only after the server stopped.
pub fn roamkv(spec: &StreamSpec, data: &Path, edgex: bool) -> Result<ReadBack> {
    let expected = Expected::new(spec);
    let options = Options {
        durability: Durability::Sync,
        read_only: true,
        ..Options::default()
    };
    let engine = Engine::open(data, options)
        .map_err(|e| BenchError::step(format!("opening {} to read back", data.display()), e))?;
    let mut check = expected.start();
    for device in 0..spec.devices {
        let name = spec.device_name(device);
        let mut after = None;
        loop {
            let page = engine
                .scan_page(&name, None, i64::MIN, i64::MAX, after.as_ref(), 10_000)
                .map_err(|e| BenchError::step(format!("reading {name} back"), e))?;
            for r in &page.readings {
                check.found += 1;
                let Some((_, sent)) = expected.at(device, &r.sensor, r.ts_ns) else {
                    check.miss(format!("{name}/{} at {}: never sent", r.sensor, r.ts_ns));
                    continue;
                };
                let equal = if edgex {
                    roamkv_wire::edgex::stored_of(&r.value, r.ts_ns).is_some_and(|s| {
                        s.value.as_deref() == Some(&sent.value)
                            && s.id == sent.id
                            && s.event_id == sent.event_id
                    })
                } else {
                    r.value == sent.value.as_bytes()
                };
                if equal {
                    check.matched += 1;
                } else {
                    check.miss(format!(
                        "{name}/{} at {}: not what was sent",
                        r.sensor, r.ts_ns
                    ));
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    engine
        .close()
        .map_err(|e| BenchError::step("closing the engine", e))?;
    Ok(check)
}

/// RocksDB: a get of every sent reading.
pub fn rocksdb(spec: &StreamSpec, engine: &dyn BenchEngine) -> Result<ReadBack> {
    let expected = Expected::new(spec);
    let mut check = expected.start();
    for (device, sensors) in expected.sent.iter().enumerate() {
        let name = spec.device_name(device);
        for (sensor, seconds) in sensors.iter().enumerate() {
            let sensor_name = spec.sensor_name(sensor);
            for (second, sent) in seconds.iter().enumerate() {
                let ts_ms = START_MS + second as i64 * 1000;
                match engine.get(&name, &sensor_name, ts_ms)? {
                    Some(v) if v == sent.value.as_bytes() => {
                        check.found += 1;
                        check.matched += 1;
                    }
                    Some(_) => {
                        check.found += 1;
                        check.miss(format!("{name}/{sensor_name} at {ts_ms} ms: another value"));
                    }
                    None => check.miss(format!("{name}/{sensor_name} at {ts_ms} ms: missing")),
                }
            }
        }
    }
    Ok(check)
}

/// The columns both line-protocol stores are asked for, in this order (time first).
const COLUMNS: &str = "resource,value_float,value_int,value_bool,value_str,reading_id,event_id";

/// QuestDB (`/exec`, one query per device; its timestamps are microseconds).
pub fn questdb(spec: &StreamSpec, addr: SocketAddr) -> Result<ReadBack> {
    let expected = Expected::new(spec);
    let mut check = expected.start();
    let mut client = HttpClient::new(addr);
    for device in 0..spec.devices {
        let sql = format!(
            "select cast(timestamp as long),{COLUMNS} from edgex where device = '{}'",
            spec.device_name(device)
        );
        let json = get_json(&mut client, &format!("/exec?query={}", url_encode(&sql)))?;
        let rows = json["dataset"].as_array().cloned().unwrap_or_default();
        compare_rows(&expected, device, &rows, 1_000, &mut check);
    }
    Ok(check)
}

/// InfluxDB 1.6 (`/query`, one query per device, `epoch=ns`).
pub fn influxdb(spec: &StreamSpec, addr: SocketAddr) -> Result<ReadBack> {
    let expected = Expected::new(spec);
    let mut check = expected.start();
    let mut client = HttpClient::new(addr);
    for device in 0..spec.devices {
        let q = format!(
            "SELECT {COLUMNS} FROM edgex WHERE device = '{}'",
            spec.device_name(device)
        );
        let json = get_json(
            &mut client,
            &format!("/query?db=bench&epoch=ns&q={}", url_encode(&q)),
        )?;
        let rows = json["results"][0]["series"][0]["values"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        compare_rows(&expected, device, &rows, 1, &mut check);
    }
    Ok(check)
}

/// Rows of [time, COLUMNS...], time in units of `ns_per_unit`.
fn compare_rows(
    expected: &Expected,
    device: usize,
    rows: &[Value],
    ns_per_unit: i64,
    check: &mut ReadBack,
) {
    for row in rows {
        check.found += 1;
        let ts_ns = row[0].as_i64().unwrap_or(i64::MIN / 2) * ns_per_unit;
        let sensor = row[1].as_str().unwrap_or("");
        let Some((index, sent)) = expected.at(device, sensor, ts_ns) else {
            check.miss(format!("device {device}, {sensor} at {ts_ns}: never sent"));
            continue;
        };
        let value = match expected.spec.kind(index) {
            Kind::Float => {
                sent.value.parse::<f64>().ok().map(Value::from) == row[2].as_f64().map(Value::from)
            }
            Kind::Counter | Kind::Constant => sent.value.parse::<i64>().ok() == row[3].as_i64(),
            Kind::Bool => Some(sent.value == "true") == row[4].as_bool(),
            Kind::State => row[5].as_str() == Some(&sent.value),
        };
        if value && row[6].as_str() == Some(&sent.id) && row[7].as_str() == Some(&sent.event_id) {
            check.matched += 1;
        } else {
            check.miss(format!(
                "device {device}, {sensor} at {ts_ns}: {row} is not what was sent"
            ));
        }
    }
}

fn get_json(client: &mut HttpClient, path: &str) -> Result<Value> {
    let answer = client.request("GET", path, "text/plain", b"")?;
    if answer.status != 200 {
        return Err(BenchError::HttpStatus {
            request: format!("GET {path}"),
            status: answer.status,
            body: String::from_utf8_lossy(&answer.body).into_owned(),
        });
    }
    serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::step(format!("{path}'s answer"), e))
}

/// Percent-encoding of a query string value (everything but unreserved characters).
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
