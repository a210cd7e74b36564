//! MQTT ingest: subscribes to EdgeX's event topic on the message bus and writes each event it
//! carries. QoS 1 with manual acks: a message is acked only after the engine accepted its event
//! (with sync durability: after the fdatasync), so a crash before the ack makes the broker
//! deliver it again. A persistent session (clean_session = false) keeps messages that arrive
//! while the server is down.
//!
//! Payloads are EdgeX MessageEnvelopes: v3 carries the AddEventRequest base64-encoded in
//! `payload` (JSON or CBOR per `contentType`), v4 carries it as an object. A message that is
//! not an event is logged, counted in roamkv_rejected{source="mqtt"} and acked (redelivering it
//! would only fail again).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use roamkv_wire::edgex::{self, AddEventRequest, PathNames};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, Publish, QoS};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::config::MqttConfig;
use crate::error::ApiError;
use crate::state::Shared;

/// Events being written at once from MQTT; the event loop waits beyond it (back-pressure on
/// the broker instead of unbounded tasks).
const IN_FLIGHT_EVENTS_MAX: usize = 64;
/// Where EdgeX publishes events: edgex/events/device/{service}/{profile}/{device}/{source}.
const EDGEX_EVENT_TOPIC_PREFIX: &str = "edgex/events/device/";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageEnvelope {
    #[serde(default)]
    content_type: Option<String>,
    payload: Value,
}

/// Decodes an envelope into the event it carries.
pub fn parse_envelope(bytes: &[u8]) -> Result<AddEventRequest, ApiError> {
    let envelope: MessageEnvelope = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("message is not an EdgeX MessageEnvelope: {e}"))
    })?;
    let cbor = envelope
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/cbor"));
    match envelope.payload {
        Value::String(b64) => {
            let payload = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| {
                    ApiError::bad_request(format!("envelope payload is not base64: {e}"))
                })?;
            Ok(edgex::parse_add_event(&payload, cbor)?)
        }
        object @ Value::Object(_) => serde_json::from_value(object).map_err(|e| {
            ApiError::bad_request(format!("envelope payload is not an AddEventRequest: {e}"))
        }),
        _ => Err(ApiError::bad_request(
            "envelope payload is neither base64 text (v3) nor an object (v4)",
        )),
    }
}

/// The profile/device/source levels of an EdgeX event topic, when the topic has that form.
fn topic_names(topic: &str) -> Option<(&str, &str, &str)> {
    let rest = topic.strip_prefix(EDGEX_EVENT_TOPIC_PREFIX)?;
    let levels: Vec<&str> = rest.split('/').collect();
    match levels.as_slice() {
        [_service, profile, device, source] => Some((profile, device, source)),
        _ => None,
    }
}

pub fn spawn(state: Shared, config: MqttConfig, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut options = MqttOptions::new(&config.client_id, &config.host, config.port);
        options.set_keep_alive(Duration::from_secs(10));
        options.set_manual_acks(true);
        options.set_clean_session(false);
        let packet_max = state.config.body_bytes_max.saturating_mul(2);
        options.set_max_packet_size(packet_max, packet_max);
        let (client, mut events) = AsyncClient::new(options, 64);
        let in_flight = Arc::new(Semaphore::new(IN_FLIGHT_EVENTS_MAX));
        loop {
            let event = tokio::select! {
                _ = stop.changed() => break,
                event = events.poll() => event,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    tracing::info!(broker = %format!("{}:{}", config.host, config.port), topic = %config.topic, "MQTT connected");
                    if let Err(e) = client.subscribe(&config.topic, QoS::AtLeastOnce).await {
                        tracing::error!(error = %e, "MQTT subscribe failed");
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    // Subscribed: from here on the broker routes the topic's events to us.
                    state.metrics.mqtt_connected.set(1);
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
                        break;
                    };
                    let state = Arc::clone(&state);
                    let client = client.clone();
                    tokio::spawn(async move {
                        if handle(&state, &publish).await
                            && let Err(e) = client.ack(&publish).await
                        {
                            tracing::warn!(error = %e, "MQTT ack failed");
                        }
                        drop(permit);
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    state.metrics.mqtt_connected.set(0);
                    tracing::warn!(error = %e, "MQTT connection lost; retrying in 1 s");
                    tokio::select! {
                        _ = stop.changed() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
        // Let in-flight events finish (their acks need the event loop, which stops here: a
        // message written but not acked is delivered again and overwrites itself, same keys).
        let _ = in_flight.acquire_many(IN_FLIGHT_EVENTS_MAX as u32).await;
        let _ = client.disconnect().await;
        let _ = tokio::time::timeout(Duration::from_millis(500), events.poll()).await;
        state.metrics.mqtt_connected.set(0);
    })
}

/// Writes the event a message carries. True when the message should be acked: the event was
/// written, or the message can never be written (bad input, counted and logged).
async fn handle(state: &Shared, publish: &Publish) -> bool {
    let request = match parse_envelope(&publish.payload) {
        Ok(r) => r,
        Err(e) => {
            state.reject("mqtt", &e);
            tracing::warn!(topic = %publish.topic, error = %e.message, "MQTT message rejected");
            return true;
        }
    };
    let path = topic_names(&publish.topic).map(|(profile, device, source)| PathNames {
        profile_name: profile,
        device_name: device,
        source_name: source,
    });
    match state
        .ingest_event(request, path, "mqtt", publish.payload.len())
        .await
    {
        Ok(_) => true,
        Err(e) if e.status.is_client_error() => {
            tracing::warn!(topic = %publish.topic, error = %e.message, "MQTT event rejected");
            true
        }
        Err(e) => {
            // Not acked: the broker delivers it again after a reconnect.
            tracing::error!(topic = %publish.topic, error = %e.message, "MQTT event not written");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_json() -> Value {
        serde_json::json!({
            "apiVersion": "v3",
            "event": {
                "id": "040bd523-ec33-440d-9d72-e5813a465f37",
                "deviceName": "d", "profileName": "p", "sourceName": "s", "origin": 5,
                "readings": [{"deviceName": "d", "resourceName": "r", "profileName": "p",
                              "origin": 5, "valueType": "Int8", "value": "1"}]
            }
        })
    }

    #[test]
    fn v3_and_v4_envelopes_carry_events() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(event_json().to_string());
        let v3 = serde_json::json!({"apiVersion": "v3", "contentType": "application/json", "payload": b64});
        let v4 = serde_json::json!({"apiVersion": "v3", "contentType": "application/json", "payload": event_json()});
        for envelope in [v3, v4] {
            let request = parse_envelope(envelope.to_string().as_bytes()).expect("event");
            assert_eq!(request.event.device_name, "d");
        }
        assert!(parse_envelope(b"hello").is_err());
        assert!(parse_envelope(br#"{"payload": 5}"#).is_err());
        assert!(parse_envelope(br#"{"payload": "%%%"}"#).is_err());
    }

    #[test]
    fn edgex_topics_name_profile_device_and_source() {
        assert_eq!(
            topic_names("edgex/events/device/svc/prof/dev/src"),
            Some(("prof", "dev", "src"))
        );
        assert_eq!(topic_names("edgex/events/device/svc/prof"), None);
        assert_eq!(topic_names("other/topic"), None);
    }
}
