//! Read-side queries beyond `get` and `scan`, for servers and tools: which devices are here and
//! in which tier, each sensor's newest reading, paged scans that resume after a cursor, and the
//! device-granular retention that departure makes cheap.
//!
//! Every call reads what `scan` reads (the upper-tier index and the log, or the LSM tree); none
//! of them writes, except `depart_if_older_than`, which is one `depart`.

use std::sync::Arc;

use crate::engine::{Engine, Inner, ReadError, Reading, read_upper, validate_id};
use crate::error::{Error, Result};
use crate::key;
use crate::limits;
use crate::mapping::Tier;
use crate::segment::Segment;
use crate::upper::IndexEntry;

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
/// `Engine::scan`); retrying finds the device settled.
const READ_ATTEMPTS: usize = 4;

fn validate_device(device: &str) -> Result<()> {
    validate_id("device", device, limits::DEVICE_ID_BYTES_MAX)
}

fn validate_sensor(sensor: Option<&str>) -> Result<()> {
    match sensor {
        Some(sensor) => validate_id("sensor", sensor, limits::SENSOR_ID_BYTES_MAX),
        None => Ok(()),
    }
}

impl Engine {
    /// Every device mapped now, sorted by name. Costs one pass over the mapping table under
    /// the state lock (no I/O).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let st = self.inner.state.lock();
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

    /// The newest reading of each sensor of a device (of one sensor, if given), in sensor
    /// order. Upper tier: the last index entry per sensor; lower tier: one reverse seek per
    /// sensor. An unknown device has none.
    pub fn latest(&self, device: &str, sensor: Option<&str>) -> Result<Vec<Reading>> {
        validate_device(device)?;
        validate_sensor(sensor)?;
        self.retry_moved(|inner| inner.latest_once(device, sensor))
    }

    /// Up to `limit` readings of a device (one sensor, if given) with from_ms <= ts < to_ms, in
    /// (sensor, ts) order, starting strictly after `after`. `next` is set when more may follow:
    /// pass it back as `after` for the next page. A page costs its own size, not the window's.
    pub fn scan_page(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        after: Option<&ScanCursor>,
        limit: usize,
    ) -> Result<ScanPage> {
        validate_device(device)?;
        validate_sensor(sensor)?;
        if limit == 0 || limit > SCAN_PAGE_READINGS_MAX {
            return Err(Error::InvalidOptions(format!(
                "scan page limit {limit} is outside 1..={SCAN_PAGE_READINGS_MAX}"
            )));
        }
        let after = after.map(|c| (c.sensor.as_str(), c.ts_ms));
        // One more than asked tells whether another page follows.
        let mut readings = self.retry_moved(|inner| {
            inner.page_once(device, sensor, from_ms, to_ms, after, limit + 1)
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

    /// Retention at device granularity: if every reading of `device` is older than `cutoff_ms`
    /// (by reading timestamp), the device departs (one DEPART record, see `depart`) and this
    /// returns true. A device with any reading at or after the cutoff is left whole.
    ///
    /// A write to the device that races with this call (acknowledged after the check) departs
    /// with it, as any write racing with `depart` does.
    pub fn depart_if_older_than(&self, device: &str, cutoff_ms: i64) -> Result<bool> {
        let latest = self.latest(device, None)?;
        match latest.iter().map(|r| r.ts_ms).max() {
            Some(newest_ms) if newest_ms < cutoff_ms => {
                self.depart(device)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn retry_moved<T>(&self, mut read: impl FnMut(&Inner) -> Result<T, ReadError>) -> Result<T> {
        let mut last_error = None;
        for _ in 0..READ_ATTEMPTS {
            match read(&self.inner) {
                Ok(value) => return Ok(value),
                Err(ReadError::Moved(e)) => last_error = Some(e),
                Err(ReadError::Fatal(e)) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Lower("read retries exhausted".into())))
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

impl Inner {
    /// Looks the device up; for an upper-tier device, `choose` picks the index entries to read.
    fn locate(
        &self,
        device: &str,
        choose: impl FnOnce(&crate::upper::DeviceIndex) -> Vec<(&str, IndexEntry)>,
    ) -> Located {
        let st = self.state.lock();
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

    fn latest_once(&self, device: &str, sensor: Option<&str>) -> Result<Vec<Reading>, ReadError> {
        match self.locate(device, |index| index.latest(sensor)) {
            Located::Absent => Ok(Vec::new()),
            Located::Upper(chosen) => read_upper(device, chosen),
            Located::Lower { lower_id } => Ok(self.latest_lower(device, lower_id, sensor)?),
        }
    }

    fn page_once(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        after: Option<(&str, i64)>,
        limit: usize,
    ) -> Result<Vec<Reading>, ReadError> {
        match self.locate(device, |index| {
            index.page(sensor, from_ms, to_ms, after, limit)
        }) {
            Located::Absent => Ok(Vec::new()),
            Located::Upper(chosen) => read_upper(device, chosen),
            Located::Lower { lower_id } => {
                Ok(self.page_lower(device, lower_id, sensor, from_ms, to_ms, after, limit)?)
            }
        }
    }

    /// Walks a settled device's sensors from the last one back: each step is one reverse seek
    /// that finds a sensor's newest key, then continues below that sensor's first key.
    fn latest_lower(
        &self,
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
        while let Some((k, v)) = self.lower.last_in(&start, &end)? {
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
        &self,
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
        self.lower.scan(&start, &end, &mut |k, v| {
            match key::parse_reading_key(k) {
                Some((_, s, ts_ms)) if (from_ms..to_ms).contains(&ts_ms) => {
                    readings.push(Reading {
                        device: device.into(),
                        sensor: s.into(),
                        ts_ms,
                        value: v.to_vec(),
                    })
                }
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
}
