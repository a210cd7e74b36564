//! Keys of the lower tier (docs/FORMAT.md, "Lower-tier keys").
//!
//! ```text
//! reading:  0x01 lower_id(8, BE) sensor 0x00 ts(8, BE, sign bit flipped)  -> value
//! device:   0x02 lower_id(8, BE)                                          -> registered_at_ms(8, LE) device
//! ```
//! A device gets its `lower_id` when it settles, from a counter that only grows. So every
//! migration run's keys (readings and device records alike) lie above every key already in the
//! LSM: RocksDB ingests the run straight into its bottom level and never compacts it again
//! (LevelDB moves it down without rewriting). Keying by device *name* would interleave every run
//! with all earlier ones and make the LSM rewrite settled data on each migration.
//!
//! Within a device, byte order is logical order: sensors by name (no NUL in ids, so 0x00 ends
//! a name and a shorter name sorts first), then timestamps.

pub const READING_TAG: u8 = 0x01;
pub const DEVICE_TAG: u8 = 0x02;

/// Timestamps are i64; flipping the sign bit makes big-endian byte order match numeric order.
pub fn encode_ts(ts_ms: i64) -> [u8; 8] {
    ((ts_ms as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn decode_ts(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

pub fn reading_key(lower_id: u64, sensor: &str, ts_ms: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(sensor.len() + 18);
    key.push(READING_TAG);
    key.extend_from_slice(&lower_id.to_be_bytes());
    key.extend_from_slice(sensor.as_bytes());
    key.push(0);
    key.extend_from_slice(&encode_ts(ts_ms));
    key
}

/// [start, end) covering every reading of the device (of `sensor`, if given) with from <= ts < to.
pub fn reading_range(
    lower_id: u64,
    sensor: Option<&str>,
    from_ms: i64,
    to_ms: i64,
) -> (Vec<u8>, Vec<u8>) {
    match sensor {
        Some(sensor) => (
            reading_key(lower_id, sensor, from_ms),
            reading_key(lower_id, sensor, to_ms),
        ),
        None => device_reading_range(lower_id),
    }
}

/// [start, end) covering every reading of a device: `0x01 id` up to `0x01 id+1`.
pub fn device_reading_range(lower_id: u64) -> (Vec<u8>, Vec<u8>) {
    let prefix = |id: u64| {
        let mut key = Vec::with_capacity(9);
        key.push(READING_TAG);
        key.extend_from_slice(&id.to_be_bytes());
        key
    };
    (prefix(lower_id), prefix(lower_id + 1))
}

pub fn device_key(lower_id: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(DEVICE_TAG);
    key.extend_from_slice(&lower_id.to_be_bytes());
    key
}

/// The lower id in a device key.
pub fn parse_device_key(key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(&[DEVICE_TAG])?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

/// Splits a reading key into (lower_id, sensor, ts). None if it is not a well-formed reading key.
pub fn parse_reading_key(key: &[u8]) -> Option<(u64, &str, i64)> {
    let rest = key.strip_prefix(&[READING_TAG])?;
    let lower_id = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let rest = &rest[8..];
    let sensor_end = rest.iter().position(|&b| b == 0)?;
    let sensor = std::str::from_utf8(&rest[..sensor_end])
        .ok()
        .filter(|s| crate::limits::id_problem(s, crate::limits::SENSOR_ID_BYTES_MAX).is_none())?;
    let ts: [u8; 8] = rest[sensor_end + 1..].try_into().ok()?;
    Some((lower_id, sensor, decode_ts(ts)))
}

/// Value of a device key: registered_at_ms (u64 LE), then the device name.
pub fn encode_device_value(registered_at_ms: u64, device: &str) -> Vec<u8> {
    let mut value = Vec::with_capacity(8 + device.len());
    value.extend_from_slice(&registered_at_ms.to_le_bytes());
    value.extend_from_slice(device.as_bytes());
    value
}

pub fn decode_device_value(value: &[u8]) -> Option<(u64, &str)> {
    let registered_at_ms = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    let name = std::str::from_utf8(value.get(8..)?)
        .ok()
        .filter(|n| crate::limits::id_problem(n, crate::limits::DEVICE_ID_BYTES_MAX).is_none())?;
    Some((registered_at_ms, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_logical_order_within_a_device_and_by_id_across() {
        let keys = [
            reading_key(7, "a", i64::MIN),
            reading_key(7, "a", -1),
            reading_key(7, "a", 0),
            reading_key(7, "a", 1_700_000_000_000),
            reading_key(7, "ab", 0),
            reading_key(7, "b", -5),
            reading_key(8, "a", i64::MIN),
            reading_key(256, "a", 0),
            device_key(1),
            device_key(300),
        ];
        for pair in keys.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn device_range_holds_exactly_its_readings() {
        let (start, end) = device_reading_range(7);
        assert!(reading_key(7, "zzz", i64::MAX) < end);
        assert!(reading_key(7, "", i64::MIN) >= start);
        assert!(reading_key(8, "", i64::MIN) >= end);
        assert!(reading_key(6, "zzz", i64::MAX) < start);
    }

    #[test]
    fn keys_and_values_round_trip() {
        let key = reading_key(42, "alt", -42);
        assert_eq!(parse_reading_key(&key), Some((42, "alt", -42)));
        assert_eq!(parse_reading_key(b"\x01abc"), None);
        assert_eq!(parse_device_key(&device_key(9)), Some(9));
        assert_eq!(
            decode_device_value(&encode_device_value(77, "car-1")),
            Some((77, "car-1"))
        );
        assert_eq!(decode_device_value(&77u64.to_le_bytes()), None);
    }
}
