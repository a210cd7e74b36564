//! The read path's lower-tier half: a device's windows and settled readings, newest place
//! first, trims applied.

use std::collections::BTreeMap;

use crate::lower::keys::{self, Place, WindowTrim, key_after, trimmed};
use crate::lower::{malformed, space_of};
use crate::model::error::Result;
use crate::model::ids::LowerId;
use crate::model::reading::Reading;
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
/// merged (newest place wins a key), trims applied, in (sensor, ts) order.
///
/// Each place is read in chunks of about `limit / places` and refilled only when the merge has
/// taken its chunk: a page reads about `limit` + one chunk per place, not `limit` from every
/// place (a device in many windows would otherwise read each of them whole, page after page).
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
    let chunk = (limit / lower.places.len().max(1)).clamp(PLACE_CHUNK_MIN.min(limit), limit);
    let mut runs: Vec<PlaceRun> = lower
        .places
        .iter()
        .map(|&place| {
            let (mut start, end) = place.range(lower.lower_id, sensor.map(|s| (s, from_ns, to_ns)));
            if let Some((after_sensor, after_ts)) = after {
                start = start.max(key_after(&place.key(
                    lower.lower_id,
                    after_sensor,
                    after_ts,
                )));
            }
            PlaceRun {
                place,
                done: start >= end,
                next: start,
                end,
                buf: std::collections::VecDeque::new(),
            }
        })
        .collect();
    let mut out = Vec::new();
    while out.len() < limit {
        for run in runs.iter_mut().filter(|r| r.buf.is_empty() && !r.done) {
            run.refill(inner, lower, (from_ns, to_ns), chunk)?;
        }
        // The smallest key among the heads: the first (newest) place holding it wins; the
        // same key in older places is dropped.
        let mut best: Option<usize> = None;
        for (i, run) in runs.iter().enumerate() {
            let Some((s, ts, _)) = run.buf.front() else {
                continue;
            };
            let smaller = best.is_none_or(|b| {
                let (held_s, held_ts, _) = runs[b].buf.front().expect("a head");
                (s.as_str(), *ts) < (held_s.as_str(), *held_ts)
            });
            if smaller {
                best = Some(i);
            }
        }
        let Some(b) = best else {
            break;
        };
        let (sensor, ts_ns, value) = runs[b].buf.pop_front().expect("a head");
        for run in &mut runs[b + 1..] {
            if run
                .buf
                .front()
                .is_some_and(|(s, ts, _)| *s == sensor && *ts == ts_ns)
            {
                run.buf.pop_front();
            }
        }
        out.push(Reading {
            device: device.into(),
            sensor,
            ts_ns,
            value,
        });
    }
    Ok(out)
}

/// The least a place is read at a time by a page (a seek costs more than a few keys).
const PLACE_CHUNK_MIN: usize = 64;

/// One place's part of a page: what it has read and not yet merged, and where it goes on.
struct PlaceRun {
    place: Place,
    /// The next key to read from, and the end of the range (exclusive).
    next: Vec<u8>,
    end: Vec<u8>,
    done: bool,
    buf: std::collections::VecDeque<(String, i64, Vec<u8>)>,
}

impl PlaceRun {
    /// Reads up to `chunk` more visible readings in the window; `done` once the range is read.
    fn refill(
        &mut self,
        inner: &Inner,
        lower: &LowerView,
        (from_ns, to_ns): (i64, i64),
        chunk: usize,
    ) -> Result<()> {
        let place = self.place;
        let (mut taken, mut last_key, mut bad_key) = (0, None, None);
        let buf = &mut self.buf;
        let mut stopped = false;
        inner
            .lower
            .scan(space_of(place), &self.next, &self.end, &mut |k, v| {
                match place.parse(k) {
                    Some((_, s, ts_ns))
                        if (from_ns..to_ns).contains(&ts_ns) && !lower.hides(place, ts_ns) =>
                    {
                        buf.push_back((s.to_string(), ts_ns, v.to_vec()));
                        taken += 1;
                    }
                    Some(_) => {}
                    None => bad_key = Some(k.to_vec()),
                }
                if bad_key.is_some() || taken >= chunk {
                    last_key = Some(k.to_vec());
                    stopped = true;
                    return false;
                }
                true
            })?;
        if let Some(k) = bad_key {
            return Err(malformed(&k));
        }
        match last_key {
            Some(k) if stopped => self.next = key_after(&k),
            _ => self.done = true,
        }
        Ok(())
    }
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
