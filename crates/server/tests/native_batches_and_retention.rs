//! The native API's binary batches (good ones are written; bad ones get 400 naming the byte
//! offset and change nothing) and per-device retention settings (applied at once, then
//! periodically, kept across a restart; bad settings refused).

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use roamkv_wire::batch;
use serde_json::{Value, json};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

fn binary(records: &[(&str, &str, i64, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    batch::encode_header(&mut out, records.len() as u32);
    for (device, sensor, ts, value) in records {
        batch::encode_record(&mut out, device, sensor, *ts, value);
    }
    out
}

async fn readings(server: &Server, device: &str) -> Vec<Value> {
    let (status, body) = server
        .get(&format!("/api/roamkv/v1/devices/{device}/readings"))
        .await;
    assert_eq!(status, 200, "{body}");
    body["readings"].as_array().cloned().unwrap_or_default()
}

async fn put_json(server: &Server, path: &str, body: &str) -> (u16, Value) {
    let response = server
        .client
        .put(format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("PUT");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_batches_are_written_and_bad_ones_name_their_offset() {
    let server = Server::start(|a| a.batch_readings_max = Some(3)).await;
    let post = |body: Vec<u8>| server.post("/api/roamkv/v1/readings", batch::CONTENT_TYPE, body);
    let good = binary(&[
        ("car-1", "speed", 1_000, b"88.5"),
        ("car-1", "raw", 1_000, &[0, 255]),
        ("car-2", "speed", -7, b""),
    ]);
    let (status, body) = post(good.clone()).await;
    assert_eq!((status, &body["written"]), (201, &json!(3)), "{body}");
    let car1 = readings(&server, "car-1").await;
    assert_eq!(car1.len(), 2, "{car1:?}");
    assert_eq!(car1[0]["value_b64"], "AP8=", "{car1:?}");
    assert_eq!(car1[1]["value"], "88.5", "{car1:?}");
    assert_eq!(readings(&server, "car-2").await[0]["ts_ns"], -7);

    // Each bad batch: 400 (413 over the limit) naming the offset; nothing of it is written.
    let one =
        |device: &str, ts: i64| binary(&[(device, "s", ts, b"v"), ("bad-batch", "s", ts, b"v")]);
    let mut bad_magic = one("bad-batch", 1);
    bad_magic[0] = b'J';
    let mut bad_version = one("bad-batch", 1);
    bad_version[4] = 9;
    let mut truncated = one("bad-batch", 1);
    truncated.pop();
    let mut trailing = one("bad-batch", 1);
    trailing.extend_from_slice(b"xx");
    let empty_device = binary(&[("bad-batch", "s", 1, b"v"), ("", "s", 1, b"v")]);
    let mut nul_sensor = one("bad-batch", 1);
    nul_sensor[12 + 16 + "bad-batch".len()] = 0;
    let too_many = binary(&[
        ("bad-batch", "s", 1, b""),
        ("bad-batch", "s", 2, b""),
        ("bad-batch", "s", 3, b""),
        ("bad-batch", "s", 4, b""),
    ]);
    for (name, body, status, needle) in [
        ("magic", bad_magic, 400, "at byte 0: magic"),
        ("version", bad_version, 400, "at byte 4: version 9"),
        (
            "truncated",
            truncated,
            400,
            "record 2: at byte 65: the value",
        ),
        ("trailing", trailing, 400, "at byte 66: 2 bytes follow"),
        ("empty device", empty_device, 400, "record 2: at byte 39:"),
        ("NUL in a sensor", nul_sensor, 400, "record 1: at byte 12:"),
        (
            "too many",
            too_many,
            413,
            "at byte 8: the batch has 4 records",
        ),
        ("empty body", Vec::new(), 400, "at byte 0"),
    ] {
        let (s, b) = post(body).await;
        assert_eq!(s, status, "{name}: {b}");
        let message = b["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{name}: wanted {needle:?} in {message:?}"
        );
    }
    assert!(readings(&server, "bad-batch").await.is_empty());
    // JSON lines still work on the same route (no binary Content-Type).
    let (status, _) = server
        .post(
            "/api/roamkv/v1/readings",
            "application/x-ndjson",
            br#"{"device":"car-3","sensor":"s","ts":1,"value":"x"}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 201);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_settings_apply_now_and_periodically_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let now = now_ms();
    let hour = 3_600_000;
    let d = data.clone();
    let server = Server::start(move |a| {
        a.data = Some(d);
        a.retention_interval_s = Some(1);
    })
    .await;
    let lines = |device: &str, stamps: &[i64]| -> Vec<u8> {
        stamps
            .iter()
            .map(|ts| {
                format!(r#"{{"device":"{device}","sensor":"temp","ts":{ts},"value":"{ts}"}}"#)
            })
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    };
    let write = |device: &'static str, stamps: Vec<i64>| {
        let body = lines(device, &stamps);
        let server = &server;
        async move {
            let (status, body) = server
                .post("/api/roamkv/v1/readings", "application/x-ndjson", body)
                .await;
            assert_eq!(status, 201, "{body}");
        }
    };
    write("sensor-a", vec![now - 3 * hour, now - 2 * hour, now]).await;
    write("sensor-b", vec![now - 3 * hour]).await;
    write("sensor-c", vec![now - 3 * hour]).await;

    // Applied at once: the old readings of a device that still reports go; a device left with
    // nothing departs.
    let (status, body) = put_json(
        &server,
        "/api/roamkv/v1/devices/sensor-a/retention",
        r#"{"max_age_ms": 5400000}"#,
    )
    .await;
    assert_eq!(
        (status, &body["applied_now"]),
        (200, &json!("trimmed")),
        "{body}"
    );
    let (status, body) = put_json(
        &server,
        "/api/roamkv/v1/devices/sensor-b/retention",
        r#"{"max_age_ms": 3600000}"#,
    )
    .await;
    assert_eq!(
        (status, &body["applied_now"]),
        (200, &json!("departed")),
        "{body}"
    );
    let a: Vec<i64> = readings(&server, "sensor-a")
        .await
        .iter()
        .filter_map(|r| r["ts_ns"].as_i64().map(|ns| ns / 1_000_000))
        .collect();
    assert_eq!(a, [now], "sensor-a keeps only its recent reading");
    let (status, _) = server.get("/api/roamkv/v1/devices/sensor-b/latest").await;
    assert_eq!(status, 200);
    assert!(readings(&server, "sensor-b").await.is_empty());
    assert_eq!(
        readings(&server, "sensor-c").await.len(),
        1,
        "no setting: kept"
    );

    // Applied periodically: an old reading written later goes within the interval.
    write("sensor-a", vec![now - 4 * hour]).await;
    assert!(
        eventually(10, || async {
            readings(&server, "sensor-a").await.len() == 1
        })
        .await,
        "the periodic pass did not trim the late old reading"
    );
    let (_, text) = server.get_text("/metrics").await;
    assert!(
        metric(&text, "roamkv_trims_total").is_some_and(|t| t >= 2.0),
        "{text}"
    );

    // Listed, and kept across a restart.
    let (_, list) = server.get("/api/roamkv/v1/retention").await;
    assert_eq!(
        list["retention"],
        json!([{"device": "sensor-a", "max_age_ms": 5_400_000}, {"device": "sensor-b", "max_age_ms": 3_600_000}]),
        "{list}"
    );
    server.stop().await;
    let d = data.clone();
    let server = Server::start(move |a| a.data = Some(d)).await;
    let (status, body) = server
        .get("/api/roamkv/v1/devices/sensor-a/retention")
        .await;
    assert_eq!(
        (status, &body["max_age_ms"]),
        (200, &json!(5_400_000)),
        "{body}"
    );
    let (status, _) = server
        .delete("/api/roamkv/v1/devices/sensor-a/retention")
        .await;
    assert_eq!(status, 200);
    let (status, _) = server
        .get("/api/roamkv/v1/devices/sensor-a/retention")
        .await;
    assert_eq!(status, 404);
    server.stop().await;
    let d = data.clone();
    let server = Server::start(move |a| a.data = Some(d)).await;
    let (_, list) = server.get("/api/roamkv/v1/retention").await;
    assert_eq!(
        list["retention"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_retention_settings_are_refused_and_change_nothing() {
    let server = Server::start(|_| {}).await;
    let path = "/api/roamkv/v1/devices/dev-1/retention";
    for (body, needle) in [
        (r#"{"max_age_ms": 0}"#, "at least 1"),
        (r#"{"max_age_ms": -5}"#, "positive integer"),
        (r#"{"max_age_ms": "1h"}"#, "positive integer"),
        (r#"{"max_age_ms": 1, "colour": 2}"#, "colour"),
        (r#"{}"#, "max_age_ms"),
        ("not json", "positive integer"),
        (
            r#"{"max_age_ms": 18446744073709551615}"#,
            "larger than the largest timestamp",
        ),
    ] {
        let (status, response) = put_json(&server, path, body).await;
        assert_eq!(status, 400, "{body}: {response}");
        let message = response["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(needle),
            "{body}: wanted {needle:?} in {message:?}"
        );
    }
    let long = "d".repeat(300);
    let (status, _) = put_json(
        &server,
        &format!("/api/roamkv/v1/devices/{long}/retention"),
        r#"{"max_age_ms": 5}"#,
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = server.get(path).await;
    assert_eq!(status, 404, "nothing was set");
    let (status, _) = server.delete(path).await;
    assert_eq!(status, 404);
    let (_, list) = server.get("/api/roamkv/v1/retention").await;
    assert_eq!(list["retention"], json!([]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_retention_applies_to_devices_without_a_setting_of_their_own() {
    let hour = 3_600_000;
    let now = now_ms();
    let server = Server::start(|a| {
        a.retention_interval_s = Some(1);
        a.retention_default_h = Some(1);
    })
    .await;
    let (status, body) = server.get("/api/roamkv/v1/retention").await;
    assert_eq!(
        (status, body["default_max_age_ms"].clone()),
        (200, json!(hour)),
        "{body}"
    );
    let body = [
        ("keeps-reporting", now - 2 * hour),
        ("keeps-reporting", now),
        ("own-setting", now - 2 * hour),
        ("own-setting", now),
        ("gone-quiet", now - 2 * hour),
    ]
    .iter()
    .map(|(device, ts)| {
        format!(r#"{{"device":"{device}","sensor":"temp","ts":{ts},"value":"{ts}"}}"#)
    })
    .collect::<Vec<_>>()
    .join("\n");
    // A setting of its own (3 h) wins over the default (1 h), even when longer.
    let (status, _) = put_json(
        &server,
        "/api/roamkv/v1/devices/own-setting/retention",
        r#"{"max_age_ms": 10800000}"#,
    )
    .await;
    assert_eq!(status, 200);
    let (status, answer) = server
        .post(
            "/api/roamkv/v1/readings",
            "application/x-ndjson",
            body.into_bytes(),
        )
        .await;
    assert_eq!(status, 201, "{answer}");

    let applied = eventually(10, || async {
        readings(&server, "keeps-reporting").await.len() == 1
            && server.get("/api/roamkv/v1/devices").await.1["devices"]
                .as_array()
                .is_some_and(|d| d.iter().all(|d| d["device"] != "gone-quiet"))
    })
    .await;
    assert!(applied, "the default retention did not apply within 10 s");
    assert_eq!(
        readings(&server, "keeps-reporting").await[0]["ts_ns"],
        json!(now * 1_000_000)
    );
    assert_eq!(
        readings(&server, "own-setting").await.len(),
        2,
        "its own 3 h setting keeps both"
    );
    let (_, config) = server.get("/api/v3/config").await;
    assert_eq!(config["config"]["retentionDefaultH"], 1, "{config}");
    server.stop().await;
}

async fn post(server: &Server, lines: Vec<String>) {
    let body = lines.join("\n").into_bytes();
    let (status, answer) = server
        .post("/api/roamkv/v1/readings", "application/x-ndjson", body)
        .await;
    assert_eq!(status, 201, "{answer}");
}

async fn default_of(server: &Server) -> Value {
    server.get("/api/roamkv/v1/retention").await.1["default_max_age_ms"].clone()
}

/// Without `--retention-default-h`: core-data's week on a directory this server made (readings
/// older than 168 h go at the pass, newer ones stay), and none on a directory that held devices
/// before the default existed (an upgraded gateway keeps what it kept); each directory's
/// default is recorded and kept across restarts; the flag wins over the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_flag_a_new_directory_keeps_a_week_and_an_old_one_keeps_everything() {
    let week = 168 * 3_600_000;
    let now = now_ms();
    let line = |device: &str, ts: i64| {
        format!(r#"{{"device":"{device}","sensor":"temp","ts":{ts},"value":"{ts}"}}"#)
    };

    // A new directory: a week.
    let fresh = Server::start(|a| {
        a.retention_default_h = None;
        a.retention_interval_s = Some(1);
    })
    .await;
    assert_eq!(default_of(&fresh).await, json!(week));
    let (_, config) = fresh.get("/api/v3/config").await;
    assert_eq!(config["config"]["retentionDefaultH"], 168, "{config}");
    let eight_days_ago = now - 8 * 24 * 3_600_000;
    post(
        &fresh,
        vec![
            line("last-week", eight_days_ago),
            line("both", eight_days_ago),
            line("both", now),
        ],
    )
    .await;
    let applied = eventually(10, || async {
        readings(&fresh, "both").await.len() == 1 && readings(&fresh, "last-week").await.is_empty()
    })
    .await;
    assert!(applied, "the week's retention did not apply within 10 s");
    assert_eq!(
        readings(&fresh, "both").await[0]["ts_ns"],
        json!(now * 1_000_000)
    );
    fresh.stop().await;

    // A directory that held a device before: no default, recorded, and kept so.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let start = |default_h: Option<u64>| {
        let d = data.clone();
        Server::start(move |a| {
            a.data = Some(d);
            a.retention_interval_s = Some(1);
            a.retention_default_h = default_h;
        })
    };
    let before = start(Some(0)).await;
    post(&before, vec![line("kept-for-years", eight_days_ago)]).await;
    before.stop().await;
    for _restart in 0..2 {
        let upgraded = start(None).await;
        assert_eq!(default_of(&upgraded).await, Value::Null);
        tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
        assert_eq!(readings(&upgraded, "kept-for-years").await.len(), 1);
        upgraded.stop().await;
    }
    let record =
        std::fs::read_to_string(data.join("server/retention-default.json")).expect("the record");
    assert!(record.contains("\"max_age_ms\": null"), "{record}");
    // The flag wins over the record.
    let flagged = start(Some(168)).await;
    assert_eq!(default_of(&flagged).await, json!(week));
    let gone = eventually(10, || async {
        readings(&flagged, "kept-for-years").await.is_empty()
    })
    .await;
    assert!(gone, "--retention-default-h 168 did not apply within 10 s");
    flagged.stop().await;
}
