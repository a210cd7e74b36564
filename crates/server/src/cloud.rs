//! The cloud sink as the server runs it: started beside the engine when `--sink` is given, the
//! task that departs devices once it has their readings (`--on-depart cloud`, departing.rs has
//! the record), and what is shown of both. `GET /api/roamkv/v1/sink` answers its state, cursor, lag (bytes, seconds, readings),
//! retries, last error and the log's hold against its cap; `GET /api/roamkv/v1/departures` the
//! departures waiting for it (departing.rs). The same figures go to /metrics and the status
//! page (`CloudView`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use roamkv_engine::{Engine, LogPos};
use std::time::Duration;

use roamkv_sink::{Sink, SinkConfig};
use serde_json::json;
use tokio::sync::watch;

use crate::departing::Waiting;
use crate::error::ApiError;
use crate::observability::cloud_view::CloudView;
use crate::observability::status::Departure;
use crate::settings::SinkSettings;
use crate::state::{AppState, Shared, now_ms};

/// How long one wait for the sink lasts before the departing task looks at shutdown and new
/// departures.
const WAIT_STEP: Duration = Duration::from_secs(1);

/// Starts the sink (an error only for what every retry would fail on: docs/SERVER.md).
pub async fn start(
    engine: &Arc<Engine>,
    settings: &SinkSettings,
    edge_id: &str,
    stop: watch::Receiver<bool>,
) -> Result<Sink, String> {
    let config = SinkConfig {
        password: settings.password.clone(),
        ca_file: settings.ca_file.clone(),
        ..SinkConfig::new(&settings.url, edge_id)
    };
    Sink::start(Arc::clone(engine), config, stop).await
}

/// What the server shows of the sink and the departures waiting for it (cloud_view.rs), as of
/// now. Blocking (engine stats).
pub fn view(state: &AppState) -> CloudView {
    let sink = state.sink.as_ref().map(|s| s.status());
    let feed = state.engine.feed().status();
    let stats = state.engine.stats();
    let bytes_per_reading = stats.log_bytes_written / stats.user_records.max(1);
    let lag_bytes = sink
        .as_ref()
        .and_then(|s| s.cursor.as_deref())
        .and_then(|c| c.parse::<LogPos>().ok())
        .map(|cursor| state.engine.feed().lag_bytes(&cursor));
    CloudView {
        sink,
        lag_bytes,
        lag_readings: lag_bytes.unwrap_or(0) / bytes_per_reading.max(1),
        hold_bytes: feed.hold_bytes,
        hold_bytes_max: feed.hold_bytes_max,
        holds_released: feed.holds_released,
        on_depart: state.config.on_depart.name(),
        departures_waiting: state.departing.list(),
        handoffs: handoff_figures(state),
    }
}

fn handoff_figures(state: &AppState) -> crate::observability::cloud_view::HandoffFigures {
    use std::sync::atomic::Ordering::Relaxed;
    let (out_in_flight, in_in_flight) = state.handoffs.in_flight();
    let c = &state.handoffs.counters;
    crate::observability::cloud_view::HandoffFigures {
        out_in_flight,
        in_in_flight,
        done: c.done.load(Relaxed),
        aborted: c.aborted.load(Relaxed),
        received: c.received.load(Relaxed),
        bytes_sent: c.bytes_sent.load(Relaxed),
        bytes_received: c.bytes_received.load(Relaxed),
        seconds: c.duration_ms.load(Relaxed) as f64 / 1e3,
    }
}

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/sink", get(sink_status))
        .route("/departures", get(departures))
}

#[utoipa::path(get, path = "/api/roamkv/v1/sink", tag = "cloud sink",
    responses((status = 200, description = "the cloud sink's state, lag and hold")))]
async fn sink_status(State(state): State<Shared>) -> Result<Response, ApiError> {
    let view = state.blocking(|s| Ok(view(s))).await?;
    Ok(Json(json!(view)).into_response())
}

#[utoipa::path(get, path = "/api/roamkv/v1/departures", tag = "cloud sink",
    responses((status = 200, description = "departures waiting for the cloud sink")))]
async fn departures(State(state): State<Shared>) -> Result<Response, ApiError> {
    let waiting = state.departing.list();
    Ok(Json(json!({
        "onDepart": state.config.on_depart.name(),
        "waiting": waiting,
    }))
    .into_response())
}

/// The departing task (`--on-depart cloud`, departing.rs): waits for the sink past the log's end, departs what waited, until
/// shutdown. Starts by departing what a previous run left waiting (their devices are fenced
/// before the server serves: `lib.rs`).
pub async fn depart_after_cloud(state: Shared, mut stop: watch::Receiver<bool>) {
    loop {
        let batch = state.departing.list();
        if batch.is_empty() {
            tokio::select! {
                _ = stop.changed() => return,
                _ = state.departing.added.notified() => continue,
            }
        }
        if !depart_after_sink(&state, &batch, &mut stop).await {
            return;
        }
    }
}

/// One round: the log's end now (every device of `batch` is fenced, so each of their readings
/// is before it), the sink past it, then the departures. False on shutdown.
async fn depart_after_sink(
    state: &Shared,
    batch: &[Waiting],
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let Some(sink) = state.sink.as_ref() else {
        tracing::error!("departures wait for a cloud sink, and none runs");
        return false;
    };
    let engine = Arc::clone(&state.engine);
    let Ok(end) = tokio::task::spawn_blocking(move || engine.feed().end()).await else {
        return false;
    };
    loop {
        if *stop.borrow() {
            return false;
        }
        match sink.wait_past(&end, WAIT_STEP).await {
            Ok(()) => break,
            Err(_) if state.departing.len() > batch.len() => {
                // More came meanwhile: take them into this wait (their end is later).
                return true;
            }
            Err(_) => continue,
        }
    }
    let s = Arc::clone(state);
    let batch = batch.to_vec();
    let done = tokio::task::spawn_blocking(move || depart_all(&s, &batch)).await;
    match done {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "departing after the cloud sink failed; retrying");
            tokio::time::sleep(WAIT_STEP).await;
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "departing task failed");
            false
        }
    }
}

/// Departs each device of `batch` (blocking), then forgets them durably, then lifts their
/// fences.
fn depart_all(state: &crate::state::AppState, batch: &[Waiting]) -> Result<(), String> {
    for w in batch {
        let departed = match w.cutoff_ns {
            Some(cutoff) => state.engine.depart_if_older_than(&w.device, cutoff),
            None => state.engine.depart(&w.device).map(|()| true),
        }
        .map_err(|e| format!("departing {}: {e}", w.device))?;
        if departed {
            state.history.lock().push_departure(Departure {
                at_ms: now_ms(),
                device: w.device.clone(),
                how: "after the cloud sink",
            });
        }
    }
    let devices: Vec<String> = batch.iter().map(|w| w.device.clone()).collect();
    state.departing.remove(&devices)?;
    for device in &devices {
        state.fences.unfence(device);
    }
    Ok(())
}
