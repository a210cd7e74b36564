//! The cloud sink's, the departures' and the handoffs' metrics, read from `CloudView` at each
//! scrape.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::follow::{follow, follow_f64, set};
use crate::observability::cloud_view::CloudView;

/// The cloud sink, the departures waiting for it and the handoffs, read from `CloudView` at
/// each scrape (all 0 without a sink or handoffs).
#[derive(Default)]
pub(super) struct CloudMetrics {
    pub(super) connected: Gauge,
    pub(super) lag_bytes: Gauge,
    pub(super) lag_seconds: Gauge<f64, AtomicU64>,
    pub(super) lag_readings: Gauge,
    pub(super) hold_bytes: Gauge,
    pub(super) hold_limit_bytes: Gauge,
    pub(super) departures_waiting: Gauge,
    pub(super) handoffs_out_in_flight: Gauge,
    pub(super) handoffs_in_in_flight: Gauge,
    pub(super) rows: Counter,
    pub(super) batches: Counter,
    pub(super) retries: Counter,
    pub(super) gaps: Counter,
    pub(super) holds_released: Counter,
    pub(super) handoffs_done: Counter,
    pub(super) handoffs_aborted: Counter,
    pub(super) handoffs_received: Counter,
    pub(super) handoff_sent_bytes: Counter,
    pub(super) handoff_received_bytes: Counter,
    pub(super) handoff_seconds: Counter<f64, AtomicU64>,
}

impl CloudMetrics {
    pub(super) fn gauges(&self) -> [(&'static str, &'static str, &Gauge); 8] {
        [
            (
                "sink_connected",
                "1 while the cloud sink is connected and tailing or exporting",
                &self.connected,
            ),
            (
                "sink_lag_bytes",
                "Commit-log bytes not yet in the cloud database",
                &self.lag_bytes,
            ),
            (
                "sink_lag_readings",
                "Readings not yet in the cloud database (estimated from the bytes)",
                &self.lag_readings,
            ),
            (
                "sink_hold_bytes",
                "Log bytes kept from retiring for the sink",
                &self.hold_bytes,
            ),
            (
                "sink_hold_limit_bytes",
                "Cap on the log bytes kept for the sink: past it the hold is released (never a writer stall)",
                &self.hold_limit_bytes,
            ),
            (
                "departures_waiting",
                "Departures waiting for the cloud sink (--on-depart cloud)",
                &self.departures_waiting,
            ),
            (
                "handoffs_out_in_flight",
                "Handoffs of devices from this edge not finished",
                &self.handoffs_out_in_flight,
            ),
            (
                "handoffs_in_in_flight",
                "Handoffs of devices to this edge not committed",
                &self.handoffs_in_in_flight,
            ),
        ]
    }

    // Long because: one table of every counter with its name and help, read top to bottom.
    pub(super) fn counters(&self) -> [(&'static str, &'static str, &Counter); 10] {
        [
            (
                "sink_rows",
                "Readings the sink committed to the cloud database",
                &self.rows,
            ),
            (
                "sink_batches",
                "Transactions the sink committed",
                &self.batches,
            ),
            (
                "sink_retries",
                "Sink errors retried (connection lost, database restarting)",
                &self.retries,
            ),
            (
                "sink_gaps",
                "Times the sink lost its hold on the log and exported the devices present by scanning",
                &self.gaps,
            ),
            (
                "sink_holds_released",
                "Sink holds released at their cap",
                &self.holds_released,
            ),
            (
                "handoffs_done",
                "Handoffs from this edge completed",
                &self.handoffs_done,
            ),
            (
                "handoffs_aborted",
                "Handoffs from this edge called off",
                &self.handoffs_aborted,
            ),
            (
                "handoffs_received",
                "Handoffs to this edge committed",
                &self.handoffs_received,
            ),
            (
                "handoff_sent_bytes",
                "Bytes of chunks handed to other edges",
                &self.handoff_sent_bytes,
            ),
            (
                "handoff_received_bytes",
                "Bytes of chunks received from other edges",
                &self.handoff_received_bytes,
            ),
        ]
    }

    pub(super) fn register(&self, r: &mut Registry) {
        for (name, help, gauge) in self.gauges() {
            r.register(name, help, gauge.clone());
        }
        for (name, help, counter) in self.counters() {
            r.register(name, help, counter.clone());
        }
        r.register(
            "sink_lag_seconds",
            "Seconds since the oldest record not yet in the cloud database was written",
            self.lag_seconds.clone(),
        );
        r.register(
            "handoff_duration_seconds",
            "Seconds the completed handoffs from this edge took, summed",
            self.handoff_seconds.clone(),
        );
    }

    pub(super) fn update(&self, view: &CloudView) {
        let sink = view.sink.clone().unwrap_or_default();
        set(
            &self.connected,
            u64::from(sink.state == "tailing" || sink.state == "snapshot"),
        );
        set(&self.lag_bytes, view.lag_bytes.unwrap_or(sink.lag_bytes));
        self.lag_seconds.set(sink.lag_seconds);
        set(&self.lag_readings, view.lag_readings);
        set(&self.hold_bytes, view.hold_bytes);
        set(&self.hold_limit_bytes, view.hold_bytes_max);
        set(
            &self.departures_waiting,
            view.departures_waiting.len() as u64,
        );
        let handoffs = &view.handoffs;
        set(&self.handoffs_out_in_flight, handoffs.out_in_flight);
        set(&self.handoffs_in_in_flight, handoffs.in_in_flight);
        follow(&self.rows, sink.rows_total);
        follow(&self.batches, sink.batches_total);
        follow(&self.retries, sink.retries_total);
        follow(&self.gaps, sink.gaps_total);
        follow(&self.holds_released, view.holds_released);
        follow(&self.handoffs_done, handoffs.done);
        follow(&self.handoffs_aborted, handoffs.aborted);
        follow(&self.handoffs_received, handoffs.received);
        follow(&self.handoff_sent_bytes, handoffs.bytes_sent);
        follow(&self.handoff_received_bytes, handoffs.bytes_received);
        follow_f64(&self.handoff_seconds, handoffs.seconds);
    }
}
