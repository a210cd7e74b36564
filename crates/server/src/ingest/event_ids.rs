//! Events found and deleted by id, through the index of event ids (the entry's form and why it
//! is built so: `roamkv_wire::edgex::event_index`). A lookup is one scan of one index sensor (the
//! id) and one `get` per reading of the event; nothing else is read.

use std::collections::BTreeMap;

use roamkv_engine::Engine;

use roamkv_wire::KeyedReading;
use roamkv_wire::edgex::event_index::{self, DELETED_READING, INDEX_DEVICE, IndexEntry};
use roamkv_wire::edgex::{self, Decoded, Event};

use crate::http::error::ApiError;

/// An event as its index and its readings have it.
pub struct Found {
    /// The entry's key time (the event's origin) and the entry.
    entry_ts_ns: i64,
    entry: IndexEntry,
    /// The readings that still carry the event's id.
    readings: Vec<Decoded>,
}

impl Found {
    /// The event, rebuilt from its readings as every route rebuilds events.
    pub fn event(&self) -> Option<Event> {
        edgex::group_events(&self.readings).into_iter().next()
    }
}

/// The event with id `id`, if the index has it and any of its readings still carry it (a
/// departed device, a replaced reading or a deleted event have none). Blocking.
pub fn find_event(engine: &Engine, id: &str) -> Result<Option<Found>, ApiError> {
    let entries = engine
        .scan(INDEX_DEVICE, Some(id), i64::MIN, i64::MAX)
        .map_err(ApiError::from_engine)?;
    // Newest first: an id posted again at another origin is found where it was last put.
    for entry_reading in entries.into_iter().rev() {
        let entry = IndexEntry::decode(id, entry_reading.ts_ns, &entry_reading.value)
            .map_err(ApiError::from)?;
        let mut readings = Vec::with_capacity(entry.readings.len());
        for (resource, origin) in &entry.readings {
            let value = engine
                .get(&entry.device, resource, *origin)
                .map_err(ApiError::from_engine)?;
            let Some(value) = value.filter(|v| !event_index::is_deleted(v)) else {
                continue;
            };
            let decoded = edgex::decode(roamkv_engine::Reading {
                device: entry.device.clone(),
                sensor: resource.clone(),
                ts_ns: *origin,
                value,
            });
            if decoded.stored.event_id == id {
                readings.push(decoded);
            }
        }
        if !readings.is_empty() {
            return Ok(Some(Found {
                entry_ts_ns: entry_reading.ts_ns,
                entry,
                readings,
            }));
        }
    }
    Ok(None)
}

/// Index entries for readings that arrive by handoff, stored as events at the edge they
/// come from: grouped by event, and merged with the entry the index already has (an event's
/// readings may come in two chunks). The caller asks only when the index is on. Blocking (a `get` per
/// event).
pub fn index_entries_for(
    engine: &Engine,
    readings: &[KeyedReading],
) -> Result<Vec<KeyedReading>, ApiError> {
    let mut events: BTreeMap<(String, i64), IndexEntry> = BTreeMap::new();
    for r in readings
        .iter()
        .filter(|r| !event_index::is_deleted(&r.value))
    {
        let Some(stored) = edgex::stored_of(&r.value, r.ts_ns) else {
            continue; // a native reading: no event
        };
        events
            .entry((stored.event_id, stored.event_origin))
            .or_insert_with(|| IndexEntry {
                device: r.device.clone(),
                readings: Vec::new(),
            })
            .readings
            .push((r.sensor.clone(), r.ts_ns));
    }
    let mut entries = Vec::with_capacity(events.len());
    for ((id, origin), mut entry) in events {
        let known = engine
            .get(INDEX_DEVICE, &id, origin)
            .map_err(ApiError::from_engine)?;
        if let Some(known) = known.and_then(|v| IndexEntry::decode(&id, origin, &v).ok()) {
            for key in known.readings {
                if !entry.readings.contains(&key) {
                    entry.readings.push(key);
                }
            }
        }
        entries.push(KeyedReading {
            device: INDEX_DEVICE.to_string(),
            sensor: id,
            ts_ns: origin,
            value: entry.encode(origin).map_err(ApiError::from)?,
        });
    }
    Ok(entries)
}

/// The batch that deletes a found event: each of its readings overwritten with the deleted
/// marker, its index entry with one listing no readings (so the id is not found again).
pub fn deletion_of(id: &str, found: &Found) -> Result<Vec<KeyedReading>, ApiError> {
    let mut batch: Vec<KeyedReading> = found
        .readings
        .iter()
        .map(|r| KeyedReading {
            device: r.device.clone(),
            sensor: r.resource_name.clone(),
            ts_ns: r.stored.origin,
            value: DELETED_READING.to_vec(),
        })
        .collect();
    let emptied = IndexEntry {
        device: found.entry.device.clone(),
        readings: Vec::new(),
    };
    batch.push(KeyedReading {
        device: INDEX_DEVICE.to_string(),
        sensor: id.to_string(),
        ts_ns: found.entry_ts_ns,
        value: emptied.encode(found.entry_ts_ns).map_err(ApiError::from)?,
    });
    Ok(batch)
}
