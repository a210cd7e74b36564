//! The per-device retention settings and the file that keeps them; the data directory's default.
//!
//! The settings survive restarts in `DATA_DIR/server/retention.json` (the server's own file
//! beside the engine's; the data directory's LOCK keeps a second server out), replaced
//! atomically on every change: written to `retention.json.tmp`, fsync'd, renamed, the directory
//! fsync'd. A change is acknowledged only after that.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roamkv_engine::Engine;
use serde::{Deserialize, Serialize};

use crate::http::error::ApiError;

/// core-data's default age-based retention: a week.
pub const DEFAULT_MAX_AGE_MS: u64 = 168 * 3_600_000;

/// `DATA_DIR/server/retention-default.json`: `{"format": 1, "max_age_ms": 604800000}` (or
/// `null`: no default), recorded the first time a server starts on the directory without
/// `--retention-default-h`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredDefault {
    format: u32,
    max_age_ms: Option<u64>,
}

/// The default retention in force when `--retention-default-h` was not given: the one recorded
/// for this data directory, or, the first time, core-data's week if the engine holds no device
/// yet, and none if it does. Why: a default turned on for data kept before it existed (an
/// upgraded gateway, a directory filled by `roamkv load`) would delete, at the first pass,
/// what was kept on purpose; on an empty directory it deletes nothing that was kept without it.
/// Decided once and recorded (durably), so that a directory keeps its default across restarts.
pub fn settle_default(data_dir: &Path, engine: &Engine) -> Result<Option<u64>, String> {
    let path = crate::files::server_file(data_dir, "retention-default.json");
    if let Some(bytes) = crate::files::read_if_present(&path)? {
        let stored: StoredDefault = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the default retention {}: {e}", path.display()))?;
        if stored.format != 1 {
            return Err(format!(
                "the default retention {}: format {} is not 1",
                path.display(),
                stored.format
            ));
        }
        return Ok(stored.max_age_ms);
    }
    let engine_has_devices = !engine.devices().is_empty();
    let stored = StoredDefault {
        format: 1,
        max_age_ms: (!engine_has_devices).then_some(DEFAULT_MAX_AGE_MS),
    };
    if engine_has_devices {
        tracing::warn!(
            "no default retention for {}: it held data before this server's default (168 h) \
             existed; --retention-default-h 168 turns it on, 0 keeps it off and quiet",
            data_dir.display()
        );
    }
    let bytes = serde_json::to_vec_pretty(&stored)
        .map_err(|e| format!("encoding the default retention: {e}"))?;
    crate::files::write_atomically(&path, &bytes)?;
    Ok(stored.max_age_ms)
}

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
        let path = crate::files::server_file(data_dir, "retention.json");
        let settings = match crate::files::read_if_present(&path)? {
            Some(bytes) => {
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
            None => BTreeMap::new(),
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

    /// Replaces the file atomically and durably (files/mod.rs).
    fn persist(&self, settings: &BTreeMap<String, u64>) -> Result<(), ApiError> {
        let stored = StoredSettings {
            format: 1,
            max_age_ms: settings.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&stored)
            .map_err(|e| ApiError::internal(format!("encoding retention settings: {e}")))?;
        crate::files::write_atomically(&self.path, &bytes).map_err(ApiError::internal)
    }
}
