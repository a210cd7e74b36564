//! The read path's lower-tier half: a device's windows and settled readings, newest place
//! first, trims applied.

use std::collections::BTreeMap;

use crate::error::Result;
use crate::ids::LowerId;
use crate::lower::keys::{self, Place, WindowTrim, trimmed};
use crate::lower::{malformed, space_of};
use crate::reading::Reading;
use crate::state::Inner;

/// A device's readings in the lower tier, as a read needs them.
pub(super) struct LowerView {
    pub(super) lower_id: LowerId,
    /// Newest first: the order in which places win.
    pub(super) places: Vec<Place>,
    pub(super) trims: Vec<WindowTrim>,
    /// Settled readings older than this are deleted (a pending trim).
    pub(super) settled_hidden_before: Option<i64>,
}

impl LowerView {
    pub(super) fn hides(&self, place: Place, ts_ns: i64) -> bool {
        match place {
            Place::Window(win) => trimmed(&self.trims, win, ts_ns),
            Place::Settled => self.settled_hidden_before.is_some_and(|b| ts_ns < b),
        }
    }
}

/// The reading at (sensor, ts) in the newest place holding it.
pub(super) fn get_lower(
    inner: &Inner,
    device: &str,
    lower: &LowerView,
    sensor: &str,
    ts_ns: i64,
) -> Result<Option<Reading>> {
    for &place in &lower.places {
        let space = space_of(place);
        if let Some(value) = inner
            .lower
            .get(space, &place.key(lower.lower_id, sensor, ts_ns))?
        {
            if lower.hides(place, ts_ns) {
                return Ok(None); // deleted: older places hold only older writes of it
            }
            return Ok(Some(Reading {
                device: device.into(),
                sensor: sensor.into(),
                ts_ns,
                value,
            }));
        }
    }
    Ok(None)
}

/// Up to `limit` readings of the device's lower-tier places in the window, after the cursor,
/// merged (newest place wins), trims applied, in (sensor, ts) order.
#[allow(clippy::too_many_arguments)] // the scan's window, cursor and bound, as the caller gave them
pub(super) fn page_lower(
    inner: &Inner,
    device: &str,
    lower: &LowerView,
    sensor: Option<&str>,
    from_ns: i64,
    to_ns: i64,
    after: Option<(&str, i64)>,
    limit: usize,
) -> Result<Vec<Reading>> {
    // (sensor, ts) -> (the winning place's rank, value). A reading a trim hides in one place
    // is hidden (or absent) in every older place too: trims cover every window older than
    // their own, and consolidation drops what they hide. So hidden readings are just skipped.
    let mut merged: BTreeMap<(String, i64), (usize, Vec<u8>)> = BTreeMap::new();
    for (rank, &place) in lower.places.iter().enumerate() {
        let (mut start, end) = place.range(lower.lower_id, sensor.map(|s| (s, from_ns, to_ns)));
        if let Some((after_sensor, after_ts)) = after {
            // The smallest key above the cursor's key: the cursor's key with a 0 byte appended.
            let mut resume = place.key(lower.lower_id, after_sensor, after_ts);
            resume.push(0);
            start = start.max(resume);
        }
        if start >= end {
            continue;
        }
        let mut taken = 0;
        let mut bad_key = None;
        inner
            .lower
            .scan(space_of(place), &start, &end, &mut |k, v| {
                match place.parse(k) {
                    Some((_, s, ts_ns))
                        if (from_ns..to_ns).contains(&ts_ns) && !lower.hides(place, ts_ns) =>
                    {
                        taken += 1;
                        merged
                            .entry((s.to_string(), ts_ns))
                            .and_modify(|held| {
                                if rank < held.0 {
                                    *held = (rank, v.to_vec());
                                }
                            })
                            .or_insert_with(|| (rank, v.to_vec()));
                    }
                    Some(_) => {}
                    None => bad_key = Some(k.to_vec()),
                }
                bad_key.is_none() && taken < limit
            })?;
        if let Some(k) = bad_key {
            return Err(malformed(&k));
        }
    }
    Ok(merged
        .into_iter()
        .map(|((sensor, ts_ns), (_, value))| Reading {
            device: device.into(),
            sensor,
            ts_ns,
            value,
        })
        .take(limit)
        .collect())
}

/// The newest reading of each sensor (of one sensor, if given) over the device's lower-tier
/// places: per place, one reverse seek per sensor from the last sensor back.
pub(super) fn latest_lower(
    inner: &Inner,
    device: &str,
    lower: &LowerView,
    sensor: Option<&str>,
) -> Result<Vec<Reading>> {
    let mut newest: BTreeMap<String, (i64, usize, Vec<u8>)> = BTreeMap::new();
    for (rank, &place) in lower.places.iter().enumerate() {
        let (start, mut end) = place.range(lower.lower_id, None);
        if let Some(sensor) = sensor {
            end = keys::after_sensor(place, lower.lower_id, sensor);
        }
        let start = match sensor {
            Some(sensor) => place.key(lower.lower_id, sensor, i64::MIN),
            None => start,
        };
        while let Some((k, v)) = inner.lower.last_in(space_of(place), &start, &end)? {
            let (_, found, ts_ns) = place.parse(&k).ok_or_else(|| malformed(&k))?;
            let found = found.to_string();
            // A hidden newest reading may hide an older visible one: walk back within it.
            let mut hidden_end = None;
            if lower.hides(place, ts_ns) {
                hidden_end = Some(place.key(lower.lower_id, &found, ts_ns));
            } else {
                let better = newest
                    .get(&found)
                    .is_none_or(|(t, r, _)| *t < ts_ns || (*t == ts_ns && rank < *r));
                if better {
                    newest.insert(found.clone(), (ts_ns, rank, v));
                }
            }
            end = match hidden_end {
                Some(key) => key,
                None if sensor.is_some() => break,
                None => place.key(lower.lower_id, &found, i64::MIN),
            };
        }
    }
    Ok(newest
        .into_iter()
        .map(|(sensor, (ts_ns, _, value))| Reading {
            device: device.into(),
            sensor,
            ts_ns,
            value,
        })
        .collect())
}
