//! Retention by age: the v3 `DELETE event/age/{age}` call, the native API's per-device
//! settings (`PUT /api/roamkv/v1/devices/{device}/retention`), applied at once and then every
//! `--retention-interval-s` by a background task, and the default for every other device
//! (`--retention-default-h`, core-data's age-based retention), applied by the same task.
//!
//! Applying a cutoff to a device is one engine call: the device departs if every reading is
//! older (one DEPART: it is left with nothing, and a departure frees the most), otherwise its
//! older readings are trimmed (one TRIM record, `Engine::trim_before`).
//!
//! Owns: the per-device settings and their durably replaced file (`store.rs`), the default in
//! force, and the periodic pass (here). May not touch: `AppState` or any room above it. How a
//! cutoff is applied to one device writes through the engine under the departures' fences, so
//! it is the app's (`AppState::apply_cutoff` and `apply_retention`, state.rs); the pass asks for
//! it through `Retained`, the port the app implements: the pass needs the device list, the
//! settings and that one call, nothing else of the state.

pub mod store;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::watch;

use crate::http::error::ApiError;

pub use store::{Applied, RetentionStore, SETTINGS_MAX, settle_default};

/// What the periodic pass needs of the server (the app implements it for `AppState`).
pub trait Retained: Send + Sync + 'static {
    /// The devices present now.
    fn device_names(&self) -> Vec<String>;
    /// The per-device settings.
    fn settings(&self) -> &RetentionStore;
    /// The default retention for every device without a setting, if any (ms).
    fn default_ms(&self) -> Option<u64>;
    /// Applies the retention in force to one device.
    fn apply_retention(&self, device: &str) -> Result<Applied, ApiError>;
}

/// Applies every setting every `interval`, until shutdown. A device that fails (e.g. the log
/// budget is full) is logged and retried at the next pass.
pub async fn run<S: Retained>(state: Arc<S>, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let s = Arc::clone(&state);
        let pass = tokio::task::spawn_blocking(move || apply_all(s.as_ref())).await;
        if let Err(e) = pass {
            tracing::error!(error = %e, "retention pass failed");
        }
    }
}

/// One pass: every device with a setting of its own, and with a default every other device too
/// (a walk of the device list, then one engine call per device: `apply_cutoff`).
fn apply_all(state: &impl Retained) {
    let present = state.device_names();
    let settings = state.settings().all();
    let default = state.default_ms();
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
