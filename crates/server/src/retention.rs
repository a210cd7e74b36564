//! Retention by age: the v3 `DELETE event/age/{age}` call and the native API's per-device
//! settings (`PUT /api/roamkv/v1/devices/{device}/retention`), applied at once and then every
//! `--retention-interval-s` by a background task.
//!
//! Applying a cutoff to a device is one engine call: the device departs if every reading is
//! older (one DEPART: it is left with nothing, and a departure frees the most), otherwise its
//! older readings are trimmed (one TRIM record, `Engine::trim_before`).
//!
//! The settings survive restarts in `DATA_DIR/server/retention.json` (the server's own file
//! beside the engine's; the data directory's LOCK keeps a second server out), replaced
//! atomically on every change: written to `retention.json.tmp`, fsync'd, renamed, the directory
//! fsync'd. A change is acknowledged only after that.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::state::{AppState, Shared, now_ms};
use crate::status::Departure;

/// Devices that may have a retention setting: bounds the file (rewritten whole on a change)
/// and one application pass.
pub const SETTINGS_MAX: usize = 100_000;

/// The file's form: `{"format": 1, "max_age_ms": {"car-17": 86400000, ...}}`.
#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StoredSettings {
    format: u32,
    max_age_ms: BTreeMap<String, u64>,
}

/// The per-device settings and the file that keeps them.
pub struct RetentionStore {
    path: PathBuf,
    settings: parking_lot::Mutex<BTreeMap<String, u64>>,
}

/// What applying a cutoff did to one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Applied {
    /// Every reading was older: the device departed.
    Departed,
    /// Its older readings were deleted.
    Trimmed,
    /// Nothing was older (or the device is not here): nothing was written.
    Unchanged,
}

impl RetentionStore {
    /// Loads `DATA_DIR/server/retention.json` (none yet: no settings). A file that does not
    /// parse is an error: starting without the settings would keep data they say to delete.
    pub fn open(data_dir: &Path) -> Result<RetentionStore, String> {
        let path = data_dir.join("server").join("retention.json");
        let settings = match std::fs::read(&path) {
            Ok(bytes) => {
                let stored: StoredSettings = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("retention settings {}: {e}", path.display()))?;
                if stored.format != 1 {
                    return Err(format!(
                        "retention settings {}: format {} is not 1",
                        path.display(),
                        stored.format
                    ));
                }
                stored.max_age_ms
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        Ok(RetentionStore {
            path,
            settings: parking_lot::Mutex::new(settings),
        })
    }

    pub fn get(&self, device: &str) -> Option<u64> {
        self.settings.lock().get(device).copied()
    }

    pub fn all(&self) -> BTreeMap<String, u64> {
        self.settings.lock().clone()
    }

    /// Sets (or replaces) a device's maximum age, durably. Blocking (file I/O).
    pub fn set(&self, device: &str, max_age_ms: u64) -> Result<(), ApiError> {
        let mut settings = self.settings.lock();
        if settings.len() >= SETTINGS_MAX && !settings.contains_key(device) {
            return Err(ApiError::bad_request(format!(
                "{SETTINGS_MAX} devices already have a retention setting (the limit); remove one first"
            )));
        }
        let mut next = settings.clone();
        next.insert(device.to_string(), max_age_ms);
        self.persist(&next)?;
        *settings = next;
        Ok(())
    }

    /// Removes a device's setting, durably; false if it had none. Blocking (file I/O).
    pub fn remove(&self, device: &str) -> Result<bool, ApiError> {
        let mut settings = self.settings.lock();
        if !settings.contains_key(device) {
            return Ok(false);
        }
        let mut next = settings.clone();
        next.remove(device);
        self.persist(&next)?;
        *settings = next;
        Ok(true)
    }

    /// Replaces the file atomically: tmp file, fsync, rename, directory fsync.
    fn persist(&self, settings: &BTreeMap<String, u64>) -> Result<(), ApiError> {
        let fail = |what: &str, e: std::io::Error| {
            ApiError::internal(format!("{what} {}: {e}", self.path.display()))
        };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| fail("creating the directory of", e))?;
        let stored = StoredSettings {
            format: 1,
            max_age_ms: settings.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&stored)
            .map_err(|e| ApiError::internal(format!("encoding retention settings: {e}")))?;
        let tmp = self.path.with_extension("json.tmp");
        let mut file = std::fs::File::create(&tmp).map_err(|e| fail("creating a temporary", e))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| fail("writing a temporary", e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| fail("renaming into", e))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("syncing the directory of", e))
    }
}

impl AppState {
    /// Applies a cutoff (engine milliseconds) to one device: departs it if every reading is
    /// older, else trims its older readings. Blocking (engine calls).
    pub fn apply_cutoff(
        &self,
        device: &str,
        cutoff_ns: i64,
        how: &'static str,
    ) -> Result<Applied, ApiError> {
        if self
            .engine
            .depart_if_older_than(device, cutoff_ns)
            .map_err(ApiError::from_engine)?
        {
            self.history.lock().push_departure(Departure {
                at_ms: now_ms(),
                device: device.to_string(),
                how,
            });
            return Ok(Applied::Departed);
        }
        Ok(
            if self
                .engine
                .trim_before(device, cutoff_ns)
                .map_err(ApiError::from_engine)?
            {
                Applied::Trimmed
            } else {
                Applied::Unchanged
            },
        )
    }

    /// Applies one device's retention setting now (a no-op without one).
    pub fn apply_retention(&self, device: &str) -> Result<Applied, ApiError> {
        match self.retention.get(device) {
            Some(max_age_ms) => self.apply_cutoff(device, cutoff_for(max_age_ms), "retention"),
            None => Ok(Applied::Unchanged),
        }
    }
}

/// Readings with ts < now - max_age are past their retention.
/// The cutoff (ns since the epoch) of a maximum age in milliseconds: readings older go.
pub fn cutoff_for(max_age_ms: u64) -> i64 {
    roamkv_engine::ms_to_ns(i64::try_from(now_ms().saturating_sub(max_age_ms)).unwrap_or(i64::MAX))
}

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

fn apply_all(state: &AppState) {
    let present: std::collections::HashSet<String> =
        state.engine.devices().into_iter().map(|d| d.name).collect();
    for (device, _) in state.retention.all() {
        if !present.contains(&device) {
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
