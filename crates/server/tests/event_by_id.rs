//! Events found and deleted by id through the index of event ids (docs/SERVER.md, "Events by
//! id"): as posted, across a restart and after the move to the lower tier; a deletion gone from
//! every answer and durable; an entry of the first form read; the index off (501); the server's own device neither listed nor
//! writable by clients.

mod common;

use common::{Server, event, eventually, now_ns, uuid};
use serde_json::{Value, json};

/// Values of a device's readings, oldest first, through the v3 route.
async fn values(server: &Server, device: &str) -> Vec<String> {
    let (_, body) = server
        .get(&format!("/api/v3/reading/device/name/{device}?limit=-1"))
        .await;
    let mut readings: Vec<(i64, String)> = body["readings"]
        .as_array()
        .unwrap_or_else(|| panic!("no readings in {body}"))
        .iter()
        .map(|r| {
            (
                r["origin"].as_i64().unwrap_or_default(),
                r["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    readings.sort();
    readings.into_iter().map(|(_, v)| v).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_found_and_deleted_by_id_across_a_restart_and_the_move_to_the_lower_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let start = || {
        let d = data.clone();
        Server::start(move |a| {
            a.data = Some(d);
            a.management_time_ms = Some(300);
        })
    };
    let server = start().await;
    let t0 = now_ns() - 60_000_000_000;
    let posted: Vec<Value> = (0..3i64)
        .map(|i| {
            let device = if i == 2 { "car-2" } else { "car-1" };
            let speed = format!("{}.5", 10 + i);
            event(
                device,
                t0 + i * 1_000_000_000,
                &[("speed", &speed), ("fuel", "0.5")],
            )
        })
        .collect();
    for request in &posted {
        let (status, body) = server.post_event(request).await;
        assert_eq!(status, 201, "{body}");
    }
    let id = |i: usize| posted[i]["event"]["id"].as_str().expect("id").to_string();

    // Found as posted: its device, origin, tags and both readings.
    let (status, body) = server.get(&format!("/api/v3/event/id/{}", id(1))).await;
    assert_eq!(status, 200, "{body}");
    let found = &body["event"];
    assert_eq!(found["deviceName"], "car-1");
    assert_eq!(found["origin"], posted[1]["event"]["origin"]);
    assert_eq!(found["tags"], json!({"site": "test-bench"}));
    let mut got: Vec<&str> = found["readings"]
        .as_array()
        .expect("readings")
        .iter()
        .map(|r| r["value"].as_str().expect("value"))
        .collect();
    got.sort_unstable();
    assert_eq!(got, ["0.5", "11.5"]);
    let (status, body) = server.get(&format!("/api/v3/event/id/{}", uuid())).await;
    assert_eq!(status, 404, "an id no event has: {body}");
    let (status, body) = server.get("/api/v3/event/id/not-a-uuid").await;
    assert_eq!(status, 400, "{body}");

    // Deleted: gone from the id, the readings, the counts and the native scan; again: 404.
    let (status, body) = server.delete(&format!("/api/v3/event/id/{}", id(0))).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = server.get(&format!("/api/v3/event/id/{}", id(0))).await;
    assert_eq!(status, 404);
    let (status, _) = server.delete(&format!("/api/v3/event/id/{}", id(0))).await;
    assert_eq!(status, 404);
    assert_eq!(
        values(&server, "car-1").await,
        ["0.5", "11.5"],
        "event 1's readings only"
    );
    let (_, body) = server.get("/api/v3/event/count").await;
    assert_eq!(body["count"], 2, "{body}");
    let (_, body) = server.get("/api/roamkv/v1/devices/car-1/readings").await;
    assert_eq!(body["readings"].as_array().map(Vec::len), Some(2), "{body}");

    // The server's own device is not listed, and clients cannot write into it.
    let (_, body) = server.get("/api/roamkv/v1/devices").await;
    let names: Vec<&str> = body["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["device"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["car-1", "car-2"]);
    let line = r#"{"device":"\u0001edgex.event-ids","sensor":"x","ts_ns":1,"value":"v"}"#;
    let (status, body) = server
        .post(
            "/api/roamkv/v1/readings",
            "application/x-ndjson",
            line.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("U+0001")),
        "{body}"
    );
    let (status, body) = server
        .get("/api/roamkv/v1/devices/%01edgex.event-ids/readings")
        .await;
    assert_eq!(status, 400, "{body}");
    server.stop().await;

    // An entry of the first form (a map with every origin whole, written before the compact
    // entry): event 2's, put back as an older server wrote it, is read as before.
    {
        let engine = roamkv_engine::Engine::open(&data, Default::default()).expect("open");
        let origin = t0 + 2_000_000_000;
        let mut first_form = Vec::new();
        ciborium::into_writer(
            &json!({"d": "car-2", "r": [["fuel", origin], ["speed", origin]]}),
            &mut first_form,
        )
        .expect("encode");
        assert_eq!(first_form[0], 0xa2, "a map of two");
        let index = roamkv_wire::edgex::event_index::INDEX_DEVICE;
        let compact = engine
            .get(index, &id(2), origin)
            .expect("get")
            .expect("entry");
        assert_eq!(compact[0], 0x82, "what the server writes: {compact:02x?}");
        engine.put(index, &id(2), origin, &first_form).expect("put");
    }

    // After a restart and the move of every device (the index's too) to the lower tier.
    let server = start().await;
    // The engine's own counts: car-1, car-2 and the index of event ids, all placed below.
    let settled = eventually(15, || async {
        let (_, stats) = server.get("/api/roamkv/v1/stats").await;
        stats["upper"]["devices"] == 0 && stats["lower"]["devices"] == 3
    })
    .await;
    assert!(settled, "the devices did not settle in the lower tier");
    let (status, body) = server.get(&format!("/api/v3/event/id/{}", id(2))).await;
    assert_eq!(
        (status, body["event"]["deviceName"].clone()),
        (200, json!("car-2")),
        "{body}"
    );
    let (status, _) = server.get(&format!("/api/v3/event/id/{}", id(0))).await;
    assert_eq!(status, 404, "the deletion is durable");
    assert_eq!(values(&server, "car-1").await.len(), 2);
    // A departed device's events are not found any more.
    let (status, _) = server.delete("/api/v3/event/device/name/car-2").await;
    assert_eq!(status, 202);
    let (status, _) = server.get(&format!("/api/v3/event/id/{}", id(2))).await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_index_off_ids_answer_501_and_nothing_is_indexed() {
    let server = Server::start(|a| a.event_id_index = Some(false)).await;
    let request = event("car-1", now_ns(), &[("speed", "1")]);
    assert_eq!(server.post_event(&request).await.0, 201);
    let id = request["event"]["id"].as_str().expect("id");
    let (status, body) = server.get(&format!("/api/v3/event/id/{id}")).await;
    assert_eq!(status, 501, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("--event-id-index"))
    );
    let (_, text) = server.get_text("/metrics").await;
    assert_eq!(
        common::metric(&text, r#"roamkv_devices{tier="upper"}"#),
        Some(1.0),
        "car-1 alone: no index device"
    );
    server.stop().await;
}
