//! Events taken over REST, published to the EdgeX message bus as core-data publishes them: once
//! an event POSTed to `/api/v3/event/...` is written (durable under `sync`), its request goes out
//! on `{--mqtt-republish-prefix}/{service}/{profile}/{device}/{source}` (core-data's
//! `edgex/events/core/...`) in a v3 MessageEnvelope, at QoS 1, so that app services subscribed to
//! the bus see REST-posted events as they see the device services' own. Events taken from the bus
//! are not published again (they are on it already).
//!
//! The publish never holds up the HTTP answer: it is queued to the MQTT client (its request
//! queue, `MQTT_REQUESTS_QUEUED_MAX` in routes/mqtt/mod.rs); when that queue is full (the broker is away for
//! long), the event is dropped from the bus, counted in
//! `roamkv_republished_events_total{outcome="dropped"}` and logged. It is stored either way.

use std::sync::OnceLock;

use base64::Engine as _;
use rumqttc::{AsyncClient, QoS};
use serde_json::json;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use roamkv_wire::edgex::PathNames;

use crate::observability::metrics::OutcomeLabels;

/// Where REST-posted events go, and the client the MQTT task made, once it has made it.
pub struct Republisher {
    /// `--mqtt-republish-prefix`; None without a broker, or with "".
    prefix: Option<String>,
    client: OnceLock<AsyncClient>,
    /// `roamkv_republished_events_total`.
    counted: Family<OutcomeLabels, Counter>,
}

impl Republisher {
    pub fn new(prefix: Option<String>, counted: Family<OutcomeLabels, Counter>) -> Republisher {
        Republisher {
            prefix,
            client: OnceLock::new(),
            counted,
        }
    }

    /// Called by the MQTT task with its client.
    pub fn attach(&self, client: AsyncClient) {
        let _ = self.client.set(client);
    }

    /// Queues the event's request (`body`, JSON or CBOR as posted) for the bus under its route's
    /// service and path names; see the module comment for what happens when the queue is full.
    pub fn publish(
        &self,
        service: &str,
        path: PathNames<'_>,
        event_id: &str,
        body: &[u8],
        cbor: bool,
    ) {
        let (Some(client), Some(prefix)) = (self.client.get(), self.prefix.as_deref()) else {
            return;
        };
        let topic = format!(
            "{prefix}/{}/{}/{}/{}",
            service, path.profile_name, path.device_name, path.source_name
        );
        let envelope = json!({
            "apiVersion": "v3",
            "receivedTopic": topic,
            "correlationID": event_id,
            "requestID": uuid::Uuid::new_v4().to_string(),
            "errorCode": 0,
            "payload": base64::engine::general_purpose::STANDARD.encode(body),
            "contentType": if cbor { "application/cbor" } else { "application/json" },
        });
        let outcome = match client.try_publish(
            &topic,
            QoS::AtLeastOnce,
            false,
            envelope.to_string(),
        ) {
            Ok(()) => "published",
            Err(e) => {
                tracing::warn!(%topic, error = %e, "event stored but not published to the bus (its queue is full)");
                "dropped"
            }
        };
        self.counted.get_or_create(&OutcomeLabels { outcome }).inc();
    }
}
