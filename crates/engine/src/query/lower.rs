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
    // A reading a trim hides in one place is hidden (or absent) in every older place too: trims
    // cover every window older than their own, and consolidation drops what they hide. So
    // hidden readings are just skipped. Each place gives its readings in key order; they are
    // merged below (newest place wins a key).
    let mut runs: Vec<Vec<(String, i64, Vec<u8>)>> = Vec::with_capacity(lower.places.len());
    for &place in &lower.places {
        let (mut start, end) = place.range(lower.lower_id, sensor.map(|s| (s, from_ns, to_ns)));
        if let Some((after_sensor, after_ts)) = after {
            // The smallest key above the cursor's key: the cursor's key with a 0 byte appended.
            let mut resume = place.key(lower.lower_id, after_sensor, after_ts);
            resume.push(0);
            start = start.max(resume);
        }
        let mut run = Vec::new();
        if start < end {
            let mut bad_key = None;
            inner
                .lower
                .scan(space_of(place), &start, &end, &mut |k, v| {
                    match place.parse(k) {
                        Some((_, s, ts_ns))
                            if (from_ns..to_ns).contains(&ts_ns) && !lower.hides(place, ts_ns) =>
                        {
                            run.push((s.to_string(), ts_ns, v.to_vec()));
                        }
                        Some(_) => {}
                        None => bad_key = Some(k.to_vec()),
                    }
                    bad_key.is_none() && run.len() < limit
                })?;
            if let Some(k) = bad_key {
                return Err(malformed(&k));
            }
        }
        runs.push(run);
    }
    Ok(merge_runs(runs, limit)
        .into_iter()
        .map(|(sensor, ts_ns, value)| Reading {
            device: device.into(),
            sensor,
            ts_ns,
            value,
        })
        .collect())
}

/// The first `limit` keys of runs each in (sensor, ts) order, ranked newest first: where runs
/// share a key, the newest run's reading wins. One run (a device in one place) is taken as it is.
fn merge_runs(
    mut runs: Vec<Vec<(String, i64, Vec<u8>)>>,
    limit: usize,
) -> Vec<(String, i64, Vec<u8>)> {
    runs.retain(|run| !run.is_empty());
    if runs.len() <= 1 {
        let mut only = runs.pop().unwrap_or_default();
        only.truncate(limit);
        return only;
    }
    let mut at = vec![0usize; runs.len()];
    let mut out = Vec::new();
    while out.len() < limit {
        // The smallest key among the runs' heads: the first (newest) run holding it wins.
        let mut best: Option<usize> = None;
        for (i, run) in runs.iter().enumerate() {
            let Some((sensor, ts, _)) = run.get(at[i]) else {
                continue;
            };
            let smaller = best.is_none_or(|b| {
                let (held_sensor, held_ts, _) = &runs[b][at[b]];
                (sensor.as_str(), *ts) < (held_sensor.as_str(), *held_ts)
            });
            if smaller {
                best = Some(i);
            }
        }
        let Some(b) = best else {
            break;
        };
        let winner = std::mem::take(&mut runs[b][at[b]]);
        at[b] += 1;
        for i in b + 1..runs.len() {
            if runs[i]
                .get(at[i])
                .is_some_and(|(s, ts, _)| *s == winner.0 && *ts == winner.1)
            {
                at[i] += 1;
            }
        }
        out.push(winner);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::merge_runs;

    fn run(keys: &[(&str, i64, u8)]) -> Vec<(String, i64, Vec<u8>)> {
        keys.iter()
            .map(|&(s, t, v)| (s.to_string(), t, vec![v]))
            .collect()
    }

    #[test]
    fn runs_merge_in_key_order_and_the_newest_run_wins_a_key() {
        // Run 0 is the newest place, run 2 the oldest.
        let runs = vec![
            run(&[("a", 2, 0), ("b", 1, 0)]),
            run(&[]),
            run(&[("a", 1, 2), ("a", 2, 2), ("c", 0, 2)]),
        ];
        let merged = merge_runs(runs.clone(), usize::MAX);
        assert_eq!(
            merged,
            run(&[("a", 1, 2), ("a", 2, 0), ("b", 1, 0), ("c", 0, 2)])
        );
        assert_eq!(merge_runs(runs, 2), run(&[("a", 1, 2), ("a", 2, 0)]));
        assert_eq!(
            merge_runs(vec![run(&[("x", 1, 1)])], 5),
            run(&[("x", 1, 1)])
        );
    }
}
