//! Retention by age: the v3 `DELETE event/age/{age}` call, the native API's per-device
//! settings (`PUT /api/roamkv/v1/devices/{device}/retention`), applied at once and then every
//! `--retention-interval-s` by a background task, and the default for every other device
//! (`--retention-default-h`, core-data's age-based retention), applied by the same task.
//!
//! Applying a cutoff to a device is one engine call: the device departs if every reading is
//! older (one DEPART: it is left with nothing, and a departure frees the most), otherwise its
//! older readings are trimmed (one TRIM record, `Engine::trim_before`).
//!
//! How a cutoff is applied to one device is `AppState::apply_cutoff` (state.rs, with the
//! state's other operations); the settings and their file are `retention_store.rs`; this
//! module is the periodic pass.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::watch;

use crate::state::{AppState, Shared};

pub use crate::retention_store::{Applied, RetentionStore, SETTINGS_MAX, settle_default};

/// Applies every setting every `interval`, until shutdown. A device that fails (e.g. the log
/// budget is full) is logged and retried at the next pass.
pub async fn run(state: Shared, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let s = Arc::clone(&state);
        let pass = tokio::task::spawn_blocking(move || apply_all(&s)).await;
        if let Err(e) = pass {
            tracing::error!(error = %e, "retention pass failed");
        }
    }
}

/// One pass: every device with a setting of its own, and with a default every other device too
/// (a walk of the device list, then one engine call per device: `apply_cutoff`).
fn apply_all(state: &AppState) {
    let present: Vec<String> = state.engine.devices().into_iter().map(|d| d.name).collect();
    let settings = state.retention.all();
    let default = state.config.retention_default_ms;
    for device in present {
        if default.is_none() && !settings.contains_key(&device) {
            continue;
        }
        match state.apply_retention(&device) {
            Ok(Applied::Unchanged) => {}
            Ok(applied) => tracing::info!(%device, ?applied, "retention applied"),
            Err(e) if e.status == StatusCode::INSUFFICIENT_STORAGE => {
                tracing::warn!(%device, error = %e.message, "retention deferred: no log room");
            }
            Err(e) => tracing::error!(%device, error = %e.message, "retention failed"),
        }
    }
}
