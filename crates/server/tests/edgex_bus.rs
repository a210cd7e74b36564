//! The server on the EdgeX message bus: ready only once its broker is there, a client request
//! queue full of republished events holding up neither the subscription nor the acks, and events
//! POSTed over REST published to the bus once, as core-data does. The round trip of events in
//! and out is in edgex_round_trip.rs.

mod common;

use std::time::Duration;

use common::*;
use roamkv_testbed::prerequisite::{self, require_tool};
use rumqttc::{AsyncClient, MqttOptions, QoS};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_says_503_until_the_broker_is_there_and_the_client_comes_back() {
    let test = "ready_says_503_until_the_broker_is_there_and_the_client_comes_back";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    // EdgeX services start in any order: the server starts without its broker...
    let port = free_port();
    let server = Server::start(|a| a.mqtt_broker = Some(format!("127.0.0.1:{port}"))).await;
    let (status, body) = server.get("/ready").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("127.0.0.1:{port}"))),
        "{body}"
    );
    // ...and is ready once the broker comes up (the client's back-off is 1, 2, 4 s...).
    let _broker = Mosquitto::start_on(port, |_| "allow_anonymous true\n".into());
    let ready = eventually(20, || async { server.get("/ready").await.0 == 200 }).await;
    assert!(ready, "not ready within 20 s of the broker coming up");
    server.stop().await;
}

/// The MQTT client's request queue carries both the acks of ingested messages and the events
/// republished to the bus. REST events posted while the broker is away fill it; once the broker
/// comes up the server must still subscribe and then ingest (and ack) more messages than it
/// writes at once. Before the fix its event loop awaited the subscription, and each incoming
/// message's write slot, while the queue only it drains was full: ready never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_queue_full_of_republished_events_holds_up_neither_subscription_nor_acks() {
    let test = "a_request_queue_full_of_republished_events_holds_up_neither_subscription_nor_acks";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    let port = free_port();
    let server = Server::start(|a| a.mqtt_broker = Some(format!("127.0.0.1:{port}"))).await;
    let now = now_ns();
    for i in 0..100 {
        let request = event("rest-car", now + i * MS, &[("speed", "1")]);
        assert_eq!(server.post_event(&request).await.0, 201);
    }
    let dropped = metric(
        &server.get_text("/metrics").await.1,
        "roamkv_republished_events_total{outcome=\"dropped\"}",
    );
    assert!(
        dropped.is_some_and(|d| d >= 1.0),
        "the queue should have filled: {dropped:?} dropped"
    );
    let broker = Mosquitto::start_on(port, |_| "allow_anonymous true\n".into());
    let ready = eventually(20, || async { server.get("/ready").await.0 == 200 }).await;
    assert!(ready, "not subscribed within 20 s of the broker coming up");
    let messages = 300;
    let envelopes = (0..messages)
        .map(|i| {
            let request = event("mqtt-car", now + i * MS, &[("speed", "2")]);
            let envelope =
                json!({"apiVersion": "v3", "contentType": "application/json", "payload": request});
            (topic("mqtt-car"), envelope.to_string().into_bytes())
        })
        .collect();
    publish(broker.port, envelopes).await;
    let all_in = eventually(20, || async {
        server
            .get("/api/v3/event/count/device/name/mqtt-car")
            .await
            .1["count"]
            == messages
    })
    .await;
    assert!(all_in, "not every MQTT message was written within 20 s");
    server.stop().await;
}

/// A subscriber on `topic` that collects every message's (topic, payload) until dropped.
async fn subscribe(
    port: u16,
    topic: &str,
) -> tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)> {
    let mut options = MqttOptions::new("edgex-app-service", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut events) = AsyncClient::new(options, 16);
    client
        .subscribe(topic, QoS::AtLeastOnce)
        .await
        .expect("subscribe");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _client = client;
        let mut subscribed_tx = Some(subscribed_tx);
        while let Ok(event) = events.poll().await {
            match event {
                rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_)) => {
                    if let Some(tx) = subscribed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) => {
                    let _ = tx.send((p.topic.clone(), p.payload.to_vec()));
                }
                _ => {}
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(10), subscribed)
        .await
        .expect("SUBACK within 10 s")
        .expect("subscriber");
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_posted_over_rest_are_published_to_the_bus_once_as_core_data_does() {
    let test = "events_posted_over_rest_are_published_to_the_bus_once_as_core_data_does";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    let broker = Mosquitto::start();
    let server =
        Server::start(|a| a.mqtt_broker = Some(format!("127.0.0.1:{}", broker.port))).await;
    assert!(server.mqtt_subscribed().await);
    let mut app_service = subscribe(broker.port, "edgex/events/core/#").await;

    let now = now_ns();
    let mut posted = Vec::new();
    for i in 0..3 {
        let request = event("thermo-7", now + i * MS, &[("temp", "21.5")]);
        let (status, body) = server.post_event(&request).await;
        assert_eq!(status, 201, "{body}");
        posted.push(body["id"].as_str().expect("id").to_string());
    }
    // An event that came from the bus is not published back to it.
    let from_bus = event("thermo-8", now, &[("temp", "19.0")]);
    let envelope =
        json!({"apiVersion": "v3", "contentType": "application/json", "payload": from_bus});
    publish(
        broker.port,
        vec![(topic("thermo-8"), envelope.to_string().into_bytes())],
    )
    .await;
    assert!(
        eventually(10, || async {
            server.get("/api/v3/event/count").await.1["count"] == 4
        })
        .await
    );
    // A refused event is not published either.
    let bad = event("thermo-7", now + 9 * MS, &[("temp", "warm")]);
    assert_eq!(server.post_event(&bad).await.0, 400);

    let mut seen = Vec::new();
    while let Ok(Some((topic, payload))) =
        tokio::time::timeout(Duration::from_secs(2), app_service.recv()).await
    {
        assert_eq!(
            topic,
            "edgex/events/core/device-virtual/thermo-profile/thermo-7/readings"
        );
        let request = roamkv_server::mqtt::parse_envelope(&payload).expect("an EdgeX envelope");
        seen.push(request.event.id);
    }
    assert_eq!(
        seen, posted,
        "each REST event once, in order, and nothing else"
    );
    let metrics = server.get_text("/metrics").await.1;
    assert_eq!(
        metric(
            &metrics,
            "roamkv_republished_events_total{outcome=\"published\"}"
        ),
        Some(3.0)
    );
    server.stop().await;
}
