//! The read path: `get` and `scan`, and the queries servers and tools ask beyond them (which
//! devices are here and in which tier, each sensor's newest reading, paged scans that resume
//! after a cursor).
//!
//! A read finds the device in the mapping table under the state lock. Upper tier: the index
//! gives log positions, and each record is read from its segment with pread outside the lock
//! and checked (checksum, and that it is the record the index meant). Lower tier: a range scan
//! or reverse seek in the LSM tree. Nothing here writes.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::key;
use crate::mapping::Tier;
use crate::reading::{Reading, validate_device, validate_sensor};
use crate::record::{self, Body, Decode};
use crate::segment::Segment;
use crate::state::Inner;
use crate::upper::{DeviceIndex, IndexEntry};

/// Where a device's readings live now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTier {
    /// Inside its management time: in the commit log, indexed in memory.
    Upper,
    /// Being moved to the LSM tree (reads are still served from the upper tier).
    Migrating,
    /// Settled in the LSM tree.
    Lower,
}

impl DeviceTier {
    pub fn name(self) -> &'static str {
        match self {
            DeviceTier::Upper => "upper",
            DeviceTier::Migrating => "migrating",
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
    /// Readings it holds in the upper tier (exact); `None` for a settled device, whose count
    /// only a scan of the LSM tree could tell.
    pub upper_records: Option<u64>,
}

/// Where a paged scan resumes: strictly after this (sensor, timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCursor {
    pub sensor: String,
    pub ts_ms: i64,
}

/// One page of a scan: at most `limit` readings, and the cursor of the next page if there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    pub readings: Vec<Reading>,
    pub next: Option<ScanCursor>,
}

/// Largest page one call returns: bounds the memory of a single read.
pub const SCAN_PAGE_READINGS_MAX: usize = 100_000;

/// A read may race with a migration that retires and recycles the segment it reads (see
/// `Engine::scan`): the record then carries another segment's sequence. Retrying finds the
/// device settled.
const READ_ATTEMPTS: usize = 4;

fn validate_optional_sensor(sensor: Option<&str>) -> Result<()> {
    sensor.map_or(Ok(()), validate_sensor)
}

/// `Engine::get` (`point`: the one reading at `from_ms`) and `Engine::scan`.
pub(crate) fn read(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    point: bool,
) -> Result<Vec<Reading>> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    retry_moved(inner, |inner| {
        read_once(inner, device, sensor, from_ms, to_ms, point)
    })
}

/// `Engine::devices`.
pub(crate) fn devices(inner: &Inner) -> Vec<DeviceInfo> {
    let st = inner.state.lock();
    let mut devices: Vec<DeviceInfo> = st
        .map
        .entries()
        .filter(|(id, entry)| st.map.id(&entry.name) == Some(*id))
        .map(|(_, entry)| {
            let tier = match entry.tier {
                Tier::Upper => DeviceTier::Upper,
                Tier::Migrating => DeviceTier::Migrating,
                Tier::Lower => DeviceTier::Lower,
            };
            DeviceInfo {
                name: entry.name.to_string(),
                tier,
                registered_at_ms: entry.registered_at_ms,
                upper_records: (tier != DeviceTier::Lower).then_some(entry.index.records),
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
    retry_moved(inner, |inner| latest_once(inner, device, sensor))
}

/// `Engine::scan_page`.
pub(crate) fn scan_page(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    after: Option<&ScanCursor>,
    limit: usize,
) -> Result<ScanPage> {
    validate_device(device)?;
    validate_optional_sensor(sensor)?;
    if limit == 0 || limit > SCAN_PAGE_READINGS_MAX {
        return Err(Error::InvalidOptions(format!(
            "scan page limit {limit} is outside 1..={SCAN_PAGE_READINGS_MAX}"
        )));
    }
    let after = after.map(|c| (c.sensor.as_str(), c.ts_ms));
    // One more than asked tells whether another page follows.
    let mut readings = retry_moved(inner, |inner| {
        page_once(inner, device, sensor, from_ms, to_ms, after, limit + 1)
    })?;
    let next = if readings.len() > limit {
        readings.truncate(limit);
        readings.last().map(|r| ScanCursor {
            sensor: r.sensor.clone(),
            ts_ms: r.ts_ms,
        })
    } else {
        None
    };
    Ok(ScanPage { readings, next })
}

/// Runs a read, again while it finds that its device moved tiers under it.
fn retry_moved<T>(
    inner: &Inner,
    mut read: impl FnMut(&Inner) -> Result<T, ReadError>,
) -> Result<T> {
    let mut last_error = None;
    for _ in 0..READ_ATTEMPTS {
        match read(inner) {
            Ok(value) => return Ok(value),
            Err(ReadError::Moved(e)) => last_error = Some(e),
            Err(ReadError::Fatal(e)) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| Error::Lower("read retries exhausted".into())))
}

pub(crate) enum ReadError {
    /// The record was not where the index said: the device moved tiers meanwhile.
    Moved(Error),
    Fatal(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Fatal(e)
    }
}

/// A device's place in the mapping table, looked up under the state lock.
enum Located {
    Absent,
    Lower {
        lower_id: u64,
    },
    /// Upper tier: the index entries chosen, each with the segment that holds it.
    Upper(Vec<(String, IndexEntry, Arc<Segment>)>),
}

/// Looks the device up; for an upper-tier device, `choose` picks the index entries to read.
fn locate(
    inner: &Inner,
    device: &str,
    choose: impl FnOnce(&DeviceIndex) -> Vec<(&str, IndexEntry)>,
) -> Located {
    let st = inner.state.lock();
    let Some((_, entry)) = st.map.lookup(device) else {
        return Located::Absent;
    };
    if entry.tier == Tier::Lower {
        return Located::Lower {
            lower_id: entry.lower_id,
        };
    }
    let chosen = choose(&entry.index)
        .into_iter()
        .map(|(sensor, e)| {
            let segment = st.log.segment_of(&e);
            (sensor.to_owned(), e, Arc::clone(segment))
        })
        .collect();
    Located::Upper(chosen)
}

fn latest_once(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
) -> Result<Vec<Reading>, ReadError> {
    match locate(inner, device, |index| index.latest(sensor)) {
        Located::Absent => Ok(Vec::new()),
        Located::Upper(chosen) => read_upper(device, chosen),
        Located::Lower { lower_id } => Ok(latest_lower(inner, device, lower_id, sensor)?),
    }
}

fn page_once(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    after: Option<(&str, i64)>,
    limit: usize,
) -> Result<Vec<Reading>, ReadError> {
    match locate(inner, device, |index| {
        index.page(sensor, from_ms, to_ms, after, limit)
    }) {
        Located::Absent => Ok(Vec::new()),
        Located::Upper(chosen) => read_upper(device, chosen),
        Located::Lower { lower_id } => Ok(page_lower(
            inner, device, lower_id, sensor, from_ms, to_ms, after, limit,
        )?),
    }
}

/// Walks a settled device's sensors from the last one back: each step is one reverse seek
/// that finds a sensor's newest key, then continues below that sensor's first key.
fn latest_lower(
    inner: &Inner,
    device: &str,
    lower_id: u64,
    sensor: Option<&str>,
) -> Result<Vec<Reading>> {
    let (start, mut end) = match sensor {
        Some(sensor) => key::reading_range(lower_id, Some(sensor), i64::MIN, i64::MAX),
        None => key::device_reading_range(lower_id),
    };
    if let Some(sensor) = sensor {
        // reading_range excludes i64::MAX itself; the key just above it includes it.
        end = key::reading_key(lower_id, sensor, i64::MAX);
        end.push(0);
    }
    let mut readings = Vec::new();
    while let Some((k, v)) = inner.lower.last_in(&start, &end)? {
        let (_, found_sensor, ts_ms) = key::parse_reading_key(&k)
            .ok_or_else(|| Error::Lower(format!("malformed key {k:?} in the lower tier")))?;
        readings.push(Reading {
            device: device.into(),
            sensor: found_sensor.into(),
            ts_ms,
            value: v,
        });
        if sensor.is_some() {
            break;
        }
        end = key::reading_key(lower_id, found_sensor, i64::MIN);
    }
    readings.reverse();
    Ok(readings)
}

#[allow(clippy::too_many_arguments)] // the scan's window, cursor and bound, as the caller gave them
pub(crate) fn page_lower(
    inner: &Inner,
    device: &str,
    lower_id: u64,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    after: Option<(&str, i64)>,
    limit: usize,
) -> Result<Vec<Reading>> {
    let (mut start, end) = key::reading_range(lower_id, sensor, from_ms, to_ms);
    if let Some((after_sensor, after_ts)) = after {
        // The smallest key above the cursor's key: the cursor's key with a 0 byte appended.
        let mut resume = key::reading_key(lower_id, after_sensor, after_ts);
        resume.push(0);
        start = start.max(resume);
    }
    if start >= end {
        return Ok(Vec::new());
    }
    let mut readings = Vec::new();
    let mut bad_key = None;
    inner.lower.scan(&start, &end, &mut |k, v| {
        match key::parse_reading_key(k) {
            Some((_, s, ts_ms)) if (from_ms..to_ms).contains(&ts_ms) => readings.push(Reading {
                device: device.into(),
                sensor: s.into(),
                ts_ms,
                value: v.to_vec(),
            }),
            Some(_) => {}
            None => bad_key = Some(k.to_vec()),
        }
        bad_key.is_none() && readings.len() < limit
    })?;
    match bad_key {
        Some(k) => Err(Error::Lower(format!(
            "malformed key {k:?} in the lower tier"
        ))),
        None => Ok(readings),
    }
}

fn read_once(
    inner: &Inner,
    device: &str,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    point: bool,
) -> Result<Vec<Reading>, ReadError> {
    let chosen = locate(inner, device, |index| match (point, sensor) {
        (true, Some(sensor)) => index.get(sensor, from_ms).into_iter().collect(),
        _ => index.range(sensor, from_ms, to_ms),
    });
    match chosen {
        Located::Absent => Ok(Vec::new()),
        Located::Upper(chosen) => read_upper(device, chosen),
        Located::Lower { lower_id } => Ok(read_lower(
            inner, device, lower_id, sensor, from_ms, to_ms, point,
        )?),
    }
}

fn read_lower(
    inner: &Inner,
    device: &str,
    lower_id: u64,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
    point: bool,
) -> Result<Vec<Reading>> {
    if let (true, Some(sensor)) = (point, sensor) {
        let value = inner
            .lower
            .get(&key::reading_key(lower_id, sensor, from_ms))?;
        return Ok(value
            .map(|value| Reading {
                device: device.into(),
                sensor: sensor.into(),
                ts_ms: from_ms,
                value,
            })
            .into_iter()
            .collect());
    }
    // The range read is a page without a cursor or a bound (query.rs).
    page_lower(
        inner,
        device,
        lower_id,
        sensor,
        from_ms,
        to_ms,
        None,
        usize::MAX,
    )
}

/// Reads the chosen upper-tier records from the log (outside the state lock).
pub(crate) fn read_upper(
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
                ts_ms: entry.ts_ms,
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
                ts_ms,
                value,
            } if ts_ms == entry.ts_ms => AtIndex::Put {
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
