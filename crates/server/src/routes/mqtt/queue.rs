//! The messages taken from the broker that wait for a write slot, bounded in bytes
//! (`--mqtt-queue-bytes-max`): the event loop reads from the broker only while the queue is
//! below its bound (`has_room`). At the bound it stops reading until a write slot frees, so the
//! socket's buffers fill and TCP holds the broker back: at QoS 1 the broker keeps the messages
//! (they are not acked), at QoS 0 it drops what it cannot hold by its own limits (mosquitto:
//! `max_queued_messages`, counted in `$SYS/broker/publish/messages/dropped`). EdgeX's own
//! core-data does the same: go-mod-messaging hands each message to a channel, and a full
//! channel blocks paho's reader.
//!
//! Bytes rather than messages: what the bound protects is memory, and an event's envelope is
//! ~300 B at one reading and up to twice `--body-bytes-max` (the largest packet taken). An empty
//! queue takes any message, so the queue holds at most its bound and one message.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rumqttc::Publish;

use crate::observability::metrics::Metrics;

/// A pause starts a warning in the log at most this often (with the pauses since the last).
const PAUSE_LOG_INTERVAL: Duration = Duration::from_secs(10);

pub(super) struct Queue {
    messages: VecDeque<Publish>,
    /// Bytes of `messages` (payload and topic).
    bytes: usize,
    bytes_max: usize,
    /// When reading paused, while it is paused.
    paused_at: Option<Instant>,
    /// When a pause was last logged, and the pauses since.
    logged_at: Option<Instant>,
    pauses_unlogged: u64,
}

/// What a message holds in memory, as the queue counts it.
fn size(publish: &Publish) -> usize {
    publish.payload.len() + publish.topic.len()
}

impl Queue {
    pub(super) fn new(bytes_max: usize, metrics: &Metrics) -> Queue {
        assert!(bytes_max > 0, "an empty queue must have room");
        metrics.mqtt.queue_bytes_max.set(gauge(bytes_max));
        Queue {
            messages: VecDeque::new(),
            bytes: 0,
            bytes_max,
            paused_at: None,
            logged_at: None,
            pauses_unlogged: 0,
        }
    }

    /// Whether the event loop may read another message from the broker.
    pub(super) fn has_room(&self) -> bool {
        self.bytes < self.bytes_max
    }

    pub(super) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    pub(super) fn push(&mut self, publish: Publish, metrics: &Metrics) {
        assert!(
            self.has_room(),
            "a message was read with the queue at its bound"
        );
        self.bytes += size(&publish);
        self.messages.push_back(publish);
        let mqtt = &metrics.mqtt;
        if gauge(self.bytes) > mqtt.queue_bytes_peak.get() {
            mqtt.queue_bytes_peak.set(gauge(self.bytes));
        }
        self.report(metrics);
        if !self.has_room() {
            self.pause(metrics);
        }
    }

    pub(super) fn pop(&mut self, metrics: &Metrics) -> Option<Publish> {
        let publish = self.messages.pop_front()?;
        self.bytes -= size(&publish);
        self.report(metrics);
        if self.has_room() {
            self.resume(metrics);
        }
        Some(publish)
    }

    /// Forgets every message (the connection is gone: the broker delivers the QoS 1 ones
    /// again on the next).
    pub(super) fn clear(&mut self, metrics: &Metrics) {
        self.messages.clear();
        self.bytes = 0;
        self.report(metrics);
        self.resume(metrics);
    }

    fn report(&self, metrics: &Metrics) {
        metrics.mqtt.queue_bytes.set(gauge(self.bytes));
        metrics.mqtt.queue_messages.set(gauge(self.messages.len()));
    }

    fn pause(&mut self, metrics: &Metrics) {
        let now = Instant::now();
        self.paused_at = Some(now);
        metrics.mqtt.read_pauses.inc();
        self.pauses_unlogged += 1;
        if self
            .logged_at
            .is_none_or(|at| now.duration_since(at) >= PAUSE_LOG_INTERVAL)
        {
            tracing::warn!(
                queue_bytes_max = self.bytes_max,
                pauses = self.pauses_unlogged,
                "MQTT queue full (--mqtt-queue-bytes-max): reading from the broker paused until \
                 a write finishes; at QoS 1 the broker keeps the messages, at QoS 0 it drops \
                 what it cannot hold (mosquitto: max_queued_messages)"
            );
            self.logged_at = Some(now);
            self.pauses_unlogged = 0;
        }
    }

    fn resume(&mut self, metrics: &Metrics) {
        if let Some(at) = self.paused_at.take() {
            metrics
                .mqtt
                .read_paused_seconds
                .inc_by(at.elapsed().as_secs_f64());
        }
    }
}

fn gauge(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: usize) -> Publish {
        Publish::new("t", rumqttc::QoS::AtMostOnce, vec![0u8; bytes - 1])
    }

    #[test]
    fn the_queue_reads_until_its_bound_and_one_message_past_it_at_most() {
        let metrics = Metrics::new();
        let mut queue = Queue::new(250, &metrics);
        for _ in 0..2 {
            assert!(queue.has_room());
            queue.push(message(100), &metrics);
        }
        assert!(queue.has_room(), "200 of 250 bytes");
        queue.push(message(100), &metrics);
        assert!(!queue.has_room(), "300 bytes: reading pauses");
        assert_eq!(metrics.mqtt.queue_bytes_peak.get(), 300);
        assert_eq!(metrics.mqtt.read_pauses.get(), 1);
        queue.pop(&metrics).expect("a message");
        assert!(queue.has_room(), "200 bytes: reading resumes");
        assert_eq!(metrics.mqtt.queue_messages.get(), 2);
        queue.clear(&metrics);
        assert!(queue.is_empty() && queue.has_room());
        assert_eq!(metrics.mqtt.queue_bytes.get(), 0);
    }

    #[test]
    fn an_empty_queue_takes_a_message_larger_than_its_bound() {
        let metrics = Metrics::new();
        let mut queue = Queue::new(10, &metrics);
        queue.push(message(1_000), &metrics);
        assert!(!queue.has_room());
        assert_eq!(metrics.mqtt.queue_bytes_max.get(), 10);
    }
}
