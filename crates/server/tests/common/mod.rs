//! Shared set-up: an in-process server on a loopback port, a real mosquitto broker, helpers.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roamkv_server::{Config, Running, ServeArgs};
use serde_json::{Value, json};

pub struct Server {
    pub running: Option<Running>,
    pub base: String,
    pub client: reqwest::Client,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub async fn start(adjust: impl FnOnce(&mut ServeArgs)) -> Server {
        Server::start_configured(adjust, |_| {}).await
    }

    /// `start`, with `configure` given the resolved settings last (e.g. to arm the engine's
    /// test hooks through `Config::fail_points`).
    pub async fn start_configured(
        adjust: impl FnOnce(&mut ServeArgs),
        configure: impl FnOnce(&mut Config),
    ) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args = ServeArgs {
            data: Some(dir.path().join("data")),
            listen: Some("127.0.0.1:0".parse().expect("addr")),
            durability: Some("sync".into()),
            // Tests write readings at synthetic times (ts -7, 1970, 2020) that the default
            // retention (a week) would delete; the test of the default sets it back to None.
            retention_default_h: Some(0),
            ..ServeArgs::default()
        };
        adjust(&mut args);
        let mut config = Config::resolve(&args).expect("config");
        configure(&mut config);
        let running = roamkv_server::start(config).await.expect("server starts");
        let base = format!("http://{}", running.addr);
        Server {
            running: Some(running),
            base,
            client: reqwest::Client::new(),
            dir,
        }
    }

    /// Waits up to 10 s for the server to be subscribed to its MQTT broker.
    pub async fn mqtt_subscribed(&self) -> bool {
        eventually(10, || async {
            metric(&self.get_text("/metrics").await.1, "roamkv_mqtt_connected") == Some(1.0)
        })
        .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.running.as_ref().expect("running").addr
    }

    /// Sends a request; returns the status and the body (as JSON when it is JSON).
    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let (status, text) = self.send_text(request).await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn send_text(&self, request: reqwest::RequestBuilder) -> (u16, String) {
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        (status, response.text().await.expect("body"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn get_text(&self, path: &str) -> (u16, String) {
        self.send_text(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.client.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        self.send(request).await
    }

    /// Posts an event to the route EdgeX device services use.
    pub async fn post_event(&self, request: &Value) -> (u16, Value) {
        let e = &request["event"];
        let path = format!(
            "/api/v3/event/device-virtual/{}/{}/{}",
            e["profileName"].as_str().expect("profile"),
            e["deviceName"].as_str().expect("device"),
            e["sourceName"].as_str().expect("source")
        );
        self.post(&path, "application/json", request.to_string().into_bytes())
            .await
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown();
            running.wait().await.expect("clean shutdown");
        }
    }
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as i64
}

/// An AddEventRequest with one Float64 reading per resource, all at `origin`.
pub fn event(device: &str, origin: i64, resources: &[(&str, &str)]) -> Value {
    let readings: Vec<Value> = resources
        .iter()
        .map(|(resource, value)| {
            json!({
                "id": uuid(),
                "origin": origin,
                "deviceName": device,
                "resourceName": resource,
                "profileName": "thermo-profile",
                "valueType": "Float64",
                "units": "C",
                "value": value,
            })
        })
        .collect();
    json!({
        "apiVersion": "v3",
        "event": {
            "apiVersion": "v3",
            "id": uuid(),
            "deviceName": device,
            "profileName": "thermo-profile",
            "sourceName": "readings",
            "origin": origin,
            "readings": readings,
            "tags": {"site": "test-bench"},
        }
    })
}

pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A real mosquitto broker on a loopback port (the rig's, shared by every crate's tests); not
/// every test binary that compiles this module starts one.
#[allow(unused_imports)]
pub use roamkv_testbed::mosquitto::Mosquitto;

/// Polls `check` until it returns true or `seconds` pass.
pub async fn eventually<F, Fut>(seconds: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The value of one sample line of a Prometheus text exposition (`name{labels} value`).
pub fn metric(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels) && l[name_and_labels.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A nanosecond timestamp's millisecond.
pub const MS: i64 = 1_000_000;

/// The topic a device service publishes `device`'s readings on.
pub fn topic(device: &str) -> String {
    format!("edgex/events/device/device-virtual/thermo-profile/{device}/readings")
}

/// A device service publishing `messages` (topic, payload) to the broker on `port` at QoS 1;
/// returns once the broker has acknowledged every one.
pub async fn publish(port: u16, messages: Vec<(String, Vec<u8>)>) {
    let mut options = rumqttc::MqttOptions::new("edgex-device-service", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    let n = messages.len();
    // Room for every publish: they are queued before the event loop is driven.
    let (client, mut events) = rumqttc::AsyncClient::new(options, n.max(1));
    for (topic, payload) in messages {
        client
            .publish(topic, rumqttc::QoS::AtLeastOnce, false, payload)
            .await
            .expect("publish");
    }
    // Drive the event loop until every publish is acknowledged by the broker.
    let mut acked = 0;
    while acked < n {
        match tokio::time::timeout(Duration::from_secs(10), events.poll()).await {
            Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)))) => acked += 1,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("MQTT publisher: {e}"),
            Err(_) => panic!("MQTT publisher: no PUBACK within 10 s"),
        }
    }
    let _ = client.disconnect().await;
}
