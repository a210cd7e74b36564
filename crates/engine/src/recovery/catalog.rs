//! Recovery's first step: the lower tier's catalog (which devices have readings where, which
//! log segments have left the log) into the mapping table and the lower tier's bookkeeping,
//! and what a crash left half done there dropped.

use std::collections::HashMap;

use crate::commit_log::position::LogPosition;
use crate::lower::keys::{self, CatalogMeta, DeviceRecord};
use crate::lower::{LowerTier, Space};
use crate::model::error::{Error, Result};
use crate::model::ids::{LowerId, WindowId};
use crate::state::mapping::{LowerPlace, MappingTable};
use crate::state::{LowerBook, State, Window};

/// What the catalog holds, loaded at open.
#[derive(Default)]
pub(super) struct Catalog {
    pub(super) meta: CatalogMeta,
    /// lower id -> record.
    pub(super) devices: HashMap<LowerId, DeviceRecord>,
    /// lower id -> (window, bytes), ascending by window.
    pub(super) memberships: HashMap<LowerId, Vec<(WindowId, u64)>>,
}

pub(super) fn load_catalog(lower: &dyn LowerTier) -> Result<Catalog> {
    let mut catalog = Catalog::default();
    if let Some(value) = lower.get(Space::Catalog, &keys::meta_key())? {
        catalog.meta = CatalogMeta::decode(&value).ok_or_else(|| {
            Error::Lower(format!("the catalog's meta record is malformed: {value:?}"))
        })?;
    }
    let (start, end) = keys::all_devices_range();
    let mut bad = None;
    lower.scan(Space::Catalog, &start, &end, &mut |k, v| {
        match keys::parse_catalog_device_key(k) {
            Some((lower_id, None)) => match DeviceRecord::decode(v) {
                Some(record) => {
                    catalog.devices.insert(lower_id, record);
                }
                None => bad = Some(k.to_vec()),
            },
            Some((lower_id, Some(win))) => match <[u8; 8]>::try_from(v) {
                Ok(bytes) => catalog
                    .memberships
                    .entry(lower_id)
                    .or_default()
                    .push((win, u64::from_le_bytes(bytes))),
                Err(_) => bad = Some(k.to_vec()),
            },
            None => bad = Some(k.to_vec()),
        }
        bad.is_none()
    })?;
    if let Some(k) = bad {
        return Err(Error::Lower(format!(
            "malformed catalog entry {k:?} in the lower tier"
        )));
    }
    Ok(catalog)
}

/// The mapping table and the lower tier's bookkeeping as the catalog describes them. A name
/// with two records (a device that left while a pass gave it its place, then came back) keeps
/// the newer incarnation; the older is forgotten.
pub(super) fn place_cataloged_devices(
    lower: &dyn LowerTier,
    catalog: Catalog,
) -> Result<(MappingTable, LowerBook)> {
    let mut map = MappingTable::default();
    let mut book = LowerBook {
        next_win: catalog.meta.next_win,
        next_lower_id: catalog.meta.next_lower_id,
        last_aged_seq: catalog.meta.last_aged_seq,
        ..LowerBook::default()
    };
    let mut by_name: HashMap<&str, LowerId> = HashMap::new();
    for (lower_id, record) in &catalog.devices {
        match by_name.get(record.name.as_str()) {
            Some(other) if *other > *lower_id => {
                book.forget.push((*lower_id, LogPosition::ORIGIN));
                continue;
            }
            Some(other) => book.forget.push((*other, LogPosition::ORIGIN)),
            None => {}
        }
        by_name.insert(&record.name, *lower_id);
    }
    let files: HashMap<WindowId, u64> = lower
        .window_files()?
        .into_iter()
        .map(|f| (f.win, f.bytes))
        .collect();
    for (name, lower_id) in by_name {
        let record = &catalog.devices[&lower_id];
        let mut windows = catalog
            .memberships
            .get(&lower_id)
            .cloned()
            .unwrap_or_default();
        windows.sort_unstable();
        let id = map.register(name, record.registered_at_ms);
        for (win, bytes) in &windows {
            let window = book.windows.entry(*win).or_insert_with(|| Window {
                file_bytes: files.get(win).copied().unwrap_or(0),
                ..Window::default()
            });
            window.live_bytes += bytes;
            window.members.push(id);
        }
        if let Some(entry) = map.entry_mut(id) {
            entry.trims = record.trims.clone();
        }
        map.place(
            id,
            LowerPlace {
                lower_id,
                windows,
                settled: record.settled,
            },
        );
    }
    // Window files nobody reads (their devices left and were forgotten): dead.
    for (win, bytes) in &files {
        if !book.windows.contains_key(win) && *win < book.next_win {
            book.windows.insert(
                *win,
                Window {
                    file_bytes: *bytes,
                    ..Window::default()
                },
            );
            book.dead.push((*win, LogPosition::ORIGIN));
        }
    }
    Ok((map, book))
}

/// Drops windows at or above the catalog's next id: ingested by a pass that crashed before its
/// catalog batch named them.
pub(super) fn drop_orphan_windows(lower: &dyn LowerTier, meta: &CatalogMeta) -> Result<()> {
    let orphans: Vec<WindowId> = lower
        .window_files()?
        .into_iter()
        .map(|f| f.win)
        .filter(|win| *win >= meta.next_win)
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    lower.drop_windows(&orphans)
}

/// Every window a present device reads must exist: a missing one is damage to the lower tier.
pub(super) fn check_windows(lower: &dyn LowerTier, st: &State) -> Result<()> {
    let files: std::collections::HashSet<WindowId> =
        lower.window_files()?.into_iter().map(|f| f.win).collect();
    for (_, entry) in st.map.entries() {
        let Some(place) = &entry.lower else { continue };
        if let Some((win, _)) = place.windows.iter().find(|(w, _)| !files.contains(w)) {
            return Err(Error::Lower(format!(
                "the catalog says device {:?} has readings in window {win}, and the lower tier \
                 has no such window",
                entry.name
            )));
        }
    }
    Ok(())
}
