//! MQTT ingest's queue is bounded (`--mqtt-queue-bytes-max`): devices publishing far faster
//! than a deliberately slow engine writes (every group commit 100 ms late) do not fill the
//! server's memory. At the bound the server stops reading from the broker, and TCP holds the
//! broker back: at QoS 1 the broker keeps the messages and every one is stored; at QoS 0 it
//! drops what it cannot hold, and the ledger closes with its own count of drops: published =
//! stored + dropped by the broker. Without the bound the server read every message into its
//! queue (the peak below would be the whole flood).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use roamkv_testbed::prerequisite::{self, require_tool};
use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};
use serde_json::json;

const QUEUE_BYTES_MAX: usize = 64 * 1024;
const GROUP_COMMIT_DELAY: Duration = Duration::from_millis(100);

/// A device service publishing `count` one-reading events of `device` at `qos` as fast as the
/// broker takes them. Returns the largest message's bytes (payload and topic) once every
/// publish is on the broker's socket (QoS 0) or acknowledged by the broker (QoS 1).
async fn flood(port: u16, device: &str, count: usize, qos: QoS) -> usize {
    let mut options = MqttOptions::new(format!("flood-{device}"), "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut events) = AsyncClient::new(options, 1024);
    let now = now_ns();
    let messages: Vec<Vec<u8>> = (0..count as i64)
        .map(|i| {
            let request = event(device, now + i * MS, &[("speed", "88.5")]);
            json!({"apiVersion": "v3", "contentType": "application/json", "payload": request})
                .to_string()
                .into_bytes()
        })
        .collect();
    let topic = topic(device);
    let largest = messages.iter().map(Vec::len).max().unwrap_or(0) + topic.len();
    let producer = {
        let client = client.clone();
        tokio::spawn(async move {
            for payload in messages {
                client
                    .publish(&topic, qos, false, payload)
                    .await
                    .expect("publish");
            }
        })
    };
    let mut done = 0;
    while done < count {
        let event = tokio::time::timeout(Duration::from_secs(30), events.poll())
            .await
            .expect("the publisher's event loop moves within 30 s")
            .expect("the publisher stays connected");
        match (qos, event) {
            (QoS::AtMostOnce, Event::Outgoing(Outgoing::Publish(_)))
            | (QoS::AtLeastOnce, Event::Incoming(Packet::PubAck(_))) => done += 1,
            _ => {}
        }
    }
    producer.await.expect("producer");
    client.disconnect().await.expect("disconnect");
    while let Ok(Ok(event)) = tokio::time::timeout(Duration::from_secs(5), events.poll()).await {
        if event == Event::Outgoing(Outgoing::Disconnect) {
            break;
        }
    }
    largest
}

/// The broker's own count of messages it dropped (`$SYS/broker/publish/messages/dropped`,
/// published every `sys_interval`), kept up to date by a subscriber.
async fn broker_dropped(port: u16) -> Arc<AtomicU64> {
    let dropped = Arc::new(AtomicU64::new(0));
    let mut options = MqttOptions::new("sys-watcher", "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(5));
    let (client, mut events) = AsyncClient::new(options, 16);
    client
        .subscribe("$SYS/broker/publish/messages/dropped", QoS::AtMostOnce)
        .await
        .expect("subscribe");
    let seen = Arc::clone(&dropped);
    tokio::spawn(async move {
        let _client = client;
        while let Ok(event) = events.poll().await {
            if let Event::Incoming(Packet::Publish(p)) = event
                && let Some(n) = std::str::from_utf8(&p.payload)
                    .ok()
                    .and_then(|t| t.parse().ok())
            {
                seen.store(n, Ordering::SeqCst);
            }
        }
    });
    dropped
}

/// Floods a server whose engine is slow with `count` messages at `qos`; checks the queue's
/// bound held and returns (stored, dropped by the broker) once the server has taken all it
/// will and the ledger closes.
async fn flood_a_slow_server(broker: &Mosquitto, count: usize, qos: QoS) -> (u64, u64) {
    let server = Server::start_configured(
        |a| {
            a.mqtt_broker = Some(format!("127.0.0.1:{}", broker.port));
            a.mqtt_queue_bytes_max = Some(QUEUE_BYTES_MAX);
        },
        |c| c.fail_points.slow_group_commit(GROUP_COMMIT_DELAY),
    )
    .await;
    assert!(server.mqtt_subscribed().await, "subscribed within 10 s");
    let dropped = broker_dropped(broker.port).await;
    let largest = flood(broker.port, "flood-car", count, qos).await;

    let stored = || async {
        let (_, body) = server
            .get("/api/v3/event/count/device/name/flood-car")
            .await;
        body["count"].as_u64().unwrap_or(0)
    };
    let closed = eventually(120, || async {
        stored().await + dropped.load(Ordering::SeqCst) == count as u64
    })
    .await;
    let (stored_n, dropped_n) = (stored().await, dropped.load(Ordering::SeqCst));
    assert!(
        closed,
        "published {count} != stored {stored_n} + dropped by the broker {dropped_n}"
    );
    // Nothing more comes later: the ledger stays closed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        (stored().await, dropped.load(Ordering::SeqCst)),
        (stored_n, dropped_n)
    );

    let text = server.get_text("/metrics").await.1;
    let peak = metric(&text, "roamkv_mqtt_queue_bytes_peak").expect("queue peak");
    let pauses = metric(&text, "roamkv_mqtt_read_pauses_total").expect("pauses");
    assert_eq!(
        metric(&text, "roamkv_mqtt_queue_bytes_max"),
        Some(QUEUE_BYTES_MAX as f64)
    );
    assert!(
        peak <= (QUEUE_BYTES_MAX + largest) as f64,
        "the queue held {peak} bytes, over its bound {QUEUE_BYTES_MAX} and one message ({largest})"
    );
    assert!(
        pauses >= 1.0,
        "reading never paused: the flood did not reach the bound, so the test proved nothing"
    );
    assert_eq!(metric(&text, "roamkv_mqtt_queue_messages"), Some(0.0));
    eprintln!(
        "{qos:?}: published {count}, stored {stored_n}, dropped by the broker {dropped_n}, \
         queue peak {peak} bytes, {pauses} pauses"
    );
    server.stop().await;
    (stored_n, dropped_n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_qos_0_a_full_queue_pauses_reading_and_the_broker_counts_what_it_drops() {
    let test = "at_qos_0_a_full_queue_pauses_reading_and_the_broker_counts_what_it_drops";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    // mosquitto's defaults (max_queued_messages 1000: past it, QoS 0 messages for a client
    // that does not read are dropped), its $SYS counters every second.
    let broker = Mosquitto::start_for_load(|_| "allow_anonymous true\nsys_interval 1\n".into());
    let (_, dropped) = flood_a_slow_server(&broker, 100_000, QoS::AtMostOnce).await;
    assert!(
        dropped > 0,
        "the broker dropped nothing: the socket buffers held the whole flood, so the test \
         proved nothing about drops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_qos_1_a_full_queue_pauses_reading_and_the_broker_keeps_every_message() {
    let test = "at_qos_1_a_full_queue_pauses_reading_and_the_broker_keeps_every_message";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto")) {
        return;
    }
    // A broker that queues without limit for a subscriber that falls behind.
    let broker = Mosquitto::start_for_load(|_| {
        "allow_anonymous true\nsys_interval 1\nmax_queued_messages 0\n".into()
    });
    let (stored, dropped) = flood_a_slow_server(&broker, 20_000, QoS::AtLeastOnce).await;
    assert_eq!((stored, dropped), (20_000, 0));
}
