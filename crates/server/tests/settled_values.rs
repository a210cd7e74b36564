//! Every EdgeX value type reads back the same once its device has settled: the lower tier keeps
//! readings in encoded blocks (typed text, zstd), and what comes out of the v3 routes after the
//! move must be, byte for byte in its JSON, what came out while the readings were in the log.

mod common;

use common::*;
use serde_json::{Value, json};

const MS: i64 = 1_000_000;

/// A reading of `value_type` whose value is `field: value`.
fn reading(origin: i64, resource: &str, value_type: &str, field: &str, value: Value) -> Value {
    let mut r = json!({
        "id": uuid(), "origin": origin, "deviceName": "rig-1", "resourceName": resource,
        "profileName": "rig-profile", "valueType": value_type, "units": "u",
    });
    r[field] = value;
    if value_type == "Binary" {
        r["mediaType"] = json!("application/octet-stream");
    }
    r
}

/// The `i`th event: a reading of every value type, values that drift as sensors do and in the
/// forms devices send them (`%e` floats, leading zeros, text with digits, arrays, odd spacing).
fn event(i: i64, origin: i64) -> Value {
    let f = 21.5 + (i % 7) as f64 * 0.01;
    let simple = [
        ("float64", "Float64", format!("{f:.6e}")),
        ("float32", "Float32", format!("{:.2}", f - 40.0)),
        ("int8", "Int8", format!("{}", -(i % 100))),
        ("int16", "Int16", format!("{}", i * 3)),
        ("int32", "Int32", format!("{:05}", i)),
        ("int64", "Int64", format!("{}", i64::MAX - i)),
        ("uint8", "Uint8", format!("{}", 255 - i % 200)),
        ("uint16", "Uint16", format!("{}", i)),
        (
            "uint32",
            "Uint32",
            format!("{}", 4_000_000_000u64 + i as u64),
        ),
        ("uint64", "Uint64", format!("{}", u64::MAX - i as u64)),
        (
            "bool",
            "Bool",
            ["true", "False", "1", "f"][i as usize % 4].to_string(),
        ),
        ("state", "String", format!("v2.{i}-rc1 #{i}")),
        ("empty", "String", String::new()),
        ("bools", "BoolArray", "[true, false]".into()),
        ("floats", "Float64Array", format!("[{f:.3e}, -0.000, 1e-7]")),
        ("ints", "Int16Array", format!("[{i},-{i}, 007]")),
        ("words", "StringArray", format!("[\"a{i}\", \"b\"]")),
    ];
    let mut readings: Vec<Value> = simple
        .iter()
        .map(|(resource, t, v)| reading(origin, resource, t, "value", json!(v)))
        .collect();
    let bytes: Vec<u8> = (0..16).map(|b| (b * 17 + i) as u8).collect();
    use base64::Engine as _;
    readings.push(reading(
        origin,
        "blob",
        "Binary",
        "binaryValue",
        json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
    ));
    readings.push(reading(
        origin,
        "position",
        "Object",
        "objectValue",
        json!({"lat": 52.5 + i as f64 * 1e-4, "lon": 13.4, "fix": i % 2 == 0}),
    ));
    json!({"apiVersion": "v3", "event": {
        "apiVersion": "v3", "id": uuid(), "deviceName": "rig-1", "profileName": "rig-profile",
        "sourceName": "all-types", "origin": origin, "readings": readings,
        "tags": {"site": "settled-values"},
    }})
}

/// Every event of the device as the v3 route pages them.
async fn events(server: &Server) -> Value {
    let (status, body) = server
        .get("/api/v3/event/device/name/rig-1?limit=1000")
        .await;
    assert_eq!(status, 200, "{body}");
    body["events"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_value_type_reads_back_the_same_after_its_device_settles() {
    let server = Server::start(|a| a.management_time_ms = Some(300)).await;
    let start = now_ns() - 60_000 * MS;
    let count = 40;
    for i in 0..count {
        let (status, body) = server.post_event(&event(i, start + i * 1000 * MS)).await;
        assert_eq!(status, 201, "{body}");
    }
    let in_log = events(&server).await;
    assert_eq!(in_log.as_array().map(Vec::len), Some(count as usize));

    let settled = eventually(20, || async {
        let (_, body) = server.get("/api/roamkv/v1/devices").await;
        let devices = body["devices"].as_array().cloned().unwrap_or_default();
        devices
            .iter()
            .any(|d| d["device"] == "rig-1" && d["tier"] == "lower" && d["log_readings"] == 0)
    })
    .await;
    assert!(settled, "rig-1 did not settle in the lower tier");
    let (_, stats) = server.get("/api/roamkv/v1/stats").await;
    assert!(
        stats["moved_bytes"].as_u64().is_some_and(|b| b > 0),
        "nothing moved: {stats}"
    );
    let from_blocks = events(&server).await;
    assert_eq!(from_blocks, in_log, "the events changed when they settled");
    server.stop().await;
}
