//! The routes and parameters of EdgeX core-data's v3 API (openapi/core-data.yaml of
//! edgexfoundry/edgex-go) beyond the main ones: the time-range reading routes of a resource and
//! of a device (with the `resourceNames` body), `POST /secret` (501, with why), core-data 4's
//! `numeric` and `aggregateFunc` (computed as core-data computes them) and roamkv's `every`
//! buckets, a `limit` above MaxResultCount (400, said, not clamped), `X-Correlation-ID` (echoed,
//! made when missing, refused when not a UUID), values held to their valueType, and an event's
//! JSON text read with its escapes (the route reads names borrowed from the body).

mod common;

use common::{Server, event, now_ns};
use serde_json::{Value, json};

/// Three readings a second apart of two resources of `car-1`, and one of `car-2`.
async fn load(server: &Server, t0: i64) {
    for (device, origin, resources) in [
        ("car-1", t0, &[("speed", "10.5"), ("fuel", "0.5")][..]),
        (
            "car-1",
            t0 + 1_000_000_000,
            &[("speed", "11.5"), ("fuel", "0.4")],
        ),
        (
            "car-1",
            t0 + 2_000_000_000,
            &[("speed", "12.5"), ("fuel", "0.3")],
        ),
        ("car-2", t0 + 1_000_000_000, &[("speed", "99")]),
    ] {
        let (status, body) = server.post_event(&event(device, origin, resources)).await;
        assert_eq!(status, 201, "{body}");
    }
}

fn values(body: &Value) -> Vec<String> {
    body["readings"]
        .as_array()
        .unwrap_or_else(|| panic!("no readings in {body}"))
        .iter()
        .map(|r| {
            format!(
                "{}/{}={}",
                r["deviceName"].as_str().unwrap_or("?"),
                r["resourceName"].as_str().unwrap_or("?"),
                r["value"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_range_routes_of_a_resource_and_of_a_device_answer() {
    let server = Server::start(|_| {}).await;
    let t0 = now_ns() - 10_000_000_000;
    load(&server, t0).await;
    let (t1, t2) = (t0 + 1_000_000_000, t0 + 2_000_000_000);

    let (status, body) = server
        .get(&format!(
            "/api/v3/reading/resourceName/speed/start/{t1}/end/{t2}"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["totalCount"], 3, "{body}");
    assert_eq!(
        values(&body),
        ["car-1/speed=12.5", "car-1/speed=11.5", "car-2/speed=99"]
    );

    let path = format!("/api/v3/reading/device/name/car-1/start/{t0}/end/{t1}");
    let (status, body) = server.get(&path).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["totalCount"], 4,
        "both resources, the first two seconds: {body}"
    );

    // Every device and resource in a window: car-1's two and car-2's one at t1.
    let (status, body) = server
        .get(&format!("/api/v3/reading/start/{t1}/end/{t1}"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["totalCount"], 3, "{body}");
    // A window past i64 (the document allows any integer) is one no reading is in.
    let (status, body) = server
        .get("/api/v3/reading/start/99999999999999999999/end/99999999999999999999")
        .await;
    assert_eq!(
        (status, body["totalCount"].clone()),
        (200, json!(0)),
        "{body}"
    );

    // The body narrows it to some resources, as core-data's does (a GET with a body).
    let client = reqwest::Client::new();
    let answer = client
        .get(format!("http://{}{path}", server.addr()))
        .json(&json!({"resourceNames": ["fuel"]}))
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(values(&body), ["car-1/fuel=0.4", "car-1/fuel=0.5"]);
    let answer = client
        .get(format!("http://{}{path}", server.addr()))
        .body("{\"resourceNames\": 7}")
        .send()
        .await
        .expect("send");
    assert_eq!(
        answer.status(),
        400,
        "a body that is not resourceNames is refused"
    );

    let (status, body) = server
        .get(&format!(
            "/api/v3/reading/device/name/car-1/start/{t2}/end/{t0}"
        ))
        .await;
    assert_eq!(status, 400, "end before start: {body}");
    server.stop().await;
}

/// (device, resource, value) of an aggregate answer's readings, in its order.
fn groups(body: &Value) -> Vec<(String, String, Value)> {
    body["readings"]
        .as_array()
        .unwrap_or_else(|| panic!("no readings in {body}"))
        .iter()
        .map(|r| {
            (
                r["deviceName"].as_str().unwrap_or_default().to_string(),
                r["resourceName"].as_str().unwrap_or_default().to_string(),
                r["value"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_and_numeric_values_answer_as_core_data_computes_them() {
    let server = Server::start(|args| args.max_result_count = Some(50)).await;
    let t0 = now_ns() - 10_000_000_000;
    load(&server, t0).await;
    let g = |d: &str, r: &str, v: Value| (d.to_string(), r.to_string(), v);

    // Groups by device, profile, resource and type, in device order; the function's answer.
    let (status, body) = server.get("/api/v3/reading/all?aggregateFunc=max").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["aggregateFunc"], "MAX");
    assert_eq!(
        groups(&body),
        [
            g("car-1", "fuel", json!(0.5)),
            g("car-1", "speed", json!(12.5)),
            g("car-2", "speed", json!(99.0)),
        ]
    );
    let (_, body) = server
        .get("/api/v3/reading/resourceName/speed?aggregateFunc=SUM")
        .await;
    assert_eq!(
        groups(&body),
        [
            g("car-1", "speed", json!(34.5)),
            g("car-2", "speed", json!(99.0))
        ]
    );
    let (_, body) = server
        .get("/api/v3/reading/device/name/car-1?aggregateFunc=COUNT&offset=1")
        .await;
    assert_eq!(groups(&body), [g("car-1", "speed", json!(3))]);
    assert_eq!(body["readings"][0]["valueType"], "Uint64");
    // A window: the two later readings of car-1's speed.
    let (t1, t2) = (t0 + 1_000_000_000, t0 + 2_000_000_000);
    let (_, body) = server
        .get(&format!(
            "/api/v3/reading/device/name/car-1/resourceName/speed/start/{t1}/end/{t2}?aggregateFunc=MIN"
        ))
        .await;
    assert_eq!(groups(&body), [g("car-1", "speed", json!(11.5))]);
    // Buckets (roamkv's `every`): one a second, origin at the bucket's start.
    let (status, body) = server
        .get("/api/v3/reading/device/name/car-1/resourceName/fuel?aggregateFunc=AVG&every=1s")
        .await;
    assert_eq!(status, 200, "{body}");
    let readings = body["readings"].as_array().expect("readings");
    assert_eq!(readings.len(), 3, "{body}");
    for (r, want) in readings.iter().zip([0.5, 0.4, 0.3]) {
        assert_eq!(r["value"], json!(want), "{body}");
        let origin = r["origin"].as_i64().expect("origin");
        assert_eq!(origin % 1_000_000_000, 0, "{body}");
    }

    // numeric=true: numbers where the type is numeric, on readings and on events' readings.
    let (_, body) = server
        .get("/api/v3/reading/device/name/car-2?numeric=true")
        .await;
    assert_eq!(body["readings"][0]["value"], json!(99.0), "{body}");
    let (_, body) = server
        .get("/api/v3/event/device/name/car-2?numeric=1")
        .await;
    assert_eq!(
        body["events"][0]["readings"][0]["value"],
        json!(99.0),
        "{body}"
    );
    let (_, body) = server
        .get("/api/v3/reading/device/name/car-2?numeric=false")
        .await;
    assert_eq!(body["readings"][0]["value"], "99", "{body}");

    for (query, says) in [
        (
            "aggregateFunc=MEDIAN",
            "not one of MIN, MAX, COUNT, SUM, AVG",
        ),
        ("numeric=maybe", "not true or false"),
        ("limit=51", "above MaxResultCount 50"),
        ("offset=-2", "not an integer from -1"),
        ("every=1m", "give aggregateFunc"),
        ("aggregateFunc=AVG&every=soon", "not a duration"),
    ] {
        let (status, body) = server.get(&format!("/api/v3/reading/all?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(says)),
            "{query}: {body}"
        );
        assert_eq!(body["statusCode"], 400, "the error body's shape: {body}");
    }
    // offset=-1: no total is counted (core-data answers 0).
    let (status, body) = server.get("/api/v3/reading/all?offset=-1&limit=50").await;
    assert_eq!(
        (status, body["totalCount"].clone()),
        (200, json!(0)),
        "{body}"
    );
    assert_eq!(body["readings"].as_array().map(Vec::len), Some(7), "{body}");

    let (status, body) = server
        .post(
            "/api/v3/secret",
            "application/json",
            br#"{"apiVersion":"v3","secretName":"x","secretData":[{"key":"k","value":"v"}]}"#
                .to_vec(),
        )
        .await;
    assert_eq!(status, 501, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("secret store")),
        "{body}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correlation_ids_are_echoed_made_and_checked() {
    let server = Server::start(|_| {}).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/api/v3/ping", server.addr());
    let id = "14a42ea6-c394-41c3-8bcd-a29b9f5e6835";
    let answer = client
        .get(&url)
        .header("X-Correlation-ID", id)
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-correlation-id"], id);
    let answer = client.get(&url).send().await.expect("send");
    let made = answer.headers()["x-correlation-id"]
        .to_str()
        .expect("text")
        .to_string();
    let made = uuid::Uuid::parse_str(&made).expect("a UUID");
    assert_eq!(made.get_version_num(), 4, "{made}");
    let answer = client
        .get(&url)
        .header("X-Correlation-ID", "not-a-uuid")
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_held_to_their_value_type_and_a_refused_event_writes_nothing() {
    let server = Server::start(|_| {}).await;
    let origin = now_ns();
    for (value_type, value) in [
        ("Float64", "abc"),
        ("Bool", "maybe"),
        ("Uint8", "300"),
        ("Int64", "9223372036854775808"),
        ("Float64", "1e999"),
    ] {
        let mut request = event("car-9", origin, &[("ok", "1.5"), ("bad", value)]);
        request["event"]["readings"][1]["valueType"] = json!(value_type);
        let (status, body) = server.post_event(&request).await;
        assert_eq!(status, 400, "{value_type} {value:?}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(value_type) && message.contains(value),
            "{message}"
        );
    }
    // An origin in milliseconds (EdgeX's are nanoseconds) would be stored in 1970: refused.
    let in_ms = origin / 1_000_000;
    let (status, body) = server
        .post_event(&event("car-9", in_ms, &[("ok", "1.5")]))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("milliseconds")),
        "{body}"
    );
    let (_, count) = server.get("/api/v3/reading/count").await;
    assert_eq!(
        count["count"], 0,
        "nothing of a refused event is written: {count}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_text_in_an_event_is_stored_as_its_text_and_the_answer_is_core_datas() {
    let server = Server::start(|_| {}).await;
    let origin = now_ns();
    let id = "6b9c0a3e-0a52-4f4e-9d3c-2f0c3e1b7a10";
    // Escapes in a reading's resource name, units and value, and in the event's source name:
    // read as the text they stand for, not as the body's bytes.
    let body = format!(
        r#"{{"apiVersion":"v3","event":{{"apiVersion":"v3","id":"{id}","deviceName":"esc-1","profileName":"p","sourceName":"s\u0031","origin":{origin},"readings":[{{"origin":{origin},"deviceName":"esc-1","resourceName":"temp\u00e9\/in","profileName":"p","valueType":"String","units":"\u00b0C","value":"say \"hi\"\n"}}]}}}}"#
    );
    let answer = reqwest::Client::new()
        .post(format!(
            "http://{}/api/v3/event/device-virtual/p/esc-1/s1",
            server.addr()
        ))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(answer.status(), 201);
    // core-data's BaseWithIdResponse, byte for byte as before.
    assert_eq!(
        answer.text().await.expect("body"),
        format!(r#"{{"apiVersion":"v3","id":"{id}","statusCode":201}}"#)
    );
    let (status, body) = server.get("/api/v3/reading/device/name/esc-1").await;
    assert_eq!(status, 200, "{body}");
    let reading = &body["readings"][0];
    assert_eq!(reading["resourceName"], "temp\u{e9}/in", "{body}");
    assert_eq!(reading["units"], "\u{b0}C", "{body}");
    assert_eq!(reading["value"], "say \"hi\"\n", "{body}");
    let (status, body) = server.get(&format!("/api/v3/event/id/{id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["event"]["sourceName"], "s1", "{body}");
    server.stop().await;
}
