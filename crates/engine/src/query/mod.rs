//! The read path: `get` and `scan`, and the queries servers and tools ask beyond them (which
//! devices are here, each sensor's newest reading, paged scans that resume after a cursor).
//!
//! A device's readings may be in three kinds of place at once: the log (indexed in memory), its
//! windows (one run each, in the lower tier), and the settled space. A read finds the device in
//! the mapping table under the state lock and copies what it needs (index entries with their
//! segments, the list of windows, trims); then, without the lock, reads log records with pread
//! (checked: checksum, and that each is the record the index meant) and the lower tier's
//! ranges. Where a (sensor, ts) is in several places the newest write wins: log over windows,
//! a later window over an earlier one, windows over the settled space. Readings a trim hides
//! are skipped. Nothing here writes.
//!
//! It may not write, nor wait on the commit path beyond read-your-writes (`commit::index_apply`).

mod log;
mod lower;

use std::collections::BTreeMap;
use std::sync::Arc;

use self::log::{ReadError, read_log};
use self::lower::{LowerView, get_lower, latest_lower, page_lower};
use crate::commit::index_apply;
use crate::commit_log::position::LogPosition;
use crate::commit_log::segment::Segment;
use crate::lower::keys::Place;
use crate::lower::oldest_per_sensor;
use crate::model::error::{Error, Result};
use crate::model::limits::{READ_ATTEMPTS_MAX, SCAN_PAGE_READINGS_MAX};
use crate::model::reading::{Reading, validate_device, validate_sensor};
use crate::state::mapping::DeviceEntry;
use crate::state::upper::{DeviceIndex, IndexEntry};
use crate::state::{Inner, State};

/// Where a device is in its life at this edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTier {
    /// Inside its management time, every reading in the log (paper 002's per-device log store).
    Upper,
    /// Past its management time, or with readings already in the lower tier: it stayed.
    Lower,
}

impl DeviceTier {
    pub fn name(self) -> &'static str {
        match self {
            DeviceTier::Upper => "upper",
            DeviceTier::Lower => "lower",
        }
    }
}

/// One device present at this edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub tier: DeviceTier,
    /// Engine clock time of its first write in this incarnation (since its last departure).
    pub registered_at_ms: u64,
    /// Readings it holds in the log (exact).
    pub log_readings: u64,
    /// Runs of the lower tier holding its readings: its windows, plus one if it has settled
    /// readings (a read touches each).
    pub lower_runs: usize,
}

/// Where a paged scan resumes: strictly after this (sensor, timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCursor {
    pub sensor: String,
    pub ts_ns: i64,
}

/// One page of a scan: at most `limit` readings, and the cursor of the next page if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    pub readings: Vec<Reading>,
    pub next: Option<ScanCursor>,
}

fn validate_optional_sensor(sensor: Option<&str>) -> Result<()> {
    sensor.map_or(Ok(()), validate_sensor)
}

/// A device's place in the mapping table, looked up under the state lock.
enum Located {
    Absent,
    Present {
        /// The index entries chosen, each with the segment that holds it.
        log: Vec<(String, IndexEntry, Arc<Segment>)>,
        lower: Option<LowerView>,
    },
}

/// Looks the device up, once the index holds every write to it acknowledged so far
/// (index_apply.rs); `choose` picks the index entries to read.
fn locate(
    inner: &Inner,
    device: &str,
    choose: impl FnOnce(&DeviceIndex) -> Vec<(&str, IndexEntry)>,
) -> Result<Located> {
    let mut st = inner.state.lock();
    index_apply::wait_for_device(inner, &mut st, device)?;
    let Some((_, entry)) = st.map.lookup(device) else {
        return Ok(Located::Absent);
    };
    let log = choose(&entry.index)
        .into_iter()
        .map(|(sensor, e)| {
            let segment = st.log.segment_of(e.segment_seq);
            (sensor.to_owned(), e, Arc::clone(segment))
        })
        .collect();
    let lower = entry.lower.as_ref().map(|place| {
        let mut places: Vec<Place> = place
            .windows
            .iter()
            .rev()
            .map(|(w, _)| Place::Window(*w))
            .collect();
        if place.settled {
            places.push(Place::Settled);
        }
        LowerView {
            lower_id: place.lower_id,
            places,
            trims: entry.trims.clone(),
            settled_hidden_before: entry.settled_trim_pending,
        }
    });
    Ok(Located::Present { log, lower })
}

/// `Engine::get` (`point`: the one reading at `from_ns`) and `Engine::scan`.
pub(crate) fn read(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
    from_ns: i64,
    to_ns: i64,
    point: bool,
) -> Result<Vec<Reading>> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    retry_moved(inner, |inner| {
        let located = locate(inner, device, |index| match (point, sensor) {
            (true, Some(sensor)) => index.get(sensor, from_ns).into_iter().collect(),
            _ => index.range(sensor, from_ns, to_ns),
        })?;
        let Located::Present { log, lower } = located else {
            return Ok(Vec::new());
        };
        let from_log = read_log(device, log)?;
        let Some(lower) = lower else {
            return Ok(from_log);
        };
        let from_lower = match (point, sensor) {
            (true, Some(sensor)) => get_lower(inner, device, &lower, sensor, from_ns)?
                .into_iter()
                .collect(),
            _ => page_lower(
                inner,
                device,
                &lower,
                sensor,
                from_ns,
                to_ns,
                None,
                usize::MAX,
            )?,
        };
        Ok(merge(from_log, from_lower, usize::MAX))
    })
}

/// `Engine::devices`.
pub(crate) fn devices(inner: &Inner) -> Vec<DeviceInfo> {
    let mut st = inner.state.lock();
    // Every acknowledged write is counted (a poisoned or closing engine lists what it has).
    let _ = index_apply::wait_for_committed(inner, &mut st);
    let mut devices = mapped_devices(inner, &st);
    drop(st);
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

/// Every device mapped, unsorted: a pass over the mapping table, under the state lock (the
/// callers sort after they let it go).
fn mapped_devices(inner: &Inner, st: &State) -> Vec<DeviceInfo> {
    let now_ms = inner.options.clock.now_ms();
    st.map
        .entries()
        .filter(|(id, entry)| st.map.id(&entry.name) == Some(*id))
        .map(|(_, entry)| device_info(inner, entry, now_ms))
        .collect()
}

/// `Engine::device`: one device's entry, looked up by name (no pass over the table).
pub(crate) fn device(inner: &Inner, name: &str) -> Option<DeviceInfo> {
    let now_ms = inner.options.clock.now_ms();
    let mut st = inner.state.lock();
    let _ = index_apply::wait_for_committed(inner, &mut st);
    let id = st.map.id(name)?;
    st.map
        .entry(id)
        .map(|entry| device_info(inner, entry, now_ms))
}

/// What is shown of a device's entry at `now_ms`.
fn device_info(inner: &Inner, entry: &DeviceEntry, now_ms: u64) -> DeviceInfo {
    let lower_runs = entry
        .lower
        .as_ref()
        .map_or(0, |p| p.windows.len() + usize::from(p.settled));
    let young = now_ms
        < entry
            .registered_at_ms
            .saturating_add(inner.options.management_time_ms);
    DeviceInfo {
        name: entry.name.to_string(),
        tier: if young && lower_runs == 0 {
            DeviceTier::Upper
        } else {
            DeviceTier::Lower
        },
        registered_at_ms: entry.registered_at_ms,
        log_readings: entry.index.records,
        lower_runs,
    }
}

/// `Engine::latest`.
pub(crate) fn latest(inner: &Inner, device: &str, sensor: Option<&str>) -> Result<Vec<Reading>> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    retry_moved(inner, |inner| {
        let Located::Present { log, lower } = locate(inner, device, |index| index.latest(sensor))?
        else {
            return Ok(Vec::new());
        };
        let mut newest: BTreeMap<String, Reading> = BTreeMap::new();
        if let Some(lower) = &lower {
            for reading in latest_lower(inner, device, lower, sensor)? {
                let keep = newest
                    .get(&reading.sensor)
                    .is_none_or(|r| r.ts_ns < reading.ts_ns);
                if keep {
                    newest.insert(reading.sensor.clone(), reading);
                }
            }
        }
        for reading in read_log(device, log)? {
            // The log's newest wins over the lower tier's at the same or an older time.
            let keep = newest
                .get(&reading.sensor)
                .is_none_or(|r| r.ts_ns <= reading.ts_ns);
            if keep {
                newest.insert(reading.sensor.clone(), reading);
            }
        }
        Ok(newest.into_values().collect())
    })
}

/// A view for a long read that pages through many devices (an export): the devices mapped and
/// the log's applied end when it was taken. A page read in it leaves out log entries written at
/// or after that end; the lower tier holds only readings of segments that left the log, all
/// written before it while `ReadView::exact` holds (docs/ENGINE.md, "Read views").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadView {
    pub(crate) end: LogPosition,
    devices: Vec<DeviceInfo>,
}

impl ReadView {
    /// Every device mapped when the view was taken, sorted by name.
    pub fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    /// Where the view ends in the log: `SEGMENT:OFFSET`.
    pub fn position(&self) -> String {
        format!("{}:{}", self.end.segment_seq.0, self.end.offset)
    }
}

/// `Engine::read_view`: the index caught up, its applied end and the device list, both under
/// one hold of the state lock (a device in the list has every write before the end indexed).
pub(crate) fn read_view(inner: &Inner) -> Result<ReadView> {
    let mut st = inner.state.lock();
    index_apply::wait_for_committed(inner, &mut st)?;
    let end = st.log.applied_end;
    let mut devices = mapped_devices(inner, &st);
    drop(st);
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(ReadView { end, devices })
}

/// `ReadView::exact`: no segment at or after the view's end has left the log, so the lower tier
/// holds nothing written after it.
pub(crate) fn view_is_exact(inner: &Inner, view: &ReadView) -> bool {
    inner.state.lock().lower.last_aged_seq < view.end.segment_seq
}

/// `Engine::scan_page` (`view`: `Engine::scan_page_in`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_page(
    inner: &Inner,
    view: Option<&ReadView>,
    device: &str,
    sensor: Option<&str>,
    from_ns: i64,
    to_ns: i64,
    after: Option<&ScanCursor>,
    limit: usize,
) -> Result<ScanPage> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    if limit == 0 || limit > SCAN_PAGE_READINGS_MAX {
        return Err(Error::InvalidArgument(format!(
            "scan page limit {limit} is outside 1..={SCAN_PAGE_READINGS_MAX}"
        )));
    }
    let after = after.map(|c| (c.sensor.as_str(), c.ts_ns));
    // One more than asked tells whether another page follows.
    let mut readings = retry_moved(inner, |inner| {
        let located = locate(inner, device, |index| {
            index.page(
                sensor,
                from_ns,
                to_ns,
                after,
                view.map(|v| v.end),
                limit + 1,
            )
        })?;
        let Located::Present { log, lower } = located else {
            return Ok(Vec::new());
        };
        let from_log = read_log(device, log)?;
        let Some(lower) = lower else {
            return Ok(from_log);
        };
        let from_lower = page_lower(
            inner,
            device,
            &lower,
            sensor,
            from_ns,
            to_ns,
            after,
            limit + 1,
        )?;
        Ok(merge(from_log, from_lower, limit + 1))
    })?;
    let next = if readings.len() > limit {
        readings.truncate(limit);
        readings.last().map(|r| ScanCursor {
            sensor: r.sensor.clone(),
            ts_ns: r.ts_ns,
        })
    } else {
        None
    };
    Ok(ScanPage { readings, next })
}

/// Merges readings from the log (which win) with readings from the lower tier, both in
/// (sensor, ts) order, keeping the first `limit`.
fn merge(log: Vec<Reading>, lower: Vec<Reading>, limit: usize) -> Vec<Reading> {
    if lower.is_empty() {
        let mut log = log;
        log.truncate(limit);
        return log;
    }
    let mut out = Vec::with_capacity(log.len() + lower.len());
    let mut log = log.into_iter().peekable();
    let mut lower = lower.into_iter().peekable();
    while out.len() < limit {
        let take_log = match (log.peek(), lower.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => {
                let (ka, kb) = ((&a.sensor, a.ts_ns), (&b.sensor, b.ts_ns));
                if ka == kb {
                    lower.next(); // the same reading: the log's is newer
                    true
                } else {
                    ka < kb
                }
            }
        };
        let next = if take_log { log.next() } else { lower.next() };
        out.extend(next);
    }
    out
}

/// Runs a read, again while it finds that its readings moved out of the log under it. Each
/// attempt holds the window gate from before it looks the device up until it has read: the
/// windows it finds in the bookkeeping cannot be dropped under it (a consolidation may move
/// the device's readings out of a window and drop that window at any time).
fn retry_moved<T>(
    inner: &Inner,
    mut read: impl FnMut(&Inner) -> Result<T, ReadError>,
) -> Result<T> {
    let mut last_error = None;
    for _ in 0..READ_ATTEMPTS_MAX {
        let _windows_stay = inner.window_gate.read();
        match read(inner) {
            Ok(value) => return Ok(value),
            Err(ReadError::Moved(e)) => last_error = Some(e),
            Err(ReadError::Fatal(e)) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::Lower("read retries exhausted".into())))
}

/// Whether any reading of the device in the lower tier is older than `before_ns` and visible.
pub(crate) fn lower_has_before(inner: &Inner, device: &str, before_ns: i64) -> Result<bool> {
    let _windows_stay = inner.window_gate.read();
    let Located::Present {
        lower: Some(lower), ..
    } = locate(inner, device, |_| Vec::new())?
    else {
        return Ok(false);
    };
    for &place in &lower.places {
        for (_, oldest_ns) in oldest_per_sensor(inner.lower.as_ref(), place, lower.lower_id)? {
            if oldest_ns < before_ns && !lower.hides(place, oldest_ns) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
