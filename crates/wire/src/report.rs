//! What the engine reports about itself and its devices, as JSON: the answers of the native
//! API's `GET /stats` and `GET /devices`, and what `roamkv stats --json` and `roamkv devices
//! --json` print, from a data directory or from a running server (`--server`): one form, so the
//! two print the same.

use roamkv_engine::{DeviceInfo, Stats};
use serde_json::{Value, json};

/// Every field of [`Stats`] under its own name, plus `write_amplification` (computed).
pub fn stats_to_json(stats: &Stats) -> Value {
    let mut document = serde_json::to_value(stats).unwrap_or(Value::Null);
    document["write_amplification"] = json!(stats.write_amplification());
    document
}

/// The inverse of [`stats_to_json`] (computed fields are ignored); the error says what is
/// missing or mistyped.
pub fn stats_from_json(document: Value) -> Result<Stats, String> {
    serde_json::from_value(document).map_err(|e| format!("not the engine's statistics: {e}"))
}

/// One device of a listing; `now_ms` gives its age.
pub fn device_to_json(device: &DeviceInfo, now_ms: u64) -> Value {
    json!({
        "device": device.name,
        "tier": device.tier.name(),
        "registered_at_ms": device.registered_at_ms,
        "age_ms": now_ms.saturating_sub(device.registered_at_ms),
        "log_readings": device.log_readings,
        "lower_runs": device.lower_runs,
    })
}
