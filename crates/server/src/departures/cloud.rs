//! The cloud sink as the server runs it: started beside the engine when `--sink` is given, and
//! the task that departs devices once it has their readings (`--on-depart cloud`, departing.rs
//! has the record). What is shown of both (`CloudView`: /api/roamkv/v1/sink and /departures,
//! /metrics, the status page) is drawn by the server's state from the parts (state.rs).

use std::sync::Arc;

use std::time::Duration;

use roamkv_engine::Engine;
use roamkv_sink::{Sink, SinkConfig};
use tokio::sync::watch;

use super::departing::{Departing, Waiting};
use super::fence::Fences;
use crate::settings::SinkSettings;

/// How long one wait for the sink lasts before the departing task looks at shutdown and new
/// departures.
const WAIT_STEP: Duration = Duration::from_secs(1);

/// What the departing task needs of the server: the server's state implements it (state.rs), so
/// that this part never names that state.
pub trait DepartureHost: Send + Sync + 'static {
    fn engine(&self) -> &Arc<Engine>;
    fn departing(&self) -> &Departing;
    fn fences(&self) -> &Fences;
    fn sink(&self) -> Option<&Sink>;
    /// `device` departed (`how` says why): the status page's history records it.
    fn departed(&self, device: &str, how: &'static str);
}

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

/// The departing task (`--on-depart cloud`, departing.rs): waits for the sink past the log's end, departs what waited, until
/// shutdown. Starts by departing what a previous run left waiting (their devices are fenced
/// before the server serves: `lib.rs`).
pub async fn depart_after_cloud<H: DepartureHost>(state: Arc<H>, mut stop: watch::Receiver<bool>) {
    loop {
        let batch = state.departing().list();
        if batch.is_empty() {
            tokio::select! {
                _ = stop.changed() => return,
                _ = state.departing().added.notified() => continue,
            }
        }
        if !depart_after_sink(&state, &batch, &mut stop).await {
            return;
        }
    }
}

/// One round: the log's end now (every device of `batch` is fenced, so each of their readings
/// is before it), the sink past it, then the departures. False on shutdown.
async fn depart_after_sink<H: DepartureHost>(
    state: &Arc<H>,
    batch: &[Waiting],
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let Some(sink) = state.sink() else {
        tracing::error!("departures wait for a cloud sink, and none runs");
        return false;
    };
    let engine = Arc::clone(state.engine());
    let Ok(end) = tokio::task::spawn_blocking(move || engine.feed().end()).await else {
        return false;
    };
    loop {
        if *stop.borrow() {
            return false;
        }
        match sink.wait_past(&end, WAIT_STEP).await {
            Ok(()) => break,
            Err(_) if state.departing().len() > batch.len() => {
                // More came meanwhile: take them into this wait (their end is later).
                return true;
            }
            Err(_) => continue,
        }
    }
    let s = Arc::clone(state);
    let batch = batch.to_vec();
    let done = tokio::task::spawn_blocking(move || depart_all(&*s, &batch)).await;
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
fn depart_all(state: &impl DepartureHost, batch: &[Waiting]) -> Result<(), String> {
    for w in batch {
        let departed = match w.cutoff_ns {
            Some(cutoff) => state.engine().depart_if_older_than(&w.device, cutoff),
            None => state.engine().depart(&w.device).map(|()| true),
        }
        .map_err(|e| format!("departing {}: {e}", w.device))?;
        if departed {
            state.departed(&w.device, "after the cloud sink");
        }
    }
    let devices: Vec<String> = batch.iter().map(|w| w.device.clone()).collect();
    state.departing().remove(&devices)?;
    for device in &devices {
        state.fences().unfence(device);
    }
    Ok(())
}
