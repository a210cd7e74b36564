//! The routes and parameters of EdgeX core-data's v3 API (openapi/core-data.yaml of
//! edgexfoundry/edgex-go) beyond the main ones: the time-range reading routes of a resource and
//! of a device (with the `resourceNames` body), `POST /secret` (501, with why), core-data 4's
//! `numeric` and `aggregateFunc` (refused with 501, never ignored), a `limit` above
//! MaxResultCount (416, said, not clamped), `X-Correlation-ID` (echoed, made when missing,
//! refused when not a UUID), and values held to their valueType.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_roamkv_does_not_compute_are_refused_not_ignored() {
    let server = Server::start(|args| args.max_result_count = Some(50)).await;
    load(&server, now_ns() - 10_000_000_000).await;

    for (query, want, says) in [
        (
            "aggregateFunc=AVG",
            501,
            "aggregateFunc=AVG is not supported",
        ),
        ("aggregateFunc=avg", 501, "not supported"),
        (
            "aggregateFunc=MEDIAN",
            400,
            "not one of MIN, MAX, COUNT, SUM, AVG",
        ),
        ("numeric=true", 501, "numeric=true is not supported"),
        ("numeric=maybe", 400, "not true or false"),
        ("limit=51", 416, "above MaxResultCount 50"),
    ] {
        let (status, body) = server.get(&format!("/api/v3/reading/all?{query}")).await;
        assert_eq!(status, want, "{query}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| m.contains(says)),
            "{query}: {body}"
        );
        assert_eq!(body["statusCode"], want, "the error body's shape: {body}");
    }
    let (status, body) = server
        .get("/api/v3/reading/all?numeric=false&limit=50")
        .await;
    assert_eq!(
        (status, body["totalCount"].clone()),
        (200, json!(7)),
        "{body}"
    );
    let (status, body) = server.get("/api/v3/event/all?numeric=true").await;
    assert_eq!(status, 501, "{body}");

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
    assert!(uuid::Uuid::parse_str(&made).is_ok(), "{made}");
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
    let (_, count) = server.get("/api/v3/reading/count").await;
    assert_eq!(
        count["count"], 0,
        "nothing of a refused event is written: {count}"
    );
    server.stop().await;
}
