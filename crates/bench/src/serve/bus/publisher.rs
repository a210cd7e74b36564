//! The publishers of a bus row: each one EdgeX device service (its own MQTT connection and
//! device) sending device-sdk-go v4's messages, and the bound on how far all of them together
//! may run ahead of the subscriber (`Backlog`).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rumqttc::{Client, Connection, Event, MqttOptions, Outgoing, Packet, QoS};

use crate::serve::load::{EventSpec, PROFILE, SOURCE, device_name, edgex_json};

/// The device service name in the topic.
const SERVICE: &str = "bench";
/// An event of 10,000 readings (the largest `--readings-per-event`) is ~2.4 MB.
const PACKET_BYTES_MAX: usize = 8 << 20;

/// The topic device-sdk-go v4 publishes an event of `device` on.
pub fn topic(device: &str) -> String {
    format!("edgex/events/device/{SERVICE}/{PROFILE}/{device}/{SOURCE}")
}

/// go-mod-messaging v4's `NewMessageEnvelope` of an AddEventRequest with JSON content, as
/// encoding/json writes it (fields in struct order; empty `queryParams` omitted).
pub fn envelope(e: &EventSpec) -> Vec<u8> {
    let request = edgex_json(e);
    format!(
        r#"{{"apiVersion":"v3","receivedTopic":"","correlationID":"{:08x}-0000-4000-8000-{:012x}","requestID":"","errorCode":0,"payload":{request},"contentType":"application/json"}}"#,
        e.client as u32,
        e.seq & 0xffff_ffff_ffff
    )
    .into_bytes()
}

/// How many events the publishers together may have sent that the subscriber has not taken.
/// Without a bound, publishers at QoS 0 (and at QoS 1, whose PUBACK comes from the broker)
/// send as fast as the broker takes them, whatever the subscriber does, and on a shared
/// machine their CPU is taken from the subscriber: the rate would then say how fast the
/// publishers flood, not how fast the subscriber stores. The bound is the bus's counterpart
/// of the HTTP rows' closed loop; `None` is the flood (`--bus-backlog-events 0`).
pub struct Backlog {
    limit_events: Option<u64>,
    /// (events sent, events the subscriber has taken)
    counts: Mutex<(u64, u64)>,
    changed: Condvar,
}

impl Backlog {
    pub fn new(limit_events: Option<u64>) -> Backlog {
        Backlog {
            limit_events,
            counts: Mutex::new((0, 0)),
            changed: Condvar::new(),
        }
    }

    /// Waits (at most `wait`) until one more event may be sent, and counts it as sent.
    fn reserve(&self, wait: Duration) {
        let mut counts = self.counts.lock().expect("backlog lock");
        if let Some(limit) = self.limit_events {
            let deadline = Instant::now() + wait;
            while counts.0.saturating_sub(counts.1) >= limit {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                counts = self
                    .changed
                    .wait_timeout(counts, left)
                    .expect("backlog lock")
                    .0;
            }
        }
        counts.0 += 1;
    }

    /// The subscriber has taken `events` in all.
    pub fn taken(&self, events: u64) {
        self.counts.lock().expect("backlog lock").1 = events;
        self.changed.notify_all();
    }
}

/// What one publisher did: events the broker took (QoS 1: acknowledged; QoS 0: written),
/// and the first error.
pub struct Published {
    pub events: u64,
    pub error: Option<String>,
}

/// One device service: connects, waits for `start`, publishes events of its device until
/// `end`, then disconnects.
pub fn publish(
    backlog: &Backlog,
    port: u16,
    client: usize,
    qos: QoS,
    readings: usize,
    (start, end): (Instant, Instant),
    base_ms: i64,
) -> Published {
    let mut options = MqttOptions::new(format!("bench-device-{client}"), "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(PACKET_BYTES_MAX, PACKET_BYTES_MAX);
    let (mqtt, mut connection) = Client::new(options, 8);
    let mut out = Published {
        events: 0,
        error: None,
    };
    let connected = wait_for(&mut connection, |e| {
        matches!(e, Event::Incoming(Packet::ConnAck(_)))
    });
    if let Err(e) = connected {
        out.error = Some(format!("publisher {client}: connecting: {e}"));
        return out;
    }
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let topic = topic(&device_name(client));
    for seq in 0u64.. {
        if Instant::now() >= end {
            break;
        }
        backlog.reserve(end.saturating_duration_since(Instant::now()));
        if Instant::now() >= end {
            break;
        }
        let event = EventSpec {
            client,
            seq,
            readings,
            origin_ms: base_ms + seq as i64,
        };
        let sent = mqtt
            .publish(&topic, qos, false, envelope(&event))
            .map_err(|e| e.to_string())
            .and_then(|()| {
                wait_for(&mut connection, |e| match qos {
                    QoS::AtMostOnce => matches!(e, Event::Outgoing(Outgoing::Publish(_))),
                    _ => matches!(e, Event::Incoming(Packet::PubAck(_))),
                })
            });
        match sent {
            Ok(()) => out.events += 1,
            Err(e) => {
                out.error = Some(format!("publisher {client}: {e}"));
                break;
            }
        }
    }
    // QoS 0's last messages are written before the DISCONNECT, on the same connection.
    let _ = mqtt.disconnect();
    let _ = wait_for(&mut connection, |e| {
        matches!(e, Event::Outgoing(Outgoing::Disconnect))
    });
    out
}

/// Runs the connection until an event `wanted` accepts (10 s at most).
fn wait_for(
    connection: &mut Connection,
    wanted: impl Fn(&Event) -> bool,
) -> std::result::Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match connection.recv_timeout(left) {
            Ok(Ok(event)) if wanted(&event) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("no answer from the broker within 10 s".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_carry_the_http_rows_request_as_roamkv_reads_it() {
        let e = EventSpec {
            client: 4,
            seq: 9,
            readings: 3,
            origin_ms: 1_700_000_000_000,
        };
        let envelope: serde_json::Value = serde_json::from_slice(&envelope(&e)).expect("JSON");
        let request: serde_json::Value = serde_json::from_str(&edgex_json(&e)).expect("JSON");
        assert_eq!(envelope["payload"], request);
        assert_eq!(envelope["contentType"], "application/json");
        assert_eq!(
            topic("dev-4"),
            "edgex/events/device/bench/bench-profile/dev-4/bench-source"
        );
    }
}
