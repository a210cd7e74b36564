//! What the server shows of where data goes beyond this edge — the cloud sink, the departures
//! waiting for it, handoffs to and from other edges: the figures /api/roamkv/v1/sink answers,
//! /metrics exports and the status page draws. Plain data, made by `cloud::view`, so that metrics
//! and the status page need nothing of the server's state.

use roamkv_sink::SinkStatus;
use serde::Serialize;

use crate::departures::departing::Waiting;

#[derive(Debug, Clone, Serialize)]
pub struct CloudView {
    /// None: no sink configured.
    pub sink: Option<SinkStatus>,
    /// Log bytes from the sink's committed cursor to the log's end, as of this view (the sink's
    /// own `lag_bytes` is as of its last turn); None before the sink has a cursor.
    pub lag_bytes: Option<u64>,
    /// Readings behind, estimated from the bytes behind and the log's bytes per reading.
    pub lag_readings: u64,
    /// Log bytes the sink's hold keeps from retiring, and the cap past which it is released.
    pub hold_bytes: u64,
    pub hold_bytes_max: u64,
    pub holds_released: u64,
    pub on_depart: &'static str,
    pub departures_waiting: Vec<Waiting>,
    pub handoffs: HandoffFigures,
}

/// Handoffs, counted.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HandoffFigures {
    pub out_in_flight: u64,
    pub in_in_flight: u64,
    pub done: u64,
    pub aborted: u64,
    pub received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Seconds the completed handoffs took, summed.
    pub seconds: f64,
}
