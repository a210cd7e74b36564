//! The upper tier's per-device log store: an in-memory index over the device's records, which
//! live in the shared commit-log segments (written exactly once). Serves point reads and
//! time-range scans; its memory is measured from the allocations it holds (property 6).

use std::collections::BTreeMap;
use std::mem::size_of;

/// Where a record sits in the log. Ordered as the log is: by segment, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogPosition {
    pub segment_seq: u64,
    pub offset: u64,
}

/// One indexed reading: 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub ts_ms: i64,
    pub segment_seq: u64,
    pub offset: u32,
    pub len: u32,
}

impl IndexEntry {
    pub fn position(&self) -> LogPosition {
        LogPosition {
            segment_seq: self.segment_seq,
            offset: self.offset as u64,
        }
    }
}

/// Estimated bookkeeping of a BTreeMap entry (node share, key box) beyond the key's bytes and
/// the Vec header: measured allocations are added on top of this.
const SENSOR_OVERHEAD_BYTES: usize = 48 + size_of::<Box<str>>() + size_of::<Vec<IndexEntry>>();
const _: () = assert!(size_of::<IndexEntry>() == 24);

/// The index of one device in the upper tier.
#[derive(Debug, Default)]
pub struct DeviceIndex {
    /// Per sensor, entries sorted by timestamp (unique timestamps: a rewrite replaces).
    sensors: BTreeMap<Box<str>, Vec<IndexEntry>>,
    /// Records per log segment that this device keeps alive (REGISTER and PUT records,
    /// including overwritten ones): released when the device migrates or departs.
    pub segment_records: Vec<(u64, u64)>,
    pub records: u64,
    /// Bytes of this device's live records in the log (header + payload).
    pub record_bytes: u64,
    index_bytes: u64,
}

impl DeviceIndex {
    /// Counts one log record (of any kind) of this device in `segment_seq`.
    pub fn hold_segment(&mut self, segment_seq: u64) {
        match self.segment_records.last_mut() {
            Some((seq, n)) if *seq == segment_seq => *n += 1,
            _ => match self
                .segment_records
                .iter_mut()
                .find(|(seq, _)| *seq == segment_seq)
            {
                Some((_, n)) => *n += 1,
                None => self.segment_records.push((segment_seq, 1)),
            },
        }
    }

    /// Inserts (or replaces) a reading.
    pub fn insert(&mut self, sensor: &str, entry: IndexEntry) {
        let entries = match self.sensors.get_mut(sensor) {
            Some(entries) => entries,
            None => {
                self.index_bytes += (SENSOR_OVERHEAD_BYTES + sensor.len()) as u64;
                self.sensors.entry(sensor.into()).or_default()
            }
        };
        let capacity_before = entries.capacity();
        match entries.last() {
            Some(last) if last.ts_ms < entry.ts_ms => entries.push(entry),
            None => entries.push(entry),
            Some(_) => match entries.binary_search_by_key(&entry.ts_ms, |e| e.ts_ms) {
                Ok(i) => {
                    self.record_bytes -= entries[i].len as u64;
                    self.records -= 1;
                    entries[i] = entry;
                }
                Err(i) => entries.insert(i, entry),
            },
        }
        self.index_bytes +=
            ((entries.capacity() - capacity_before) * size_of::<IndexEntry>()) as u64;
        self.records += 1;
        self.record_bytes += entry.len as u64;
    }

    /// The entry of `sensor` at `ts_ms`, with the sensor's name as the index holds it.
    pub fn get(&self, sensor: &str, ts_ms: i64) -> Option<(&str, IndexEntry)> {
        let (name, entries) = self.sensors.get_key_value(sensor)?;
        entries
            .binary_search_by_key(&ts_ms, |e| e.ts_ms)
            .ok()
            .map(|i| (&**name, entries[i]))
    }

    /// Entries with from <= ts < to, of one sensor or all, in (sensor, ts) order.
    pub fn range(&self, sensor: Option<&str>, from_ms: i64, to_ms: i64) -> Vec<(&str, IndexEntry)> {
        let mut out = Vec::new();
        match sensor {
            Some(name) => {
                if let Some((name, entries)) = self.sensors.get_key_value(name) {
                    push_window(&mut out, name, entries, from_ms, to_ms);
                }
            }
            None => {
                for (name, entries) in &self.sensors {
                    push_window(&mut out, name, entries, from_ms, to_ms);
                }
            }
        }
        out
    }

    /// Every entry, in (sensor, ts) order.
    pub fn all(&self) -> impl Iterator<Item = (&str, IndexEntry)> {
        self.sensors
            .iter()
            .flat_map(|(name, entries)| entries.iter().map(move |e| (&**name, *e)))
    }

    /// Up to `limit` entries with from <= ts < to, of one sensor or all, in (sensor, ts) order,
    /// strictly after `after` = (sensor, ts) when given. Costs O(log n + limit) whatever the
    /// window holds, so a paged scan never materialises a whole device.
    pub fn page(
        &self,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        after: Option<(&str, i64)>,
        limit: usize,
    ) -> Vec<(&str, IndexEntry)> {
        use std::ops::Bound;
        let first_sensor = match (sensor, after) {
            (Some(s), Some((a, _))) if a > s => return Vec::new(),
            (Some(s), _) => Bound::Included(s),
            (None, Some((a, _))) => Bound::Included(a),
            (None, None) => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for (name, entries) in self
            .sensors
            .range::<str, _>((first_sensor, Bound::Unbounded))
        {
            if out.len() >= limit || sensor.is_some_and(|s| s != &**name) {
                break;
            }
            let mut start = entries.partition_point(|e| e.ts_ms < from_ms);
            if let Some((after_sensor, after_ts)) = after
                && after_sensor == &**name
            {
                start = start.max(entries.partition_point(|e| e.ts_ms <= after_ts));
            }
            let end = entries.partition_point(|e| e.ts_ms < to_ms).max(start);
            let take = (end - start).min(limit - out.len());
            out.extend(entries[start..start + take].iter().map(|e| (&**name, *e)));
        }
        out
    }

    /// The newest entry of each sensor (of one sensor, if given), in sensor order.
    pub fn latest(&self, sensor: Option<&str>) -> Vec<(&str, IndexEntry)> {
        match sensor {
            Some(name) => self
                .sensors
                .get_key_value(name)
                .and_then(|(name, entries)| entries.last().map(|e| (&**name, *e)))
                .into_iter()
                .collect(),
            None => self
                .sensors
                .iter()
                .filter_map(|(name, entries)| entries.last().map(|e| (&**name, *e)))
                .collect(),
        }
    }

    /// Whether any indexed reading has ts < `before_ms`.
    pub fn has_before(&self, before_ms: i64) -> bool {
        self.sensors
            .values()
            .any(|entries| entries.first().is_some_and(|e| e.ts_ms < before_ms))
    }

    /// Drops every entry with ts < `before_ms` (a TRIM record). The records stay in the log
    /// and keep their segment holds, as overwritten records do, until the device leaves the
    /// upper tier: its REGISTER record pins every later segment anyway (in-order retirement),
    /// so releasing them earlier would free nothing. The index memory returns at once.
    pub fn trim_before(&mut self, before_ms: i64) {
        let mut emptied = Vec::new();
        for (name, entries) in &mut self.sensors {
            let cut = entries.partition_point(|e| e.ts_ms < before_ms);
            if cut == 0 {
                continue;
            }
            let capacity_before = entries.capacity();
            for e in entries.drain(..cut) {
                self.records -= 1;
                self.record_bytes -= e.len as u64;
            }
            if entries.len() < entries.capacity() / 2 {
                entries.shrink_to_fit();
            }
            self.index_bytes -=
                ((capacity_before - entries.capacity()) * size_of::<IndexEntry>()) as u64;
            if entries.is_empty() {
                emptied.push(name.clone());
            }
        }
        for name in emptied {
            self.sensors.remove(&name);
            self.index_bytes -= (SENSOR_OVERHEAD_BYTES + name.len()) as u64;
        }
    }

    /// Bytes this index holds in memory (measured from capacities, plus per-sensor bookkeeping).
    pub fn index_bytes(&self) -> u64 {
        self.index_bytes + (self.segment_records.capacity() * size_of::<(u64, u64)>()) as u64
    }
}

/// Appends the entries of one sensor with from <= ts < to.
fn push_window<'a>(
    out: &mut Vec<(&'a str, IndexEntry)>,
    name: &'a str,
    entries: &'a [IndexEntry],
    from_ms: i64,
    to_ms: i64,
) {
    let start = entries.partition_point(|e| e.ts_ms < from_ms);
    let end = entries.partition_point(|e| e.ts_ms < to_ms).max(start);
    out.extend(entries[start..end].iter().map(|e| (name, *e)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ts_ms: i64, offset: u32) -> IndexEntry {
        IndexEntry {
            ts_ms,
            segment_seq: 1,
            offset,
            len: 100,
        }
    }

    #[test]
    fn insert_keeps_order_and_replaces_duplicates() {
        let mut index = DeviceIndex::default();
        index.insert("speed", entry(10, 1));
        index.insert("speed", entry(30, 2));
        index.insert("speed", entry(20, 3));
        index.insert("speed", entry(20, 4));
        index.insert("alt", entry(5, 5));
        assert_eq!(index.records, 4);
        assert_eq!(index.record_bytes, 400);
        assert_eq!(index.get("speed", 20).map(|(_, e)| e.offset), Some(4));
        let all: Vec<(&str, i64)> = index.all().map(|(s, e)| (s, e.ts_ms)).collect();
        assert_eq!(
            all,
            vec![("alt", 5), ("speed", 10), ("speed", 20), ("speed", 30)]
        );
        let range: Vec<i64> = index
            .range(Some("speed"), 15, 30)
            .iter()
            .map(|(_, e)| e.ts_ms)
            .collect();
        assert_eq!(range, vec![20]);
        assert_eq!(index.range(None, 0, 100).len(), 4);
        assert!(index.range(Some("nope"), 0, 100).is_empty());
    }

    #[test]
    fn trim_drops_older_entries_and_their_memory() {
        let mut index = DeviceIndex::default();
        for ts in 0..1000 {
            index.insert("speed", entry(ts, 0));
        }
        index.insert("alt", entry(5, 0));
        let before = index.index_bytes();
        assert!(index.has_before(10));
        assert!(!index.has_before(0));
        index.trim_before(900);
        assert!(!index.has_before(900));
        assert_eq!(index.records, 100);
        assert_eq!(index.record_bytes, 100 * 100);
        assert_eq!(index.range(None, i64::MIN, i64::MAX).len(), 100);
        assert!(
            index.latest(Some("alt")).is_empty(),
            "an emptied sensor goes"
        );
        assert!(index.index_bytes() < before / 2, "memory returns");
        index.trim_before(i64::MAX);
        assert_eq!((index.records, index.record_bytes), (0, 0));
        assert_eq!(index.index_bytes(), 0, "nothing indexed, nothing held");
    }

    #[test]
    fn memory_grows_with_records_and_is_measured() {
        let mut index = DeviceIndex::default();
        for ts in 0..10_000 {
            index.insert("s", entry(ts, 0));
        }
        let per_record = index.index_bytes() as f64 / 10_000.0;
        assert!(
            (24.0..=50.0).contains(&per_record),
            "{per_record} bytes per record"
        );
    }
}
