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

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lower::Space;
use crate::lower::keys::{self, Place, WindowTrim, trimmed};
use crate::reading::{Reading, validate_device, validate_sensor};
use crate::record::{self, Body, Decode};
use crate::segment::Segment;
use crate::state::Inner;
use crate::upper::{DeviceIndex, IndexEntry};

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

/// Largest page one call returns: bounds the memory of a single read.
pub const SCAN_PAGE_READINGS_MAX: usize = 100_000;

/// A read may race with a pass that moves its readings out of the log and recycles their
/// segment: the record then carries another segment's sequence. Retrying finds them in the
/// lower tier.
const READ_ATTEMPTS: usize = 4;

fn validate_optional_sensor(sensor: Option<&str>) -> Result<()> {
    sensor.map_or(Ok(()), validate_sensor)
}

/// A device's readings in the lower tier, as a read needs them.
struct LowerView {
    lower_id: u64,
    /// Newest first: the order in which places win.
    places: Vec<Place>,
    trims: Vec<WindowTrim>,
    /// Settled readings older than this are deleted (a pending trim).
    settled_hidden_before: Option<i64>,
}

impl LowerView {
    fn hides(&self, place: Place, ts_ns: i64) -> bool {
        match place {
            Place::Window(win) => trimmed(&self.trims, win, ts_ns),
            Place::Settled => self.settled_hidden_before.is_some_and(|b| ts_ns < b),
        }
    }
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

/// Looks the device up; `choose` picks the index entries to read.
fn locate(
    inner: &Inner,
    device: &str,
    choose: impl FnOnce(&DeviceIndex) -> Vec<(&str, IndexEntry)>,
) -> Located {
    let st = inner.state.lock();
    let Some((_, entry)) = st.map.lookup(device) else {
        return Located::Absent;
    };
    let log = choose(&entry.index)
        .into_iter()
        .map(|(sensor, e)| {
            let segment = st.log.segment_of(&e);
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
    Located::Present { log, lower }
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
        });
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
    let now_ms = inner.options.clock.now_ms();
    let st = inner.state.lock();
    let mut devices: Vec<DeviceInfo> = st
        .map
        .entries()
        .filter(|(id, entry)| st.map.id(&entry.name) == Some(*id))
        .map(|(_, entry)| {
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
        })
        .collect();
    drop(st);
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

/// `Engine::latest`.
pub(crate) fn latest(inner: &Inner, device: &str, sensor: Option<&str>) -> Result<Vec<Reading>> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    retry_moved(inner, |inner| {
        let Located::Present { log, lower } = locate(inner, device, |index| index.latest(sensor))
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

/// `Engine::scan_page`.
pub(crate) fn scan_page(
    inner: &Inner,
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
            index.page(sensor, from_ns, to_ns, after, limit + 1)
        });
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
    for _ in 0..READ_ATTEMPTS {
        let _windows_stay = inner.window_gate.read();
        match read(inner) {
            Ok(value) => return Ok(value),
            Err(ReadError::Moved(e)) => last_error = Some(e),
            Err(ReadError::Fatal(e)) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::Lower("read retries exhausted".into())))
}

pub(crate) enum ReadError {
    /// The record was not where the index said: its segment left the log meanwhile.
    Moved(Error),
    Fatal(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Fatal(e)
    }
}

fn malformed(k: &[u8]) -> Error {
    Error::Lower(format!("malformed key {k:?} in the lower tier"))
}

/// The reading at (sensor, ts) in the newest place holding it.
fn get_lower(
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

fn space_of(place: Place) -> Space {
    match place {
        Place::Window(_) => Space::Runs,
        Place::Settled => Space::Settled,
    }
}

/// Up to `limit` readings of the device's lower-tier places in the window, after the cursor,
/// merged (newest place wins), trims applied, in (sensor, ts) order.
#[allow(clippy::too_many_arguments)] // the scan's window, cursor and bound, as the caller gave them
fn page_lower(
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
fn latest_lower(
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

/// The first key of each sensor of a device in one place: (sensor, its oldest timestamp). One
/// seek per sensor: from a sensor's first key, `sensor 0x01` is the smallest key above all of
/// its keys (ids hold no NUL) and at or below every later sensor's.
pub(crate) fn oldest_per_sensor(
    inner: &Inner,
    place: Place,
    lower_id: u64,
) -> Result<Vec<(String, i64)>> {
    let (mut at, end) = place.range(lower_id, None);
    let mut sensors = Vec::new();
    loop {
        let mut first = None;
        inner.lower.scan(space_of(place), &at, &end, &mut |k, _| {
            first = Some(k.to_vec());
            false
        })?;
        let Some(k) = first else {
            return Ok(sensors);
        };
        let (_, sensor, ts_ns) = place.parse(&k).ok_or_else(|| malformed(&k))?;
        at = keys::after_sensor(place, lower_id, sensor);
        sensors.push((sensor.to_string(), ts_ns));
    }
}

/// Whether any reading of the device in the lower tier is older than `before_ns` and visible.
pub(crate) fn lower_has_before(inner: &Inner, device: &str, before_ns: i64) -> Result<bool> {
    let _windows_stay = inner.window_gate.read();
    let Located::Present {
        lower: Some(lower), ..
    } = locate(inner, device, |_| Vec::new())
    else {
        return Ok(false);
    };
    for &place in &lower.places {
        for (_, oldest_ns) in oldest_per_sensor(inner, place, lower.lower_id)? {
            if oldest_ns < before_ns && !lower.hides(place, oldest_ns) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Reads the chosen log records (outside the state lock).
fn read_log(
    device: &str,
    chosen: Vec<(String, IndexEntry, Arc<Segment>)>,
) -> Result<Vec<Reading>, ReadError> {
    let mut readings = Vec::with_capacity(chosen.len());
    for (sensor, entry, segment) in chosen {
        let bytes = segment.read_record(entry.offset as u64, entry.len)?;
        let error = |reason: String| Error::Corrupt {
            file: segment.path.clone(),
            offset: entry.offset as u64,
            reason,
        };
        match at_index(&bytes, segment.seq_low(), &entry) {
            AtIndex::Put {
                device: d,
                sensor: s,
                value,
            } if d == device && s == sensor => readings.push(Reading {
                device: device.into(),
                sensor,
                ts_ns: entry.ts_ns,
                value: value.to_vec(),
            }),
            AtIndex::Put { .. } => {
                return Err(ReadError::Moved(error(
                    "the index points at another device's record".into(),
                )));
            }
            AtIndex::Elsewhere(reason) => return Err(ReadError::Moved(error(reason))),
            AtIndex::Corrupt(reason) => return Err(ReadError::Fatal(error(reason))),
        }
    }
    Ok(readings)
}

/// What the log holds where an index entry points.
pub(crate) enum AtIndex<'a> {
    /// The indexed reading (same timestamp): its device, sensor and value.
    Put {
        device: &'a str,
        sensor: &'a str,
        value: &'a [u8],
    },
    /// Not the indexed reading: the segment was retired and reused meanwhile (why, in words).
    Elsewhere(String),
    /// Bytes of this segment that fail their checksum: damage on disk. (A reused segment fails
    /// the sequence check instead, which reads as `Elsewhere`.)
    Corrupt(String),
}

/// Decodes the record at an index entry (`bytes` = the entry's `len` bytes at its offset).
pub(crate) fn at_index<'a>(bytes: &'a [u8], seq_low: u32, entry: &IndexEntry) -> AtIndex<'a> {
    match record::decode(bytes, seq_low) {
        Decode::Record(d) => match d.body {
            Body::Put {
                device,
                sensor,
                ts_ns,
                value,
            } if ts_ns == entry.ts_ns => AtIndex::Put {
                device,
                sensor,
                value,
            },
            _ => AtIndex::Elsewhere("the index points at another record".into()),
        },
        Decode::End => AtIndex::Elsewhere("the index points at no record of this segment".into()),
        Decode::Corrupt(reason) => AtIndex::Corrupt(reason),
    }
}
