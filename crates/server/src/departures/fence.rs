//! Fences: devices this server does not take writes for right now, and why. A departure that
//! waits for the cloud (`departing.rs`) fences its device until the DEPART is written, so that
//! nothing is written between the position the sink must pass and the DEPART. Every write path
//! (EdgeX and native HTTP, MQTT) checks the fence while it holds it shared, so fencing a device
//! waits for the writes already past the check: after `fence` returns, no write of the device
//! is in flight and none will start (HTTP: 409; MQTT: refused and counted, never silently
//! dropped).

use std::collections::HashMap;

use axum::http::StatusCode;
use parking_lot::{RwLock, RwLockReadGuard};

use crate::http::error::ApiError;

/// Devices fenced at once at most: a departure waiting for the cloud holds one, and their
/// number is bounded by what the departing file may hold (`departing::WAITING_MAX`).
pub const FENCES_MAX: usize = 100_000;

/// Why a device is fenced, as a refused writer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub reason: String,
    /// Where the device went (another edge's base URL), for the refusal's `Location`.
    pub location: Option<String>,
}

#[derive(Default)]
pub struct Fences {
    fenced: RwLock<HashMap<String, Fence>>,
}

impl Fences {
    /// Fences `device` with a reason a refused writer is told; returns once no write of it is
    /// in flight.
    pub fn fence(&self, device: &str, reason: &str) -> Result<(), String> {
        self.fence_to(device, reason, None)
    }

    /// `fence`, naming where the device went.
    pub fn fence_to(
        &self,
        device: &str,
        reason: &str,
        location: Option<String>,
    ) -> Result<(), String> {
        let mut fenced = self.fenced.write();
        if fenced.len() >= FENCES_MAX && !fenced.contains_key(device) {
            return Err(format!(
                "{FENCES_MAX} devices are fenced already (the limit); try again later"
            ));
        }
        fenced.insert(
            device.to_string(),
            Fence {
                reason: reason.to_string(),
                location,
            },
        );
        Ok(())
    }

    pub fn unfence(&self, device: &str) {
        self.fenced.write().remove(device);
    }

    /// Held shared by a write from its fence check until the engine has its batch.
    pub fn read(&self) -> FenceView<'_> {
        FenceView(self.fenced.read())
    }

    pub fn is_fenced(&self, device: &str) -> bool {
        self.fenced.read().contains_key(device)
    }

    pub fn len(&self) -> usize {
        self.fenced.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The fences as one write sees them.
pub struct FenceView<'a>(RwLockReadGuard<'a, HashMap<String, Fence>>);

impl FenceView<'_> {
    /// The first of `devices` that is fenced, with its fence.
    pub fn refusal<'d>(
        &self,
        mut devices: impl Iterator<Item = &'d str>,
    ) -> Option<(String, Fence)> {
        if self.0.is_empty() {
            return None;
        }
        devices.find_map(|d| self.0.get(d).map(|fence| (d.to_string(), fence.clone())))
    }

    /// The 409 for a write of `devices` if one of them is fenced, naming it, what it takes no
    /// more of (`what`: "writes", "deletions") and where it went.
    pub fn refuse<'d>(
        &self,
        devices: impl Iterator<Item = &'d str>,
        what: &str,
    ) -> Option<ApiError> {
        let (device, fence) = self.refusal(devices)?;
        Some(
            ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "device {device:?} takes no {what} here now: {}",
                    fence.reason
                ),
            )
            .with_location(fence.location),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_device_is_refused_until_unfenced() {
        let fences = Fences::default();
        assert_eq!(fences.read().refusal(["car"].into_iter()), None);
        fences.fence("car", "departing").expect("fence");
        assert_eq!(
            fences.read().refusal(["bus", "car"].into_iter()),
            Some((
                "car".into(),
                Fence {
                    reason: "departing".into(),
                    location: None
                }
            ))
        );
        fences.unfence("car");
        assert!(!fences.is_fenced("car"));
    }
}
