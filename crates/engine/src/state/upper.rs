//! The upper tier's per-device log store: an in-memory index over the device's readings that
//! are in the log (written exactly once, in the shared commit-log segments). Serves point reads
//! and time-range scans; its memory is measured from the allocations it holds.
//!
//! Readings leave the log oldest segment first (maintenance), so a sensor's entries of the
//! oldest segment are, as long as its readings came in time order, a prefix of its entries:
//! taking them costs what is taken, not the device's whole index. A sensor written out of time
//! order (or overwritten) falls back to a scan of its entries until it is in order again.

use std::collections::VecDeque;
use std::mem::size_of;

use crate::commit_log::position::LogPosition;
use crate::commit_log::record;
use crate::model::ids::SegmentSeq;

/// One indexed reading: 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub ts_ns: i64,
    pub segment_seq: SegmentSeq,
    /// Where the reading's record starts in its segment.
    pub offset: u32,
    /// The record's bytes (low 24 bits: `RECORD_LEN_MASK`) and, for a reading of a PUTS record,
    /// how many readings the record holds (high 8 bits; 0 for a PUT record, which holds one).
    /// Packed so that an entry stays 24 bytes: the count gives each reading its share of the
    /// record's bytes, what the index counts as the device's bytes in the log.
    pub len: u32,
}

/// The record length's bits of `IndexEntry::len`: a record is far below 16 MiB (a value is at
/// most 256 KiB; a PUTS record is closed at 8 KiB of payload, or holds one reading).
const RECORD_LEN_MASK: u32 = (1 << 24) - 1;
const _: () = assert!(
    record::PUTS_READINGS_MAX < 256
        && (crate::model::limits::VALUE_BYTES_MAX + record::PUTS_PAYLOAD_BYTES_SOFT_MAX + 1024)
            < RECORD_LEN_MASK as usize
);

impl IndexEntry {
    /// `len` for a reading of a PUTS record of `record_len` bytes holding `readings`.
    pub fn puts_len(record_len: u32, readings: usize) -> u32 {
        debug_assert!(record_len <= RECORD_LEN_MASK && readings <= record::PUTS_READINGS_MAX);
        (record_len & RECORD_LEN_MASK) | ((readings as u32) << 24)
    }

    /// Bytes of the reading's record: what a read of it reads.
    pub fn record_len(&self) -> u32 {
        self.len & RECORD_LEN_MASK
    }

    /// The reading's share of its record's bytes (all of a PUT record's).
    pub fn share_bytes(&self) -> u64 {
        u64::from(self.record_len()) / u64::from((self.len >> 24).max(1))
    }

    pub fn position(&self) -> LogPosition {
        LogPosition {
            segment_seq: self.segment_seq,
            offset: self.offset as u64,
        }
    }
}

/// Estimated bookkeeping of a hash-map slot (the key box and the deque header, the table's
/// spare capacity and control byte) beyond the key's bytes: measured allocations are added on
/// top of this.
const SENSOR_OVERHEAD_BYTES: usize = 48 + size_of::<Box<str>>() + size_of::<SensorEntries>();
const _: () = assert!(size_of::<IndexEntry>() == 24);

/// One sensor's entries, sorted by timestamp (unique timestamps: a rewrite replaces).
#[derive(Debug, Default)]
struct SensorEntries {
    entries: VecDeque<IndexEntry>,
    /// The entries' log positions ascend with their timestamps: the oldest segment's entries
    /// are a prefix.
    in_log_order: bool,
}

impl SensorEntries {
    fn recheck_log_order(&mut self) {
        self.in_log_order = self
            .entries
            .iter()
            .zip(self.entries.iter().skip(1))
            .all(|(a, b)| a.position() <= b.position());
    }
}

/// The index of one device's readings in the log.
#[derive(Debug, Default)]
pub struct DeviceIndex {
    /// By sensor name, hashed: every logged reading looks its sensor up here under the state
    /// lock, and with an ordered map that lookup (a dozen and more string compares with 160
    /// sensors a device) was a quarter of a single writer's CPU (docs/BENCHMARKS.md, "Where the
    /// single writer's time goes"). The few paths that need sensor order sort the names
    /// (`sorted`). foldhash: fast on short keys and seeded per map, so sensor names sent by
    /// clients cannot be chosen to collide.
    sensors: foldhash::HashMap<Box<str>, SensorEntries>,
    pub records: u64,
    /// Bytes of this device's live records in the log (header + payload).
    pub record_bytes: u64,
    index_bytes: u64,
}

impl DeviceIndex {
    /// Inserts (or replaces) a reading; returns the entry it replaced.
    pub fn insert(&mut self, sensor: &str, entry: IndexEntry) -> Option<IndexEntry> {
        let sensor_entries = match self.sensors.get_mut(sensor) {
            Some(entries) => entries,
            None => {
                self.index_bytes += (SENSOR_OVERHEAD_BYTES + sensor.len()) as u64;
                self.sensors.entry(sensor.into()).or_insert(SensorEntries {
                    entries: VecDeque::new(),
                    in_log_order: true,
                })
            }
        };
        let entries = &mut sensor_entries.entries;
        let capacity_before = entries.capacity();
        let mut replaced = None;
        match entries.back() {
            Some(last) if last.ts_ns < entry.ts_ns => {
                sensor_entries.in_log_order &= last.position() <= entry.position();
                entries.push_back(entry)
            }
            None => entries.push_back(entry),
            Some(_) => {
                // Out of time order, or a rewrite: the oldest segment's entries may no longer
                // be a prefix.
                sensor_entries.in_log_order = false;
                match entries.binary_search_by_key(&entry.ts_ns, |e| e.ts_ns) {
                    Ok(i) => {
                        self.record_bytes -= entries[i].share_bytes();
                        self.records -= 1;
                        replaced = Some(entries[i]);
                        entries[i] = entry;
                    }
                    Err(i) => entries.insert(i, entry),
                }
            }
        }
        self.index_bytes +=
            ((entries.capacity() - capacity_before) * size_of::<IndexEntry>()) as u64;
        self.records += 1;
        self.record_bytes += entry.share_bytes();
        replaced
    }

    /// The entries in log segment `segment_seq`, sensor by sensor in no set order: the pass
    /// that calls this holds the state lock, and sorts what it moves after letting go of it.
    /// `segment_seq` must be the oldest segment any entry is in (maintenance takes segments
    /// oldest first).
    pub fn in_oldest_segment(&self, segment_seq: SegmentSeq) -> Vec<(&str, IndexEntry)> {
        let mut out = Vec::new();
        for (name, sensor) in &self.sensors {
            let name: &str = name;
            if sensor.in_log_order {
                out.extend(
                    sensor
                        .entries
                        .iter()
                        .take_while(|e| e.segment_seq == segment_seq)
                        .map(|e| (name, *e)),
                );
            } else {
                out.extend(
                    sensor
                        .entries
                        .iter()
                        .filter(|e| e.segment_seq == segment_seq)
                        .map(|e| (name, *e)),
                );
            }
        }
        out
    }

    /// Removes the entries in log segment `segment_seq` (the oldest, as `in_oldest_segment`):
    /// their readings left the log. Returns their count and record bytes.
    pub fn remove_oldest_segment(&mut self, segment_seq: SegmentSeq) -> (u64, u64) {
        let (mut removed, mut bytes) = (0u64, 0u64);
        let mut emptied = Vec::new();
        for (name, sensor) in &mut self.sensors {
            let capacity_before = sensor.entries.capacity();
            if sensor.in_log_order {
                while sensor
                    .entries
                    .front()
                    .is_some_and(|e| e.segment_seq == segment_seq)
                {
                    if let Some(e) = sensor.entries.pop_front() {
                        removed += 1;
                        bytes += e.share_bytes();
                    }
                }
            } else {
                sensor.entries.retain(|e| {
                    let keep = e.segment_seq != segment_seq;
                    if !keep {
                        removed += 1;
                        bytes += e.share_bytes();
                    }
                    keep
                });
                sensor.recheck_log_order();
            }
            if sensor.entries.len() < sensor.entries.capacity() / 4 {
                sensor.entries.shrink_to_fit();
            }
            self.index_bytes -=
                ((capacity_before - sensor.entries.capacity()) * size_of::<IndexEntry>()) as u64;
            if sensor.entries.is_empty() {
                emptied.push(name.clone());
            }
        }
        self.forget_sensors(emptied);
        self.records -= removed;
        self.record_bytes -= bytes;
        (removed, bytes)
    }

    fn forget_sensors(&mut self, emptied: Vec<Box<str>>) {
        for name in emptied {
            if let Some(sensor) = self.sensors.remove(&name) {
                self.index_bytes -= (SENSOR_OVERHEAD_BYTES
                    + name.len()
                    + sensor.entries.capacity() * size_of::<IndexEntry>())
                    as u64;
            }
        }
    }

    /// The entry of `sensor` at `ts_ns`, with the sensor's name as the index holds it.
    pub fn get(&self, sensor: &str, ts_ns: i64) -> Option<(&str, IndexEntry)> {
        let (name, sensor) = self.sensors.get_key_value(sensor)?;
        sensor
            .entries
            .binary_search_by_key(&ts_ns, |e| e.ts_ns)
            .ok()
            .map(|i| (&**name, sensor.entries[i]))
    }

    /// Entries with from <= ts < to, of one sensor or all, in (sensor, ts) order.
    pub fn range(&self, sensor: Option<&str>, from_ns: i64, to_ns: i64) -> Vec<(&str, IndexEntry)> {
        let mut out = Vec::new();
        match sensor {
            Some(name) => {
                if let Some((name, sensor)) = self.sensors.get_key_value(name) {
                    push_window(&mut out, name, &sensor.entries, from_ns, to_ns);
                }
            }
            None => {
                for (name, sensor) in self.sorted() {
                    push_window(&mut out, name, &sensor.entries, from_ns, to_ns);
                }
            }
        }
        out
    }

    /// Every entry, in (sensor, ts) order.
    #[cfg(test)]
    pub fn all(&self) -> impl Iterator<Item = (&str, IndexEntry)> {
        self.sorted()
            .into_iter()
            .flat_map(|(name, sensor)| sensor.entries.iter().map(move |e| (name, *e)))
    }

    /// Up to `limit` entries with from <= ts < to, of one sensor or all, in (sensor, ts) order,
    /// strictly after `after` = (sensor, ts) when given, and only entries before `before` in the
    /// log when given (a `ReadView`'s page). Costs O(s log s + log n + limit) for s sensors
    /// whatever the window holds (plus the entries `before` skips), so a paged scan never
    /// materialises a whole device.
    pub fn page(
        &self,
        sensor: Option<&str>,
        from_ns: i64,
        to_ns: i64,
        after: Option<(&str, i64)>,
        before: Option<LogPosition>,
        limit: usize,
    ) -> Vec<(&str, IndexEntry)> {
        let candidates: Vec<(&str, &SensorEntries)> = match (sensor, after) {
            (Some(s), Some((a, _))) if a > s => return Vec::new(),
            (Some(s), _) => self
                .sensors
                .get_key_value(s)
                .map(|(name, entries)| (&**name, entries))
                .into_iter()
                .collect(),
            (None, after) => {
                let mut sorted = self.sorted();
                if let Some((a, _)) = after {
                    sorted.drain(..sorted.partition_point(|(name, _)| *name < a));
                }
                sorted
            }
        };
        let mut out = Vec::new();
        for (name, sensor_entries) in candidates {
            if out.len() >= limit {
                break;
            }
            let entries = &sensor_entries.entries;
            let mut start = entries.partition_point(|e| e.ts_ns < from_ns);
            if let Some((after_sensor, after_ts)) = after
                && after_sensor == name
            {
                start = start.max(entries.partition_point(|e| e.ts_ns <= after_ts));
            }
            let end = entries.partition_point(|e| e.ts_ns < to_ns).max(start);
            let room = limit - out.len();
            // A view's page leaves out entries written at or after its position.
            out.extend(
                entries
                    .range(start..end)
                    .filter(|e| before.is_none_or(|p| e.position() < p))
                    .take(room)
                    .map(|e| (name, *e)),
            );
        }
        out
    }

    /// The newest entry of each sensor (of one sensor, if given), in sensor order.
    pub fn latest(&self, sensor: Option<&str>) -> Vec<(&str, IndexEntry)> {
        match sensor {
            Some(name) => self
                .sensors
                .get_key_value(name)
                .and_then(|(name, sensor)| sensor.entries.back().map(|e| (&**name, *e)))
                .into_iter()
                .collect(),
            None => self
                .sorted()
                .into_iter()
                .filter_map(|(name, sensor)| sensor.entries.back().map(|e| (name, *e)))
                .collect(),
        }
    }

    /// Whether any indexed reading has ts < `before_ms`.
    pub fn has_before(&self, before_ns: i64) -> bool {
        self.sensors
            .values()
            .any(|sensor| sensor.entries.front().is_some_and(|e| e.ts_ns < before_ns))
    }

    /// Drops every entry with ts < `before_ns` (a TRIM record). The records stay in the log
    /// until their segment leaves it, as overwritten records do; the index memory returns at
    /// once.
    pub fn trim_before(&mut self, before_ns: i64) {
        let mut emptied = Vec::new();
        for (name, sensor) in &mut self.sensors {
            let entries = &mut sensor.entries;
            let cut = entries.partition_point(|e| e.ts_ns < before_ns);
            if cut == 0 {
                continue;
            }
            let capacity_before = entries.capacity();
            for e in entries.drain(..cut) {
                self.records -= 1;
                self.record_bytes -= e.share_bytes();
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
        self.forget_sensors(emptied);
    }

    /// The sensors in name order, for the queries that answer in (sensor, ts) order. It costs
    /// O(s log s) for s sensors under the state lock, per query page: nothing for the ~160 of a
    /// bench device, about a millisecond for a device with tens of thousands of sensors.
    fn sorted(&self) -> Vec<(&str, &SensorEntries)> {
        let mut sorted: Vec<(&str, &SensorEntries)> = self
            .sensors
            .iter()
            .map(|(name, entries)| (&**name, entries))
            .collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        sorted
    }

    /// Bytes this index holds in memory (measured from capacities, plus per-sensor bookkeeping).
    pub fn index_bytes(&self) -> u64 {
        self.index_bytes
    }
}

/// Appends the entries of one sensor with from <= ts < to.
fn push_window<'a>(
    out: &mut Vec<(&'a str, IndexEntry)>,
    name: &'a str,
    entries: &'a VecDeque<IndexEntry>,
    from_ns: i64,
    to_ns: i64,
) {
    let start = entries.partition_point(|e| e.ts_ns < from_ns);
    let end = entries.partition_point(|e| e.ts_ns < to_ns).max(start);
    out.extend(entries.range(start..end).map(|e| (name, *e)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ts_ns: i64, offset: u32) -> IndexEntry {
        IndexEntry {
            ts_ns,
            segment_seq: SegmentSeq(1),
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
        let all: Vec<(&str, i64)> = index.all().map(|(s, e)| (s, e.ts_ns)).collect();
        assert_eq!(
            all,
            vec![("alt", 5), ("speed", 10), ("speed", 20), ("speed", 30)]
        );
        let range: Vec<i64> = index
            .range(Some("speed"), 15, 30)
            .iter()
            .map(|(_, e)| e.ts_ns)
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

    fn at(ts_ns: i64, segment_seq: u64, offset: u32) -> IndexEntry {
        IndexEntry {
            ts_ns,
            segment_seq: SegmentSeq(segment_seq),
            offset,
            len: 10,
        }
    }

    #[test]
    fn the_oldest_segment_is_taken_whether_written_in_order_or_not() {
        let mut index = DeviceIndex::default();
        // "in": in time order across segments 1, 2, 3; "late": a reading of segment 3 with an
        // old timestamp, and a rewrite in segment 2 of a reading of segment 1.
        for (ts, seq) in [(1, 1), (2, 1), (3, 2), (4, 3)] {
            index.insert("in", at(ts, seq, ts as u32 * 100));
            index.insert("late", at(ts * 10, seq, ts as u32 * 100 + 1));
        }
        index.insert("late", at(5, 3, 900));
        index.insert("late", at(10, 2, 800));
        let mut taken: Vec<(&str, i64)> = index
            .in_oldest_segment(SegmentSeq(1))
            .iter()
            .map(|(s, e)| (*s, e.ts_ns))
            .collect();
        taken.sort_unstable();
        assert_eq!(taken, vec![("in", 1), ("in", 2), ("late", 20)]);
        let bytes_before = index.index_bytes();
        assert_eq!(index.remove_oldest_segment(SegmentSeq(1)), (3, 30));
        assert_eq!(index.records, 6);
        assert!(index.in_oldest_segment(SegmentSeq(1)).is_empty());
        let mut next: Vec<i64> = index
            .in_oldest_segment(SegmentSeq(2))
            .iter()
            .map(|(_, e)| e.ts_ns)
            .collect();
        next.sort_unstable();
        assert_eq!(next, vec![3, 10, 30]);
        assert_eq!(index.remove_oldest_segment(SegmentSeq(2)), (3, 30));
        assert_eq!(index.remove_oldest_segment(SegmentSeq(3)), (3, 30));
        assert_eq!(index.records, 0);
        assert_eq!(index.index_bytes(), 0, "nothing indexed, nothing held");
        assert!(bytes_before > 0);
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
