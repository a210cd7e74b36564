//! The whole path a gateway uses: EdgeX events in over HTTP (JSON and CBOR) and over a real
//! mosquitto broker (v3 and v4 envelopes), back out through the v3 query routes, a device
//! deleted, retention by age, and the metrics that count it all; the data through a restart and
//! from the lower tier. The bus's side of the broker (readiness, the client's request queue,
//! REST events republished) is in edgex_bus.rs.

mod common;

use base64::Engine as _;
use common::*;
use roamkv_testbed::prerequisite::{self, require_tool};
use serde_json::{Value, json};

/// Prometheus's own linter: names, units, counters' `_total`, help texts; fed /metrics as served
/// to a scraper that does not ask for OpenMetrics (promtool reads the classic text format).
fn promtool_accepts(text: &str) {
    let promtool = require_tool("promtool", "prometheus").expect("promtool (Debian: prometheus)");
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let output = child.wait_with_output().expect("promtool");
    assert!(
        output.status.success() && output.stdout.is_empty() && output.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_by_http_and_mqtt_come_back_out_through_v3_routes() {
    let tool = require_tool("mosquitto", "mosquitto");
    if !prerequisite::met(
        "events_in_by_http_and_mqtt_come_back_out_through_v3_routes",
        tool,
    ) {
        return;
    }
    let broker = Mosquitto::start();
    let server = Server::start(|a| {
        a.mqtt_broker = Some(format!("127.0.0.1:{}", broker.port));
    })
    .await;
    assert!(
        server.mqtt_subscribed().await,
        "the server did not subscribe to the broker"
    );
    let now = now_ns();

    // HTTP, JSON: three events of thermo-1, one second apart.
    let mut thermo_ids = Vec::new();
    for i in 0..3 {
        let request = event(
            "thermo-1",
            now - (3 - i) * 1000 * MS,
            &[("temperature", &format!("2{i}.5")), ("humidity", "40")],
        );
        let (status, body) = server.post_event(&request).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(body["statusCode"], 201);
        assert_eq!(body["apiVersion"], "v3");
        assert_eq!(body["id"], request["event"]["id"]);
        thermo_ids.push(body["id"].as_str().expect("id").to_string());
    }

    // HTTP, CBOR: a camera's binary reading.
    let camera_event_id = uuid();
    let camera = json!({
        "apiVersion": "v3",
        "event": {
            "id": camera_event_id, "deviceName": "camera-1", "profileName": "cam",
            "sourceName": "snapshot", "origin": now,
            "readings": [{
                "origin": now, "deviceName": "camera-1", "resourceName": "image",
                "profileName": "cam", "valueType": "Binary", "mediaType": "image/jpeg",
                "binaryValue": base64::engine::general_purpose::STANDARD.encode([0xffu8, 0xd8, 0xff, 0x00]),
            }]
        }
    });
    let mut cbor = Vec::new();
    ciborium::into_writer(&camera, &mut cbor).expect("cbor");
    let (status, body) = server
        .post(
            "/api/v3/event/device-camera/cam/camera-1/snapshot",
            "application/cbor",
            cbor,
        )
        .await;
    assert_eq!(status, 201, "{body}");

    // MQTT: car-7's events, one in a v3 envelope (base64 payload), one in a v4 one (object),
    // and one message that is not an event at all.
    let first = event("car-7", now - 2000 * MS, &[("speed", "88.5")]);
    let second = event("car-7", now - 1000 * MS, &[("speed", "90.0")]);
    let v3_envelope = json!({
        "apiVersion": "v3", "contentType": "application/json", "correlationID": uuid(),
        "payload": base64::engine::general_purpose::STANDARD.encode(first.to_string()),
    });
    let v4_envelope = json!({
        "apiVersion": "v3", "contentType": "application/json", "correlationID": uuid(),
        "payload": second,
    });
    publish(
        broker.port,
        vec![
            (topic("car-7"), v3_envelope.to_string().into_bytes()),
            (topic("car-7"), v4_envelope.to_string().into_bytes()),
            (topic("car-7"), b"this is not an event".to_vec()),
        ],
    )
    .await;
    let arrived = eventually(10, || async {
        server.get("/api/v3/event/count/device/name/car-7").await.1["count"] == 2
    })
    .await;
    assert!(arrived, "the MQTT events did not arrive");

    // Counts.
    let (status, body) = server.get("/api/v3/event/count").await;
    assert_eq!((status, body["count"].as_u64()), (200, Some(6)), "{body}");
    let (_, body) = server.get("/api/v3/reading/count").await;
    assert_eq!(body["count"], 9, "{body}");
    let (_, body) = server
        .get("/api/v3/reading/count/device/name/thermo-1")
        .await;
    assert_eq!(body["count"], 6, "{body}");

    // event/all: newest first, paged.
    let (status, body) = server.get("/api/v3/event/all?limit=2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["totalCount"], 6);
    let events = body["events"].as_array().expect("events");
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["id"], camera_event_id);
    assert!(events[0]["origin"].as_i64() >= events[1]["origin"].as_i64());
    let (_, rest) = server.get("/api/v3/event/all?offset=2&limit=-1").await;
    assert_eq!(rest["events"].as_array().map(Vec::len), Some(4));
    // Past the end is 416; at the end, an empty page (core-data's CheckCountRange).
    let (status, _) = server.get("/api/v3/event/all?offset=7").await;
    assert_eq!(status, 416);
    let (status, at_end) = server.get("/api/v3/event/all?offset=6").await;
    assert_eq!(
        (status, at_end["events"].as_array().map(Vec::len)),
        (200, Some(0))
    );

    // event/device/name: the event comes back as it went in.
    let (_, body) = server.get("/api/v3/event/device/name/thermo-1").await;
    assert_eq!(body["totalCount"], 3);
    let newest = &body["events"][0];
    assert_eq!(newest["id"], thermo_ids[2].as_str());
    assert_eq!(newest["tags"], json!({"site": "test-bench"}));
    assert_eq!(newest["sourceName"], "readings");
    let temperature = newest["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .find(|r| r["resourceName"] == "temperature")
        .expect("temperature");
    assert_eq!(temperature["value"], "22.5");
    assert_eq!(temperature["units"], "C");
    assert_eq!(temperature["valueType"], "Float64");
    assert_eq!(temperature["origin"], now - 1000 * MS);

    // event/start/end selects by origin (ns, inclusive).
    let (_, body) = server
        .get(&format!(
            "/api/v3/event/start/{}/end/{}",
            now - 2000 * MS,
            now - 1000 * MS
        ))
        .await;
    assert_eq!(body["totalCount"], 4, "{body}"); // thermo-1 x2, car-7 x2

    // Readings routes.
    let (_, body) = server.get("/api/v3/reading/resourceName/speed").await;
    let speeds: Vec<&str> = body["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| r["value"].as_str().expect("value"))
        .collect();
    assert_eq!(speeds, vec!["90.0", "88.5"]);
    let (_, body) = server.get("/api/v3/reading/device/name/camera-1").await;
    let image = &body["readings"][0];
    assert_eq!(image["mediaType"], "image/jpeg");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(image["binaryValue"].as_str().expect("binaryValue"))
            .expect("base64"),
        vec![0xff, 0xd8, 0xff, 0x00]
    );
    let (_, body) = server
        .get(&format!(
            "/api/v3/reading/device/name/thermo-1/resourceName/humidity/start/{}/end/{}",
            now - 3000 * MS,
            now - 2000 * MS
        ))
        .await;
    assert_eq!(body["totalCount"], 2, "{body}");
    let (_, body) = server.get("/api/v3/reading/all?limit=1").await;
    assert_eq!(body["totalCount"], 9);
    assert_eq!(body["readings"].as_array().map(Vec::len), Some(1));

    // Delete a device: one departure.
    let (status, body) = server.delete("/api/v3/event/device/name/car-7").await;
    assert_eq!((status, body["statusCode"].as_u64()), (202, Some(202)));
    let (_, body) = server.get("/api/v3/event/count/device/name/car-7").await;
    assert_eq!(body["count"], 0);

    // Deletion by age: an old device goes whole; a device that still reports loses its old
    // readings only; devices with only recent readings are untouched.
    let old = event("old-1", now - 7200 * 1000 * MS, &[("temperature", "1.0")]);
    assert_eq!(server.post_event(&old).await.0, 201);
    let mixed_old = event("mixed-1", now - 7200 * 1000 * MS, &[("temperature", "2.0")]);
    let mixed_new = event("mixed-1", now, &[("temperature", "3.0")]);
    assert_eq!(server.post_event(&mixed_old).await.0, 201);
    assert_eq!(server.post_event(&mixed_new).await.0, 201);
    let (status, body) = server
        .delete(&format!("/api/v3/event/age/{}", 3600 * 1000 * MS))
        .await;
    assert_eq!(status, 202, "{body}");
    assert!(
        body["message"].as_str().expect("message").contains(
            "1 devices had nothing newer and were removed, 1 were trimmed, 2 had nothing older"
        ),
        "{body}"
    );
    let (_, body) = server.get("/api/v3/event/count").await;
    assert_eq!(body["count"], 5, "{body}"); // thermo-1 x3 + camera-1 + mixed-1's new event
    let (_, body) = server.get("/api/v3/reading/device/name/mixed-1").await;
    assert_eq!(body["totalCount"], 1, "{body}");
    assert_eq!(body["readings"][0]["value"], "3.0", "{body}");

    // Metrics count what happened. A scraper that does not ask for OpenMetrics (curl, promtool,
    // older Prometheus) gets the classic text; one that asks (Prometheus by default) gets it.
    let classic = server
        .client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("scrape");
    assert_eq!(classic.status(), 200);
    assert_eq!(
        classic.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = classic.text().await.expect("body");
    assert!(!text.contains("# EOF"), "{text}");
    let openmetrics = server
        .client
        .get(format!("{}/metrics", server.base))
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )
        .send()
        .await
        .expect("scrape");
    assert_eq!(
        openmetrics.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let openmetrics = openmetrics.text().await.expect("body");
    assert!(
        openmetrics.ends_with("# EOF\n")
            && openmetrics.contains("# TYPE roamkv_ingested_readings counter"),
        "{openmetrics}"
    );
    assert_eq!(
        metric(&text, r#"roamkv_ingested_readings_total{source="mqtt"}"#),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"roamkv_ingested_readings_total{source="http"}"#),
        Some(10.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"roamkv_rejected_total{source="mqtt",status="400"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"roamkv_devices{tier="upper"}"#),
        Some(3.0),
        "{text}"
    );
    assert!(
        metric(&text, "roamkv_departures_total").is_some_and(|d| d >= 2.0),
        "{text}"
    );
    assert_eq!(metric(&text, "roamkv_mqtt_connected"), Some(1.0), "{text}");
    // The engine's TRIM records: mixed-1's, and the index of event ids' (its old entries).
    assert_eq!(metric(&text, "roamkv_trims_total"), Some(2.0), "{text}");
    assert!(
        text.contains(r#"roamkv_http_request_duration_seconds_count{route="/api/v3/event/{service_name}/{profile_name}/{device_name}/{source_name}"} 7"#),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            &format!(
                r#"roamkv_build_info{{version="{}"}}"#,
                env!("CARGO_PKG_VERSION")
            )
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        metric(&text, "process_resident_memory_bytes").is_some_and(|b| b > 1e6)
            && metric(&text, "process_cpu_seconds_total").is_some_and(|s| s > 0.0)
            && metric(&text, "process_open_fds").is_some_and(|n| n > 3.0),
        "{text}"
    );
    promtool_accepts(&text);

    // Ping, version, config.
    let (status, body) = server.get("/api/v3/ping").await;
    assert_eq!(
        (status, body["serviceName"].as_str()),
        (200, Some("core-data"))
    );
    assert!(
        body["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with("GMT"))
    );
    let (_, body) = server.get("/api/v3/version").await;
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    let (_, body) = server.get("/api/v3/config").await;
    assert_eq!(body["config"]["durability"], "sync");
    assert_eq!(body["config"]["authEnabled"], false);

    // Found by id (event_by_id.rs tests the index itself).
    let (status, body) = server
        .get(&format!("/api/v3/event/id/{}", thermo_ids[0]))
        .await;
    assert_eq!(
        (status, body["event"]["id"].clone()),
        (200, json!(thermo_ids[0])),
        "{body}"
    );

    server.stop().await;
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let now = now_ns();
    {
        let d = data.clone();
        let server = Server::start(move |a| a.data = Some(d)).await;
        let (status, _) = server
            .post_event(&event("drone-3", now, &[("altitude", "120")]))
            .await;
        assert_eq!(status, 201);
        server.stop().await;
    }
    let d = data.clone();
    let server = Server::start(move |a| a.data = Some(d)).await;
    let (_, body) = server.get("/api/v3/reading/device/name/drone-3").await;
    assert_eq!(body["readings"][0]["value"], Value::from("120"), "{body}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_devices_are_served_and_deleted_from_the_lower_tier() {
    let server = Server::start(|a| a.management_time_ms = Some(300)).await;
    let now = now_ns();
    for i in 0..2 {
        let request = event(
            "bus-1",
            now - i * 1000 * MS,
            &[("speed", &format!("4{i}")), ("doors", "0")],
        );
        assert_eq!(server.post_event(&request).await.0, 201);
    }
    // Settled: past its management time, and every reading out of the log (its segment is
    // sealed and aged out a management time later).
    let settled = eventually(15, || async {
        let device = &server.get("/api/roamkv/v1/devices").await.1["devices"][0];
        device["tier"] == "lower" && device["log_readings"] == 0 && device["lower_runs"] != 0
    })
    .await;
    assert!(settled, "bus-1 did not settle in the lower tier");

    let (_, body) = server.get("/api/v3/event/device/name/bus-1").await;
    assert_eq!(body["totalCount"], 2, "{body}");
    assert_eq!(
        body["events"][0]["readings"].as_array().map(Vec::len),
        Some(2)
    );
    let (_, body) = server
        .get("/api/v3/reading/device/name/bus-1/resourceName/speed")
        .await;
    let speeds: Vec<&str> = body["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| r["value"].as_str().expect("value"))
        .collect();
    assert_eq!(speeds, vec!["40", "41"]);
    let (_, body) = server
        .get("/api/roamkv/v1/devices/bus-1/latest?sensor=speed")
        .await;
    assert_eq!(body["readings"][0]["ts_ns"], now, "{body}");

    let (status, _) = server.delete("/api/v3/event/device/name/bus-1").await;
    assert_eq!(status, 202);
    let (_, body) = server.get("/api/v3/event/count/device/name/bus-1").await;
    assert_eq!(body["count"], 0);
    let (_, text) = server.get_text("/metrics").await;
    // The clients' devices: the server's index of event ids is not counted among them.
    assert_eq!(
        metric(&text, r#"roamkv_devices{tier="lower"}"#),
        Some(0.0),
        "{text}"
    );
    assert!(
        metric(&text, "roamkv_moved_readings_total").is_some_and(|m| m >= 1.0),
        "{text}"
    );
    // Under sync (the default) the commits were device flushes, and each wrote whole blocks.
    let commits = metric(&text, "roamkv_group_commits_total").unwrap_or(0.0);
    let syncs = metric(&text, "roamkv_fdatasyncs_total").unwrap_or(0.0);
    assert!(commits >= 1.0 && syncs >= 1.0, "{text}");
    assert!(
        metric(&text, "roamkv_log_block_written_bytes_total")
            .is_some_and(|b| b >= 4096.0 * commits),
        "{text}"
    );
    server.stop().await;
}
