//! The engine's ids, a leaf every room may use.

/// An incarnation of a device, in memory (never on disk): a device that departs and comes back
/// is a new incarnation (mapping.rs).
pub type DeviceId = u64;
