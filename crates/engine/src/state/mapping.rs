//! The Object Mapping Table (paper 002, Fig. 6): device -> {first-seen time, readings in the log
//! (an in-memory index), readings in the lower tier (which windows, settled or not)}. Every put,
//! get, scan and depart goes through it.
//!
//! Devices are named by the caller but held by an in-memory id, one per *incarnation*: a
//! device that departs and comes back is a new incarnation, so that log records queued for the
//! old one can never be applied to the new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lower::keys::WindowTrim;
use crate::model::ids::{DeviceId, LowerId, SegmentSeq, WindowId};
use crate::state::upper::DeviceIndex;

/// A device's readings in the lower tier, and what hides some of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LowerPlace {
    /// The device's prefix in the lower tier's keys (lower/keys.rs); never reused.
    pub lower_id: LowerId,
    /// Windows holding its readings, ascending, each with the bytes of its readings there.
    pub windows: Vec<(WindowId, u64)>,
    /// It has readings in the settled space (consolidated out of windows).
    pub settled: bool,
}

#[derive(Debug)]
pub struct DeviceEntry {
    pub name: Box<str>,
    /// Engine clock time of its first write in this incarnation.
    pub registered_at_ms: u64,
    /// Its readings in the log.
    pub index: DeviceIndex,
    /// The newest segment whose holder list names this device (log_state.rs).
    pub holder_of_seq: SegmentSeq,
    /// Its place in the lower tier: given by the pass that takes the segment of its REGISTER
    /// record (from then on the catalog knows it), None before.
    pub lower: Option<LowerPlace>,
    /// Trims that hide readings of its windows (lower/keys.rs): readings a pass was moving
    /// when a TRIM came are hidden too, so trims are kept whether it has a lower place or not.
    pub trims: Vec<WindowTrim>,
    /// A TRIM whose segment has not left the log yet: settled readings older than this are
    /// deleted but still on disk (reads skip them; the pass that takes the TRIM's segment
    /// deletes them).
    pub settled_trim_pending: Option<i64>,
    /// The ticket of its newest queued record (a PUT or a TRIM): a read of the device waits
    /// until the index has applied it, once it is acknowledged (index_apply.rs).
    pub last_ticket: u64,
}

#[derive(Debug, Default)]
pub struct MappingTable {
    names: HashMap<Box<str>, DeviceId>,
    devices: HashMap<DeviceId, DeviceEntry>,
    next_id: DeviceId,
    /// Devices with a place in the lower tier (kept as they change: stats never scan).
    placed: u64,
    /// Walks over the whole table (`entries`): device listings and checks, never maintenance
    /// (crates/engine/tests/pass_cost.rs holds it to that).
    scans: AtomicU64,
}

impl MappingTable {
    pub fn id(&self, name: &str) -> Option<DeviceId> {
        self.names.get(name).copied()
    }

    pub fn lookup(&self, name: &str) -> Option<(DeviceId, &DeviceEntry)> {
        let id = self.id(name)?;
        Some((id, self.devices.get(&id)?))
    }

    pub fn entry(&self, id: DeviceId) -> Option<&DeviceEntry> {
        self.devices.get(&id)
    }

    pub fn entry_mut(&mut self, id: DeviceId) -> Option<&mut DeviceEntry> {
        self.devices.get_mut(&id)
    }

    /// A new incarnation of `name`, which must not be mapped now.
    pub fn register(&mut self, name: &str, registered_at_ms: u64) -> DeviceId {
        debug_assert!(!self.names.contains_key(name));
        self.next_id += 1;
        let id = self.next_id;
        self.names.insert(name.into(), id);
        self.devices.insert(
            id,
            DeviceEntry {
                name: name.into(),
                registered_at_ms,
                index: DeviceIndex::default(),
                holder_of_seq: SegmentSeq(0),
                lower: None,
                trims: Vec::new(),
                settled_trim_pending: None,
                last_ticket: 0,
            },
        );
        id
    }

    /// The devices (`ids`, in a batch's order) have records queued under `ticket`: reads of them
    /// wait for it once it is acknowledged (index_apply.rs).
    pub fn note_last_ticket(&mut self, ids: &[DeviceId], ticket: u64) {
        let mut last = None;
        for id in ids {
            if last != Some(*id) {
                last = Some(*id);
                if let Some(entry) = self.devices.get_mut(id) {
                    entry.last_ticket = ticket;
                }
            }
        }
    }

    /// Unmaps the name (new puts start a new incarnation); the entry stays until `remove`.
    pub fn unmap(&mut self, name: &str) -> Option<DeviceId> {
        self.names.remove(name)
    }

    pub fn remove(&mut self, id: DeviceId) -> Option<DeviceEntry> {
        let entry = self.devices.remove(&id)?;
        if self.names.get(&entry.name) == Some(&id) {
            self.names.remove(&entry.name);
        }
        if entry.lower.is_some() {
            self.placed -= 1;
        }
        Some(entry)
    }

    /// Gives a device its place in the lower tier.
    pub fn place(&mut self, id: DeviceId, place: LowerPlace) {
        if let Some(entry) = self.devices.get_mut(&id) {
            if entry.lower.is_none() {
                self.placed += 1;
            }
            entry.lower = Some(place);
        }
    }

    /// Devices with a place in the lower tier.
    pub fn placed(&self) -> u64 {
        self.placed
    }

    /// Devices in the table (every incarnation not yet removed).
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn entries(&self) -> impl Iterator<Item = (DeviceId, &DeviceEntry)> {
        self.scans.fetch_add(1, Ordering::Relaxed);
        self.devices.iter().map(|(id, e)| (*id, e))
    }

    /// How many times the whole table was walked.
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }
}
