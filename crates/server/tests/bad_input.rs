//! Bad input gets a clear JSON error with the right status, changes nothing, and the server
//! keeps serving: malformed bodies, wrong apiVersion, bad ids and timestamps, oversized bodies
//! and batches, too many requests at once, slow clients, and requests without a valid token.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

fn assert_error(status: u16, body: &Value, expected: u16, needle: &str) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["statusCode"], expected, "{body}");
    assert_eq!(body["apiVersion"], "v3", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "wanted {needle:?} in {message:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_get_clear_errors_and_change_nothing() {
    let server = Server::start(|a| {
        a.body_bytes_max = Some(64 * 1024);
        a.batch_readings_max = Some(100);
    })
    .await;
    let now = now_ns();
    let route = "/api/v3/event/svc/thermo-profile/t-1/readings";
    let post = |body: Vec<u8>| server.post(route, "application/json", body);

    let (s, b) = post(b"{not json".to_vec()).await;
    assert_error(s, &b, 400, "not a JSON AddEventRequest");
    let (s, b) = server
        .post(route, "application/cbor", vec![0xff, 0x00, 0x13])
        .await;
    assert_error(s, &b, 400, "not a CBOR AddEventRequest");

    let mut wrong_version = event("t-1", now, &[("temperature", "1")]);
    wrong_version["apiVersion"] = json!("v2");
    let (s, b) = post(wrong_version.to_string().into_bytes()).await;
    assert_error(s, &b, 400, "apiVersion");

    let mut empty = event("t-1", now, &[("temperature", "1")]);
    empty["event"]["readings"] = json!([]);
    let (s, b) = post(empty.to_string().into_bytes()).await;
    assert_error(s, &b, 400, "no readings");

    let mut bad_origin = event("t-1", now, &[("temperature", "1")]);
    bad_origin["event"]["readings"][0]["origin"] = json!(-5);
    let (s, b) = post(bad_origin.to_string().into_bytes()).await;
    assert_error(s, &b, 400, "origin");
    let huge_origin = event("t-1", now, &[("temperature", "1")])
        .to_string()
        .replacen(&now.to_string(), "18446744073709551615", 1);
    let (s, b) = post(huge_origin.into_bytes()).await;
    assert_error(s, &b, 400, "not a JSON AddEventRequest");

    let long_name = "d".repeat(300);
    let (s, b) = server
        .post(
            &format!("/api/v3/event/svc/thermo-profile/{long_name}/readings"),
            "application/json",
            event(&long_name, now, &[("temperature", "1")])
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_error(s, &b, 400, "limit is 255");
    let (s, b) = server
        .post(
            "/api/v3/event/svc/thermo-profile/t%001/readings",
            "application/json",
            event("t\u{0}1", now, &[("temperature", "1")])
                .to_string()
                .into_bytes(),
        )
        .await;
    assert_error(s, &b, 400, "NUL");

    let mismatched = event("t-2", now, &[("temperature", "1")]);
    let (s, b) = post(mismatched.to_string().into_bytes()).await;
    assert_error(s, &b, 400, "does not match");

    let resources: Vec<(String, String)> = (0..101)
        .map(|i| (format!("r{i}"), "1".to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = resources
        .iter()
        .map(|(r, v)| (r.as_str(), v.as_str()))
        .collect();
    let (s, b) = post(event("t-1", now, &refs).to_string().into_bytes()).await;
    assert_error(s, &b, 413, "limit is 100");

    let (s, b) = post(vec![b' '; 65 * 1024]).await;
    assert_error(s, &b, 413, "limit is 65536");
    // The same without a Content-Length (chunked): cut off at the limit while reading.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..70).map(|_| Ok(vec![b' '; 1024])).collect();
    let response = server
        .client
        .post(format!("{}{route}", server.base))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_stream(chunks)))
        .send()
        .await
        .expect("chunked POST");
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("json");
    assert_error(status, &body, 413, "over the limit");

    let (s, b) = server.get("/api/v3/event/start/abc/end/5").await;
    assert_error(s, &b, 400, "nanoseconds");
    let (s, b) = server.get("/api/v3/event/start/10/end/5").await;
    assert_error(s, &b, 400, "before start");
    let (s, b) = server.get("/api/v3/event/all?limit=-7").await;
    assert_error(s, &b, 400, "limit");
    let (s, b) = server.delete("/api/v3/event/age/yesterday").await;
    assert_error(s, &b, 400, "age");
    let (s, b) = server.get("/api/v3/nothing/here").await;
    assert_error(s, &b, 404, "no route");

    // Nothing was written, and the server still serves.
    let (s, b) = server.get("/api/v3/event/count").await;
    assert_eq!((s, b["count"].as_u64()), (200, Some(0)), "{b}");
    let (s, _) = post(
        event("t-1", now, &[("temperature", "1")])
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(s, 201);
    let (_, text) = server.get_text("/metrics").await;
    assert!(
        metric(
            &text,
            r#"roamkv_rejected_total{source="http",status="400"}"#
        )
        .is_some_and(|n| n >= 8.0),
        "{text}"
    );
    assert!(
        metric(
            &text,
            r#"roamkv_rejected_total{source="http",status="413"}"#
        )
        .is_some_and(|n| n >= 3.0),
        "{text}"
    );
    server.stop().await;
}

fn futures_stream(
    chunks: Vec<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_core::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send + 'static {
    struct Chunks(std::vec::IntoIter<Result<Vec<u8>, std::io::Error>>);
    impl futures_core::Stream for Chunks {
        type Item = Result<Vec<u8>, std::io::Error>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    Chunks(chunks.into_iter())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_a_full_server_answers_429() {
    let server = Server::start(|a| {
        a.concurrent_requests_max = Some(1);
        a.header_timeout_s = Some(1);
        a.body_timeout_s = Some(2);
    })
    .await;
    let addr = server.addr();

    // Slowloris: headers that never finish. The server closes the connection after 1 s.
    let started = Instant::now();
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(b"GET /api/v3/ping HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    slow.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 1024];
    let n = slow.read(&mut buf).unwrap_or(0);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(4),
        "closed after {elapsed:?} with {:?}",
        String::from_utf8_lossy(&buf[..n])
    );

    // A body that trickles holds the only request slot: the next request gets 429, and the
    // trickler gets 408 when its body timeout passes.
    let mut trickle = TcpStream::connect(addr).expect("connect");
    trickle
        .write_all(
            b"POST /api/v3/event/s/p/d/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        .expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, b) = server.get("/api/v3/event/count").await;
    assert_error(s, &b, 429, "limit");
    trickle
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = trickle.read(&mut buf) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buf[..n]);
        if response.windows(4).any(|w| w == b"\r\n\r\n") && response.ends_with(b"}") {
            break;
        }
    }
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    // The slot is free again; /health never needed one.
    let (s, _) = server.get("/api/v3/event/count").await;
    assert_eq!(s, 200);
    assert_eq!(server.get("/health").await.0, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_need_the_bearer_token_except_health_and_ping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    let token = "s3cret-token-of-enough-length";
    std::fs::write(&token_file, format!("{token}\n")).expect("write");
    let server = Server::start(|a| a.auth_token_file = Some(token_file.clone())).await;

    assert_eq!(server.get("/health").await.0, 200);
    assert_eq!(server.get("/api/v3/ping").await.0, 200);
    for path in [
        "/api/v3/event/count",
        "/metrics",
        "/",
        "/api/roamkv/v1/devices",
    ] {
        let (s, b) = server.get(path).await;
        assert_error(s, &b, 401, "Authorization");
    }
    let wrong = server
        .client
        .get(format!("{}/api/v3/event/count", server.base))
        .bearer_auth("s3cret-token-of-enough-lengtX")
        .send()
        .await
        .expect("GET");
    assert_eq!(wrong.status().as_u16(), 401);
    assert_eq!(
        wrong
            .headers()
            .get("www-authenticate")
            .map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    let right = server
        .client
        .get(format!("{}/api/v3/event/count", server.base))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET");
    assert_eq!(right.status().as_u16(), 200);
    let posted = server
        .client
        .post(format!(
            "{}/api/v3/event/s/thermo-profile/t-1/readings",
            server.base
        ))
        .header("content-type", "application/json")
        .body(event("t-1", now_ns(), &[("temperature", "1")]).to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(posted.status().as_u16(), 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_token_reads_and_cannot_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (write_file, read_file) = (dir.path().join("write"), dir.path().join("read"));
    let (write_token, read_token) = ("write-token-0123456789", "read-token-0123456789");
    std::fs::write(&write_file, format!("{write_token}\n")).expect("write");
    std::fs::write(&read_file, format!("{read_token}\n")).expect("write");
    let server = Server::start(|a| {
        a.auth_token_file = Some(write_file.clone());
        a.read_only_token_file = Some(read_file.clone());
    })
    .await;
    let post = |token: &'static str| {
        server
            .client
            .post(format!(
                "{}/api/v3/event/s/thermo-profile/t-1/readings",
                server.base
            ))
            .header("content-type", "application/json")
            .bearer_auth(token)
            .body(event("t-1", now_ns(), &[("temperature", "1")]).to_string())
            .send()
    };
    let refused = post(read_token).await.expect("POST");
    assert_eq!(refused.status().as_u16(), 403);
    let body = refused.text().await.expect("body");
    assert!(body.contains("read-write token"), "{body}");
    assert_eq!(
        post(write_token).await.expect("POST").status().as_u16(),
        201
    );
    let count = server
        .client
        .get(format!(
            "{}/api/v3/reading/count/device/name/t-1",
            server.base
        ))
        .bearer_auth(read_token)
        .send()
        .await
        .expect("GET");
    assert_eq!(count.status().as_u16(), 200);
    let count: Value = count.json().await.expect("json");
    assert_eq!(count["count"], 1, "the refused POST wrote nothing");
    let delete = server
        .client
        .delete(format!("{}/api/v3/event/device/name/t-1", server.base))
        .bearer_auth(read_token)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(delete.status().as_u16(), 403);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_api_pages_scans_and_departs() {
    let server = Server::start(|_| {}).await;
    let mut lines = String::new();
    for sensor in ["alt", "speed"] {
        for ts in 0..25 {
            lines.push_str(
                &json!({"device": "drone-1", "sensor": sensor, "ts_ns": ts, "value": format!("{ts}")})
                    .to_string(),
            );
            lines.push('\n');
        }
    }
    let (s, b) = server
        .post(
            "/api/roamkv/v1/readings",
            "application/x-ndjson",
            lines.into_bytes(),
        )
        .await;
    assert_eq!((s, b["written"].as_u64()), (201, Some(50)), "{b}");
    let (s, b) = server
        .post(
            "/api/roamkv/v1/readings",
            "application/x-ndjson",
            b"{\"device\":\"x\",\"sensor\":\"s\",\"ts\":1}\n".to_vec(),
        )
        .await;
    assert_eq!(s, 400, "{b}");

    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(token) => format!("/api/roamkv/v1/devices/drone-1/readings?limit=7&after={token}"),
            None => "/api/roamkv/v1/devices/drone-1/readings?limit=7".to_string(),
        };
        let (s, b) = server.get(&path).await;
        assert_eq!(s, 200, "{b}");
        for r in b["readings"].as_array().expect("readings") {
            seen.push((
                r["sensor"].as_str().expect("s").to_string(),
                r["ts_ns"].as_i64().expect("ts_ns"),
            ));
        }
        match b["next"].as_str() {
            Some(token) => after = Some(token.to_string()),
            None => break,
        }
    }
    let expected: Vec<(String, i64)> = ["alt", "speed"]
        .iter()
        .flat_map(|s| (0..25).map(move |ts| (s.to_string(), ts)))
        .collect();
    assert_eq!(seen, expected);

    let (_, b) = server.get("/api/roamkv/v1/devices/drone-1/latest").await;
    assert_eq!(b["readings"].as_array().map(Vec::len), Some(2));
    assert_eq!(b["readings"][1]["ts_ns"], 24);
    let (_, b) = server.get("/api/roamkv/v1/devices").await;
    assert_eq!(b["devices"][0]["tier"], "upper");
    assert_eq!(b["devices"][0]["log_readings"], 50);
    // Native readings show through the EdgeX routes too, as String readings.
    let (_, b) = server
        .get("/api/v3/reading/count/device/name/drone-1")
        .await;
    assert_eq!(b["count"], 50);

    let (s, _) = server.delete("/api/roamkv/v1/devices/drone-1").await;
    assert_eq!(s, 200);
    let (s, _) = server.delete("/api/roamkv/v1/devices/drone-1").await;
    assert_eq!(s, 404);
    let (_, b) = server.get("/api/roamkv/v1/devices").await;
    assert_eq!(b["devices"], json!([]));
    server.stop().await;
}
