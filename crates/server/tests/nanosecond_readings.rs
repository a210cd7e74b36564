//! Readings at nanosecond resolution: a kilohertz sensor's readings 1 ns apart are all kept and
//! read back in order (the store's key is the EdgeX origin, exactly), and a reading posted twice
//! (a client's retry) is stored once.

mod common;

use common::*;
use serde_json::{Value, json};

/// An event of `count` readings of one resource, 1 ns apart from `first_origin`.
fn burst(device: &str, first_origin: i64, count: i64) -> Value {
    let readings: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "id": uuid(),
                "origin": first_origin + i,
                "deviceName": device,
                "resourceName": "vibration",
                "profileName": "accelerometer",
                "valueType": "Int64",
                "value": (first_origin + i).to_string(),
            })
        })
        .collect();
    json!({
        "apiVersion": "v3",
        "event": {
            "apiVersion": "v3",
            "id": uuid(),
            "deviceName": device,
            "profileName": "accelerometer",
            "sourceName": "burst",
            "origin": first_origin,
            "readings": readings,
        }
    })
}

/// Every reading of the device's vibration sensor through the native API's pages: their ts_ns.
async fn origins(server: &Server, device: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut path =
            format!("/api/roamkv/v1/devices/{device}/readings?sensor=vibration&limit=10000");
        if let Some(token) = &after {
            path.push_str(&format!("&after={token}"));
        }
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200, "{body}");
        for r in body["readings"].as_array().expect("readings") {
            out.push(r["ts_ns"].as_i64().expect("ts_ns"));
        }
        match body["next"].as_str() {
            Some(token) => after = Some(token.to_string()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_readings_one_nanosecond_apart_are_all_kept_in_order() {
    let server = Server::start(|_| {}).await;
    let first = now_ns() - 1_000_000_000;
    // EdgeX's limit of readings per event here is 100: 100 events of 100, continuing 1 ns apart.
    for event in 0..100 {
        let (status, body) = server
            .post_event(&burst("shaker-1", first + event * 100, 100))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let got = origins(&server, "shaker-1").await;
    let want: Vec<i64> = (0..10_000).map(|i| first + i).collect();
    assert_eq!(got.len(), want.len(), "every reading kept");
    assert_eq!(got, want, "in order, each origin exactly as posted");

    // The v3 route gives the origin back to the nanosecond, with its value.
    let (status, body) = server
        .get("/api/v3/reading/device/name/shaker-1/resourceName/vibration?limit=3")
        .await;
    assert_eq!(status, 200, "{body}");
    for r in body["readings"].as_array().expect("readings") {
        let origin = r["origin"].as_i64().expect("origin");
        assert!((first..first + 10_000).contains(&origin), "{r}");
        assert_eq!(r["value"], origin.to_string(), "{r}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_posted_twice_is_stored_once() {
    let server = Server::start(|_| {}).await;
    let origin = now_ns() - 1_000_000_000;
    let request = burst("shaker-2", origin, 3);
    for _ in 0..2 {
        let (status, body) = server.post_event(&request).await;
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(
        origins(&server, "shaker-2").await,
        vec![origin, origin + 1, origin + 2],
        "a retried POST is idempotent"
    );
    // Two readings with the same origin in one event cannot both be kept: refused, nothing
    // written.
    let mut twice = burst("shaker-3", origin, 2);
    twice["event"]["readings"][1]["origin"] = json!(origin);
    let (status, body) = server.post_event(&twice).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("same origin")),
        "{body}"
    );
    assert!(origins_or_none(&server, "shaker-3").await);
    server.stop().await;
}

/// True when the device has no readings (404 for a device never written, or an empty list).
async fn origins_or_none(server: &Server, device: &str) -> bool {
    let (status, body) = server
        .get(&format!(
            "/api/roamkv/v1/devices/{device}/readings?sensor=vibration"
        ))
        .await;
    status == 404 || body["readings"].as_array().is_some_and(Vec::is_empty)
}
