//! The Object Mapping Table (paper 002, Fig. 6): device -> {tier, first-seen time, store}.
//! Every put, get, scan and depart goes through it.
//!
//! Devices are named by the caller but held by an in-memory id, one per *incarnation*: a
//! device that departs and comes back is a new incarnation, so that log records queued for the
//! old one can never be applied to the new one.

use std::collections::HashMap;

use crate::lower::LowerOp;
use crate::upper::{DeviceIndex, LogPosition};

pub type DeviceId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// New device, inside its management time: records in the log, indexed in memory.
    Upper,
    /// Being moved to the lower tier; still served from the upper index until the switch.
    Migrating,
    /// Settled: its readings live in the LSM tree.
    Lower,
}

#[derive(Debug)]
pub struct DeviceEntry {
    pub name: Box<str>,
    pub tier: Tier,
    pub registered_at_ms: u64,
    /// The upper-tier store (empty once settled).
    pub index: DeviceIndex,
    /// Departed while migrating: the migration finishes by deleting what it moved.
    pub departed: bool,
    /// Trimmed while migrating: the run being ingested still holds the trimmed readings, so
    /// the migration finishes with a lower-tier trim. (largest cutoff, oldest TRIM's segment)
    pub trimmed_while_migrating: Option<(i64, u64)>,
    /// The prefix of its keys in the lower tier, given when it settles (key.rs); 0 = none yet.
    pub lower_id: u64,
}

impl DeviceEntry {
    /// Applies one TRIM record to the device (live path and recovery alike; trim.rs): the
    /// upper index drops the older entries (a migrating device also notes the trim for the run
    /// being ingested); a settled device gets a lower-tier trim op.
    pub fn apply_trim(
        &mut self,
        index_bytes: &mut u64,
        lower_ops: &mut Vec<LowerOp>,
        before_ms: i64,
        position: LogPosition,
    ) {
        match self.tier {
            Tier::Upper | Tier::Migrating => {
                let before = self.index.index_bytes();
                self.index.trim_before(before_ms);
                *index_bytes -= before - self.index.index_bytes();
                if self.tier == Tier::Migrating {
                    let (cutoff, first_seq) = self
                        .trimmed_while_migrating
                        .unwrap_or((before_ms, position.segment_seq));
                    self.trimmed_while_migrating =
                        Some((cutoff.max(before_ms), first_seq.min(position.segment_seq)));
                }
            }
            Tier::Lower => lower_ops.push(LowerOp::TrimBefore {
                lower_id: self.lower_id,
                before_ms,
            }),
        }
    }
}

#[derive(Debug, Default)]
pub struct MappingTable {
    names: HashMap<Box<str>, DeviceId>,
    devices: HashMap<DeviceId, DeviceEntry>,
    next_id: DeviceId,
    /// Last lower id given out; ids only grow, so every migration run sorts after all earlier data.
    last_lower_id: u64,
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
    pub fn register(&mut self, name: &str, tier: Tier, registered_at_ms: u64) -> DeviceId {
        debug_assert!(!self.names.contains_key(name));
        self.next_id += 1;
        let id = self.next_id;
        self.names.insert(name.into(), id);
        self.devices.insert(
            id,
            DeviceEntry {
                name: name.into(),
                tier,
                registered_at_ms,
                index: DeviceIndex::default(),
                departed: false,
                trimmed_while_migrating: None,
                lower_id: 0,
            },
        );
        id
    }

    /// A lower id never given out before (in this process or, via `saw_lower_id`, on disk).
    pub fn allocate_lower_id(&mut self) -> u64 {
        self.last_lower_id += 1;
        self.last_lower_id
    }

    /// Records a lower id found on disk, so that new ones are larger.
    pub fn saw_lower_id(&mut self, lower_id: u64) {
        self.last_lower_id = self.last_lower_id.max(lower_id);
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
        Some(entry)
    }

    /// Devices in the table (every incarnation not yet removed).
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn entries(&self) -> impl Iterator<Item = (DeviceId, &DeviceEntry)> {
        self.devices.iter().map(|(id, e)| (*id, e))
    }
}
