//! A query parameter a route does not take is refused with 400 on every route of the EdgeX and
//! native APIs (crates/server/src/http/query.rs), naming the parameter and the ones the route
//! takes, and changing nothing; the parameters EdgeX's own Go clients send (offset and limit,
//! go-mod-core-contracts v4 clients/http/event.go and reading.go) are taken on every route they
//! are sent to.

mod common;

use common::{Server, event, now_ns};
use reqwest::Method;
use serde_json::Value;

const EVENT: &str = "offset, limit, numeric";
const READING: &str = "offset, limit, numeric, aggregateFunc, every";
const NONE: &str = "takes no query parameters";

async fn send(server: &Server, method: Method, path: &str) -> (u16, Value) {
    let response = server
        .client
        .request(method, format!("{}{path}", server.base))
        .header("content-type", "application/json")
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused_on_every_route_and_change_nothing() {
    let server = Server::start(|_| {}).await;
    let origin = now_ns() - 3_600_000_000_000;
    for i in 0..3 {
        let (s, b) = server
            .post_event(&event("d1", origin + i, &[("r1", "1.5")]))
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let id = common::uuid();
    let end = now_ns();
    let events = [
        "/api/v3/event/all".to_string(),
        "/api/v3/event/device/name/d1".to_string(),
        format!("/api/v3/event/start/0/end/{end}"),
    ];
    let readings = [
        "/api/v3/reading/all".to_string(),
        "/api/v3/reading/device/name/d1".to_string(),
        "/api/v3/reading/resourceName/r1".to_string(),
        "/api/v3/reading/device/name/d1/resourceName/r1".to_string(),
        format!("/api/v3/reading/start/0/end/{end}"),
        format!("/api/v3/reading/resourceName/r1/start/0/end/{end}"),
        format!("/api/v3/reading/device/name/d1/resourceName/r1/start/0/end/{end}"),
        format!("/api/v3/reading/device/name/d1/start/0/end/{end}"),
    ];
    let mut routes: Vec<(Method, String, &str)> = Vec::new();
    routes.extend(events.iter().map(|p| (Method::GET, p.clone(), EVENT)));
    routes.extend(readings.iter().map(|p| (Method::GET, p.clone(), READING)));
    for path in [
        "/api/v3/event/count",
        "/api/v3/event/count/device/name/d1",
        "/api/v3/reading/count",
        "/api/v3/reading/count/device/name/d1",
        &format!("/api/v3/event/id/{id}"),
        "/api/v3/ping",
        "/api/v3/version",
        "/api/v3/config",
        "/api/roamkv/v1/devices",
        "/api/roamkv/v1/stats",
        "/api/roamkv/v1/devices/d1/retention",
        "/api/roamkv/v1/retention",
        "/api/roamkv/v1/sink",
        "/api/roamkv/v1/departures",
        "/api/roamkv/v1/openapi.json",
        "/health",
        "/ready",
        "/metrics",
        "/",
        "/api/roamkv/v1/edge",
        "/api/roamkv/v1/handoffs",
    ] {
        routes.push((Method::GET, path.to_string(), NONE));
    }
    for path in [
        "/api/v3/event/device/name/d1",
        "/api/v3/event/age/0",
        &format!("/api/v3/event/id/{id}"),
        "/api/roamkv/v1/devices/d1",
        "/api/roamkv/v1/devices/d1/retention",
    ] {
        routes.push((Method::DELETE, path.to_string(), NONE));
    }
    for path in [
        "/api/v3/event/device-virtual/p/d1/s",
        "/api/v3/secret",
        "/api/roamkv/v1/readings",
        "/api/roamkv/v1/backup",
    ] {
        routes.push((Method::POST, path.to_string(), NONE));
    }
    routes.push((
        Method::PUT,
        "/api/roamkv/v1/devices/d1/retention".into(),
        NONE,
    ));
    routes.push((
        Method::GET,
        "/api/roamkv/v1/devices/d1/latest".into(),
        "takes sensor",
    ));
    routes.push((
        Method::GET,
        "/api/roamkv/v1/devices/d1/readings".into(),
        "takes sensor, from, to, from_ns, to_ns, limit, after",
    ));
    routes.push((
        Method::GET,
        "/api/roamkv/v1/export".into(),
        "takes device, sensor, start, end, start_ns, end_ns, format",
    ));
    for (method, path, takes) in &routes {
        let (s, b) = send(&server, method.clone(), &format!("{path}?limt=5")).await;
        let message = b["message"].as_str().unwrap_or_default();
        assert!(
            s == 400
                && message.contains("unknown query parameter \"limt\"")
                && message.contains(takes),
            "{method} {path}?limt=5: {s} {b}"
        );
    }

    // Nothing was deleted, departed or written by the refused requests.
    let (s, b) = server.get("/api/v3/reading/count").await;
    assert_eq!((s, b["count"].as_u64()), (200, Some(3)), "{b}");

    // The two typos: `form=-1m` on the native scan was the whole history (now 400,
    // with the parameter it meant), `limt=` on the v3 routes was ignored.
    let scan = "/api/roamkv/v1/devices/d1/readings";
    let (s, b) = server.get(&format!("{scan}?form=-1m")).await;
    let message = b["message"].as_str().unwrap_or_default();
    assert!(
        s == 400 && message.contains("\"form\" (did you mean from?)"),
        "{s} {b}"
    );
    let (s, b) = server.get(&format!("{scan}?from=-1m")).await;
    assert_eq!(
        (s, b["readings"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{b}"
    );
    let (s, b) = server.get(&format!("{scan}?from_ns=0&limit=2")).await;
    assert_eq!(
        (s, b["readings"].as_array().map(Vec::len)),
        (200, Some(2)),
        "{b}"
    );
    let (s, b) = server.get("/api/v3/reading/all?limit=1").await;
    assert_eq!(
        (s, b["readings"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{b}"
    );
    // A parameter given twice is refused, not settled by taking one of them.
    let (s, b) = server.get("/api/v3/reading/all?limit=1&limit=3").await;
    assert!(
        s == 400
            && b["message"]
                .as_str()
                .unwrap_or_default()
                .contains("given twice"),
        "{s} {b}"
    );

    // What EdgeX's EventClient and ReadingClient send (url.Values with offset and limit) on
    // every route they call: taken.
    for path in events.iter().chain(readings.iter()) {
        let (s, b) = server.get(&format!("{path}?limit=20&offset=0")).await;
        assert_eq!(s, 200, "{path}: {b}");
    }
    let (s, b) = server
        .get("/api/v3/reading/all?aggregateFunc=COUNT&every=1h&numeric=true")
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = server
        .get("/api/roamkv/v1/devices/d1/latest?sensor=r1")
        .await;
    assert_eq!(
        (s, b["readings"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{b}"
    );
    server.stop().await;
}
