//! Departures that wait for the cloud (`--on-depart cloud`): paper 002's "transferred to the
//! cloud computing server ... then the previous edge server deletes the data", in that order.
//!
//! A departure asked for (EdgeX `DELETE event/device/name`, the native `DELETE /devices/{d}`,
//! retention or `DELETE event/age` when every reading of a device is older) does, in order:
//! 1. **fence** the device (`fence.rs`): writes of it are refused (409) from now on, and none is
//!    in flight;
//! 2. **record** it in `DATA_DIR/server/departing.json` (atomically, durably) and answer 202;
//! 3. wait, off the request, until the cloud sink has committed everything up to the log's end
//!    as it was after step 1 (so every reading of the device is in the cloud);
//! 4. **depart** (one DEPART record, nothing rewritten), then take the record out of the file,
//!    then lift the fence (a later write starts a new incarnation).
//!
//! This module is the record (the file and its bounds); the task that waits and departs is in
//! cloud.rs. A restart re-fences every recorded device before serving and goes on from step 3; a crash
//! between steps 4 and the file's update departs again, which finds nothing to do. Ingest never
//! waits for the cloud: only the departing devices do, and /api/roamkv/v1/departures, the status
//! page and `roamkv_departures_waiting` list them. If the sink's hold on the log was released
//! meanwhile (an outage past its cap), the sink's gap recovery exports the devices present by
//! scanning, and a fenced device is still present: its readings reach the cloud that way.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files;
use crate::http::error::ApiError;

/// Departures that may wait at once: bounds the file (rewritten whole on a change) and the
/// fences they hold.
pub const WAITING_MAX: usize = 10_000;

/// One departure waiting for the cloud.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Waiting {
    pub device: String,
    /// What asked for it: "DELETE device", "native", "age", "retention".
    pub how: String,
    /// Depart only if every reading is older than this (retention and age deletes): the
    /// device is fenced, so nothing newer can come meanwhile. None: depart.
    pub cutoff_ns: Option<i64>,
    pub requested_at_ms: u64,
}

/// The file's form: `{"format": 1, "waiting": [...]}`.
#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Stored {
    format: u32,
    waiting: Vec<Waiting>,
}

pub struct Departing {
    path: PathBuf,
    waiting: parking_lot::Mutex<Vec<Waiting>>,
    /// Woken when a departure is added.
    pub added: tokio::sync::Notify,
}

impl Departing {
    /// Loads `DATA_DIR/server/departing.json` (none: nothing waits). A file that does not parse
    /// is an error: starting without it would take writes for devices that are leaving.
    pub fn open(data_dir: &Path) -> Result<Departing, String> {
        let path = files::server_file(data_dir, "departing.json");
        let waiting = match files::read_if_present(&path)? {
            Some(bytes) => {
                let stored: Stored = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("departures waiting {}: {e}", path.display()))?;
                if stored.format != 1 {
                    return Err(format!(
                        "departures waiting {}: format {} is not 1",
                        path.display(),
                        stored.format
                    ));
                }
                stored.waiting
            }
            None => Vec::new(),
        };
        Ok(Departing {
            path,
            waiting: parking_lot::Mutex::new(waiting),
            added: tokio::sync::Notify::new(),
        })
    }

    pub fn list(&self) -> Vec<Waiting> {
        self.waiting.lock().clone()
    }

    pub fn len(&self) -> usize {
        self.waiting.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records a departure durably (one per device: a second ask keeps the first). Blocking.
    pub fn add(&self, departure: Waiting) -> Result<(), ApiError> {
        let mut waiting = self.waiting.lock();
        if waiting.iter().any(|w| w.device == departure.device) {
            return Ok(());
        }
        if waiting.len() >= WAITING_MAX {
            return Err(ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{WAITING_MAX} departures are waiting for the cloud sink already (the limit); \
                     try again once it has caught up"
                ),
            ));
        }
        let mut next = waiting.clone();
        next.push(departure);
        self.persist(&next).map_err(ApiError::internal)?;
        *waiting = next;
        self.added.notify_one();
        Ok(())
    }

    /// Takes departed devices out of the file, durably. Blocking.
    pub fn remove(&self, devices: &[String]) -> Result<(), String> {
        let mut waiting = self.waiting.lock();
        let next: Vec<Waiting> = waiting
            .iter()
            .filter(|w| !devices.contains(&w.device))
            .cloned()
            .collect();
        self.persist(&next)?;
        *waiting = next;
        Ok(())
    }

    fn persist(&self, waiting: &[Waiting]) -> Result<(), String> {
        let stored = Stored {
            format: 1,
            waiting: waiting.to_vec(),
        };
        let bytes = serde_json::to_vec_pretty(&stored)
            .map_err(|e| format!("encoding departures waiting: {e}"))?;
        files::write_atomically(&self.path, &bytes)
    }
}
