//! MQTT ingest's queue and write slots (routes/mqtt): how full each is against its bound, and
//! how often and how long reading from the broker paused with the queue at its bound.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub struct MqttMetrics {
    /// 1 while subscribed to the event topic.
    pub connected: Gauge,
    /// Messages taken from the broker and waiting for a write slot: their bytes, their number.
    pub queue_bytes: Gauge,
    pub queue_messages: Gauge,
    /// `--mqtt-queue-bytes-max`.
    pub queue_bytes_max: Gauge,
    /// The most `queue_bytes` has been since the start: the bound held if this is at most the
    /// bound and one message.
    pub queue_bytes_peak: Gauge,
    /// Events being written, and the most that may be (`IN_FLIGHT_EVENTS_MAX`).
    pub writes_in_flight: Gauge,
    pub writes_in_flight_max: Gauge,
    /// Times reading from the broker paused with the queue at its bound, and for how long.
    pub read_pauses: Counter,
    pub read_paused_seconds: Counter<f64, AtomicU64>,
}

impl MqttMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "mqtt_connected",
            "1 while subscribed to the MQTT event topic",
            self.connected.clone(),
        );
        let gauges = [
            (
                "mqtt_queue_bytes",
                "Bytes of MQTT messages taken from the broker and waiting for a write slot",
                &self.queue_bytes,
            ),
            (
                "mqtt_queue_messages",
                "MQTT messages taken from the broker and waiting for a write slot",
                &self.queue_messages,
            ),
            (
                "mqtt_queue_bytes_max",
                "The bound of the MQTT queue (--mqtt-queue-bytes-max): at it, reading from the broker pauses",
                &self.queue_bytes_max,
            ),
            (
                "mqtt_queue_bytes_peak",
                "The most bytes the MQTT queue held since the start (at most its bound and one message)",
                &self.queue_bytes_peak,
            ),
            (
                "mqtt_writes_in_flight",
                "Events from MQTT being written",
                &self.writes_in_flight,
            ),
            (
                "mqtt_writes_in_flight_max",
                "Events from MQTT written at once, at most",
                &self.writes_in_flight_max,
            ),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "mqtt_read_pauses",
            "Times reading from the MQTT broker paused with the queue at its bound (QoS 1: the broker keeps the rest; QoS 0: it drops past its own limit)",
            self.read_pauses.clone(),
        );
        r.register(
            "mqtt_read_paused_seconds",
            "Time reading from the MQTT broker was paused with the queue at its bound",
            self.read_paused_seconds.clone(),
        );
    }
}
