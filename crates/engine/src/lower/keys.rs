//! Keys and values of the lower tier (docs/FORMAT.md, "Lower tier"). Three key spaces (RocksDB:
//! three column families; LevelDB: one keyspace, each key behind a one-byte space tag):
//!
//! ```text
//! runs:     win(8 BE) lower_id(8 BE) sensor 0x00 ts_ns(8 BE, sign bit flipped) -> value
//! settled:  lower_id(8 BE) sensor 0x00 ts_ns(8 BE, sign bit flipped)          -> value
//! catalog:  0x00 "meta"                      -> meta (CatalogMeta)
//!           0x01 lower_id(8 BE)              -> device record (DeviceRecord)
//!           0x01 lower_id(8 BE) win(8 BE)    -> bytes of the device's readings in window win (u64 LE)
//! ```
//!
//! **Why the window id comes first.** A window is the readings one pass moved out of one log
//! segment; window ids only grow, so every new run's keys sort above everything already in the
//! runs space, and the LSM places it in its last level without overlap: it is never compacted,
//! and it is dropped as a whole file once no live device has readings in it.
//!
//! **Why the catalog is keyed by lower id.** A device's record and its window memberships share
//! the prefix `0x01 lower_id`, so a departure deletes them with one range delete.
//!
//! Within a device, byte order is logical order: sensors by name (no NUL in ids, so 0x00 ends
//! a name and a shorter name sorts first), then timestamps.

use crate::dir::format::{CATALOG_META_FORMAT, u32_at, u64_at};
use crate::model::ids::{LowerId, SegmentSeq, WindowId};
use crate::model::limits::{DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, id_problem};

/// Timestamps are i64; flipping the sign bit makes big-endian byte order match numeric order.
pub fn encode_ts(ts_ns: i64) -> [u8; 8] {
    ((ts_ns as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn decode_ts(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// The smallest key above `key`: the key with a 0 byte appended (the end of a range that
/// includes `key`).
pub fn key_after(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// `lower_id sensor 0x00 ts`: a reading's key within a device (the settled space's whole key,
/// and the runs space's key after the window id).
/// The bytes of a lower id in a key: the settled space's keys begin with it (its files are cut
/// at its boundaries, rocks.rs).
pub const LOWER_ID_BYTES: usize = 8;

fn push_reading(key: &mut Vec<u8>, lower_id: LowerId, sensor: &str, ts_ns: i64) {
    let lower_id: [u8; LOWER_ID_BYTES] = lower_id.0.to_be_bytes();
    key.extend_from_slice(&lower_id);
    key.extend_from_slice(sensor.as_bytes());
    key.push(0);
    key.extend_from_slice(&encode_ts(ts_ns));
}

/// The key of a reading in window `win` (runs space).
pub fn run_key(win: WindowId, lower_id: LowerId, sensor: &str, ts_ns: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(sensor.len() + 25);
    key.extend_from_slice(&win.0.to_be_bytes());
    push_reading(&mut key, lower_id, sensor, ts_ns);
    key
}

/// The key of a reading in the settled space.
pub fn settled_key(lower_id: LowerId, sensor: &str, ts_ns: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(sensor.len() + 17);
    push_reading(&mut key, lower_id, sensor, ts_ns);
    key
}

/// Where a device's readings are in one place of the lower tier: a window, or the settled space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Window(WindowId),
    Settled,
}

impl Place {
    /// The prefix every key of the device has in this place.
    pub fn device_prefix(self, lower_id: LowerId) -> Vec<u8> {
        let mut key = Vec::with_capacity(16);
        if let Place::Window(win) = self {
            key.extend_from_slice(&win.0.to_be_bytes());
        }
        key.extend_from_slice(&lower_id.0.to_be_bytes());
        key
    }

    /// The key of a reading in this place.
    pub fn key(self, lower_id: LowerId, sensor: &str, ts_ns: i64) -> Vec<u8> {
        match self {
            Place::Window(win) => run_key(win, lower_id, sensor, ts_ns),
            Place::Settled => settled_key(lower_id, sensor, ts_ns),
        }
    }

    /// [start, end) of every key of the device here (of `sensor` with from <= ts < to, if given).
    pub fn range(self, lower_id: LowerId, sensor: Option<(&str, i64, i64)>) -> (Vec<u8>, Vec<u8>) {
        match sensor {
            Some((sensor, from_ns, to_ns)) => (
                self.key(lower_id, sensor, from_ns),
                self.key(lower_id, sensor, to_ns),
            ),
            None => (
                self.device_prefix(lower_id),
                successor(&self.device_prefix(lower_id)),
            ),
        }
    }

    /// Splits a key of this place into (lower_id, sensor, ts). None if it is not one.
    pub fn parse(self, key: &[u8]) -> Option<(LowerId, &str, i64)> {
        let rest = match self {
            Place::Window(win) => key.strip_prefix(&win.0.to_be_bytes())?,
            Place::Settled => key,
        };
        parse_reading(rest)
    }
}

/// The smallest key above every key that starts with `prefix` (prefix of fixed-size ids: the
/// last byte never overflows in practice; an all-0xff prefix maps to itself plus 0x00).
pub fn successor(prefix: &[u8]) -> Vec<u8> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < 0xff {
            next.push(last + 1);
            return next;
        }
    }
    let mut above = prefix.to_vec();
    above.push(0);
    above
}

/// The smallest key above every key of `sensor` (its name followed by 0x01: ids hold no NUL).
pub fn after_sensor(place: Place, lower_id: LowerId, sensor: &str) -> Vec<u8> {
    let mut key = place.device_prefix(lower_id);
    key.extend_from_slice(sensor.as_bytes());
    key.push(1);
    key
}

/// `lower_id sensor 0x00 ts` back into its parts.
fn parse_reading(rest: &[u8]) -> Option<(LowerId, &str, i64)> {
    let lower_id = LowerId(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?));
    let rest = &rest[8..];
    let sensor_end = rest.iter().position(|&b| b == 0)?;
    let sensor = std::str::from_utf8(&rest[..sensor_end])
        .ok()
        .filter(|s| id_problem(s, SENSOR_ID_BYTES_MAX).is_none())?;
    let ts: [u8; 8] = rest[sensor_end + 1..].try_into().ok()?;
    Some((lower_id, sensor, decode_ts(ts)))
}

/// The window a runs-space key belongs to.
pub fn window_of(run_key: &[u8]) -> Option<WindowId> {
    Some(WindowId(u64::from_be_bytes(
        run_key.get(..8)?.try_into().ok()?,
    )))
}

const CATALOG_META_TAG: u8 = 0x00;
const CATALOG_DEVICE_TAG: u8 = 0x01;

/// The catalog's one meta key: `0x00 "meta"`.
pub fn meta_key() -> Vec<u8> {
    let mut key = vec![CATALOG_META_TAG];
    key.extend_from_slice(b"meta");
    key
}

/// The catalog key of a device record.
pub fn device_key(lower_id: LowerId) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(CATALOG_DEVICE_TAG);
    key.extend_from_slice(&lower_id.0.to_be_bytes());
    key
}

/// The catalog key of a device's membership in a window.
pub fn membership_key(lower_id: LowerId, win: WindowId) -> Vec<u8> {
    let mut key = device_key(lower_id);
    key.extend_from_slice(&win.0.to_be_bytes());
    key
}

/// [start, end) of a device's catalog keys: its record and every membership.
pub fn device_catalog_range(lower_id: LowerId) -> (Vec<u8>, Vec<u8>) {
    (device_key(lower_id), device_key(lower_id.next()))
}

/// [start, end) of every device's catalog keys.
pub fn all_devices_range() -> (Vec<u8>, Vec<u8>) {
    (vec![CATALOG_DEVICE_TAG], vec![CATALOG_DEVICE_TAG + 1])
}

/// A catalog key of a device: its record (None) or a membership (Some(win)).
pub fn parse_catalog_device_key(key: &[u8]) -> Option<(LowerId, Option<WindowId>)> {
    let rest = key.strip_prefix(&[CATALOG_DEVICE_TAG])?;
    let lower_id = LowerId(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?));
    match rest.len() {
        8 => Some((lower_id, None)),
        16 => Some((
            lower_id,
            Some(WindowId(u64::from_be_bytes(rest[8..].try_into().ok()?))),
        )),
        _ => None,
    }
}

/// What the catalog knows of the lower tier as a whole, written by every pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatalogMeta {
    /// Every window id below this was given out (a window at or above it is an orphan of a
    /// pass that crashed before its catalog batch).
    pub next_win: WindowId,
    /// Every lower id below this was given out.
    pub next_lower_id: LowerId,
    /// The last log segment whose readings left the log: every segment up to it is retired
    /// (or is a leftover of a crash between this batch and the retirement).
    pub last_aged_seq: SegmentSeq,
}

// The meta record (docs/FORMAT.md, "Catalog"): its format, then three u64 counters.
const META_FORMAT_OFFSET: usize = 0;
const META_NEXT_WIN_OFFSET: usize = META_FORMAT_OFFSET + 4;
const META_NEXT_LOWER_ID_OFFSET: usize = META_NEXT_WIN_OFFSET + 8;
const META_LAST_AGED_SEQ_OFFSET: usize = META_NEXT_LOWER_ID_OFFSET + 8;
const META_BYTES: usize = META_LAST_AGED_SEQ_OFFSET + 8;

impl CatalogMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(META_BYTES);
        value.extend_from_slice(&CATALOG_META_FORMAT.to_le_bytes());
        value.extend_from_slice(&self.next_win.0.to_le_bytes());
        value.extend_from_slice(&self.next_lower_id.0.to_le_bytes());
        value.extend_from_slice(&self.last_aged_seq.0.to_le_bytes());
        value
    }

    pub fn decode(value: &[u8]) -> Option<CatalogMeta> {
        if value.len() != META_BYTES || u32_at(value, META_FORMAT_OFFSET)? != CATALOG_META_FORMAT {
            return None;
        }
        Some(CatalogMeta {
            next_win: WindowId(u64_at(value, META_NEXT_WIN_OFFSET)?),
            next_lower_id: LowerId(u64_at(value, META_NEXT_LOWER_ID_OFFSET)?),
            last_aged_seq: SegmentSeq(u64_at(value, META_LAST_AGED_SEQ_OFFSET)?),
        })
    }
}

/// A trim that still hides readings of the lower tier: readings with ts < `before_ns` in
/// windows up to `upto_win` were written before the TRIM and are deleted (they stay in their
/// window files until those drop or are consolidated; reads skip them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowTrim {
    pub before_ns: i64,
    pub upto_win: WindowId,
}

/// A device's catalog record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRecord {
    pub registered_at_ms: u64,
    /// It has readings in the settled space.
    pub settled: bool,
    pub trims: Vec<WindowTrim>,
    pub name: String,
}

const DEVICE_FLAG_SETTLED: u8 = 1;

impl DeviceRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut value = Vec::with_capacity(11 + 16 * self.trims.len() + self.name.len());
        value.extend_from_slice(&self.registered_at_ms.to_le_bytes());
        value.push(if self.settled { DEVICE_FLAG_SETTLED } else { 0 });
        let count = u16::try_from(self.trims.len()).expect("trims are consolidated long before");
        value.extend_from_slice(&count.to_le_bytes());
        for t in &self.trims {
            value.extend_from_slice(&t.before_ns.to_le_bytes());
            value.extend_from_slice(&t.upto_win.0.to_le_bytes());
        }
        value.extend_from_slice(self.name.as_bytes());
        value
    }

    pub fn decode(value: &[u8]) -> Option<DeviceRecord> {
        let registered_at_ms = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
        let flags = *value.get(8)?;
        if flags & !DEVICE_FLAG_SETTLED != 0 {
            return None;
        }
        let trims_count = u16::from_le_bytes(value.get(9..11)?.try_into().ok()?) as usize;
        let mut at = 11;
        let mut trims = Vec::with_capacity(trims_count);
        for _ in 0..trims_count {
            let before_ns = i64::from_le_bytes(value.get(at..at + 8)?.try_into().ok()?);
            let upto_win = WindowId(u64::from_le_bytes(
                value.get(at + 8..at + 16)?.try_into().ok()?,
            ));
            trims.push(WindowTrim {
                before_ns,
                upto_win,
            });
            at += 16;
        }
        let name = std::str::from_utf8(value.get(at..)?)
            .ok()
            .filter(|n| id_problem(n, DEVICE_ID_BYTES_MAX).is_none())?;
        Some(DeviceRecord {
            registered_at_ms,
            settled: flags & DEVICE_FLAG_SETTLED != 0,
            trims,
            name: name.to_string(),
        })
    }
}

/// Adds a trim to a device's list, keeping the list minimal and exact: a trim that hides at
/// most what another hides (an earlier cutoff over no more windows) is dropped. Retention trims
/// come with later cutoffs over more windows, so each replaces the last and the list stays at
/// one; a device whose list grows past `TRIMS_PER_DEVICE_MAX` is consolidated, which applies
/// its trims to the readings themselves and empties the list (maintenance).
pub fn merge_trims(trims: &mut Vec<WindowTrim>, new: WindowTrim) {
    let covered =
        |t: &WindowTrim, by: &WindowTrim| t.before_ns <= by.before_ns && t.upto_win <= by.upto_win;
    if trims.iter().any(|t| covered(&new, t)) {
        return;
    }
    trims.retain(|t| !covered(t, &new));
    trims.push(new);
    trims.sort_by_key(|t| t.upto_win);
}

/// Whether a reading of window `win` with timestamp `ts_ns` is hidden by a trim.
pub fn trimmed(trims: &[WindowTrim], win: WindowId, ts_ns: i64) -> bool {
    trims
        .iter()
        .any(|t| win <= t.upto_win && ts_ns < t.before_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_logical_order_within_a_device_and_by_id_across() {
        let keys = [
            settled_key(LowerId(7), "a", i64::MIN),
            settled_key(LowerId(7), "a", -1),
            settled_key(LowerId(7), "a", 0),
            settled_key(LowerId(7), "a", 1_700_000_000_000_000_000),
            settled_key(LowerId(7), "ab", 0),
            settled_key(LowerId(7), "b", -5),
            settled_key(LowerId(8), "a", i64::MIN),
            settled_key(LowerId(256), "a", 0),
        ];
        for pair in keys.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
        assert!(
            run_key(WindowId(1), LowerId(999), "z", i64::MAX)
                < run_key(WindowId(2), LowerId(0), "a", i64::MIN)
        );
    }

    #[test]
    fn device_ranges_hold_exactly_its_readings() {
        for place in [Place::Settled, Place::Window(WindowId(3))] {
            let (start, end) = place.range(LowerId(7), None);
            assert!(place.key(LowerId(7), "zzz", i64::MAX) < end);
            assert!(place.key(LowerId(7), "a", i64::MIN) >= start);
            assert!(place.key(LowerId(8), "a", i64::MIN) >= end);
            assert!(place.key(LowerId(6), "zzz", i64::MAX) < start);
            assert!(after_sensor(place, LowerId(7), "a") > place.key(LowerId(7), "a", i64::MAX));
            assert!(
                after_sensor(place, LowerId(7), "a") <= place.key(LowerId(7), "a\u{1}", i64::MIN)
            );
            assert!(after_sensor(place, LowerId(7), "a") < place.key(LowerId(7), "ab", i64::MIN));
        }
    }

    #[test]
    fn keys_and_values_round_trip() {
        let key = run_key(WindowId(5), LowerId(42), "alt", -42);
        assert_eq!(
            Place::Window(WindowId(5)).parse(&key),
            Some((LowerId(42), "alt", -42))
        );
        assert_eq!(Place::Window(WindowId(6)).parse(&key), None);
        assert_eq!(window_of(&key), Some(WindowId(5)));
        assert_eq!(
            Place::Settled.parse(&settled_key(LowerId(9), "s", 3)),
            Some((LowerId(9), "s", 3))
        );
        assert_eq!(Place::Settled.parse(b"\x01abc"), None);
        assert_eq!(
            parse_catalog_device_key(&device_key(LowerId(9))),
            Some((LowerId(9), None))
        );
        assert_eq!(
            parse_catalog_device_key(&membership_key(LowerId(9), WindowId(4))),
            Some((LowerId(9), Some(WindowId(4))))
        );
        let (start, end) = device_catalog_range(LowerId(9));
        assert!(
            start <= membership_key(LowerId(9), WindowId(u64::MAX))
                && membership_key(LowerId(9), WindowId(u64::MAX)) < end
        );
        let meta = CatalogMeta {
            next_win: WindowId(3),
            next_lower_id: LowerId(4),
            last_aged_seq: SegmentSeq(5),
        };
        assert_eq!(CatalogMeta::decode(&meta.encode()), Some(meta));
        let record = DeviceRecord {
            registered_at_ms: 77,
            settled: true,
            trims: vec![WindowTrim {
                before_ns: -1,
                upto_win: WindowId(9),
            }],
            name: "car-1".into(),
        };
        assert_eq!(DeviceRecord::decode(&record.encode()), Some(record));
        assert_eq!(DeviceRecord::decode(&77u64.to_le_bytes()), None);
    }

    #[test]
    fn trims_merge_and_hide_what_they_should() {
        let mut trims = Vec::new();
        merge_trims(
            &mut trims,
            WindowTrim {
                before_ns: 10,
                upto_win: WindowId(3),
            },
        );
        merge_trims(
            &mut trims,
            WindowTrim {
                before_ns: 20,
                upto_win: WindowId(5),
            },
        );
        assert_eq!(trims.len(), 1, "the later, wider trim replaces the first");
        assert!(
            trimmed(&trims, WindowId(5), 19)
                && !trimmed(&trims, WindowId(6), 0)
                && !trimmed(&trims, WindowId(1), 20)
        );
        // A later trim with an earlier cutoff hides more windows but fewer readings: both stay.
        merge_trims(
            &mut trims,
            WindowTrim {
                before_ns: 15,
                upto_win: WindowId(8),
            },
        );
        assert_eq!(trims.len(), 2);
        assert!(
            trimmed(&trims, WindowId(5), 19)
                && trimmed(&trims, WindowId(8), 14)
                && !trimmed(&trims, WindowId(8), 15)
        );
        // One that hides less than what is there changes nothing.
        merge_trims(
            &mut trims,
            WindowTrim {
                before_ns: 1,
                upto_win: WindowId(2),
            },
        );
        assert_eq!(trims.len(), 2);
    }
}
