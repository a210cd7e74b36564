//! Keys of the lower tier (docs/FORMAT.md, "Lower-tier keys"): byte order = logical order.
//!
//! ```text
//! reading:  0x01 device 0x00 sensor 0x00 ts(8 bytes, big-endian, sign bit flipped)
//! device:   0x02 device                  -> mapping-table record of a settled device
//! ```
//! Ids contain no NUL byte (validated on input), so 0x00 terminates a component and a shorter
//! id sorts before a longer one with the same prefix, as strings do.

pub const READING_TAG: u8 = 0x01;
pub const DEVICE_TAG: u8 = 0x02;

/// Timestamps are i64; flipping the sign bit makes big-endian byte order match numeric order.
pub fn encode_ts(ts_ms: i64) -> [u8; 8] {
    ((ts_ms as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn decode_ts(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

pub fn reading_key(device: &str, sensor: &str, ts_ms: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + sensor.len() + 11);
    key.push(READING_TAG);
    key.extend_from_slice(device.as_bytes());
    key.push(0);
    key.extend_from_slice(sensor.as_bytes());
    key.push(0);
    key.extend_from_slice(&encode_ts(ts_ms));
    key
}

/// [start, end) covering every reading of `device` (of `sensor`, if given) with from <= ts < to.
pub fn reading_range(device: &str, sensor: Option<&str>, from_ms: i64, to_ms: i64) -> (Vec<u8>, Vec<u8>) {
    match sensor {
        Some(sensor) => (reading_key(device, sensor, from_ms), reading_key(device, sensor, to_ms)),
        None => device_reading_range(device),
    }
}

/// [start, end) covering every reading of `device`: the prefix `0x01 device 0x00` up to `... 0x01`.
pub fn device_reading_range(device: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = Vec::with_capacity(device.len() + 2);
    start.push(READING_TAG);
    start.extend_from_slice(device.as_bytes());
    start.push(0);
    let mut end = start.clone();
    *end.last_mut().expect("non-empty") = 1;
    (start, end)
}

pub fn device_key(device: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + 1);
    key.push(DEVICE_TAG);
    key.extend_from_slice(device.as_bytes());
    key
}

/// Splits a reading key into (device, sensor, ts). None if the key is not a well-formed reading key.
pub fn parse_reading_key(key: &[u8]) -> Option<(&str, &str, i64)> {
    let rest = key.strip_prefix(&[READING_TAG])?;
    let device_end = rest.iter().position(|&b| b == 0)?;
    let device = std::str::from_utf8(&rest[..device_end]).ok()?;
    let rest = &rest[device_end + 1..];
    let sensor_end = rest.iter().position(|&b| b == 0)?;
    let sensor = std::str::from_utf8(&rest[..sensor_end]).ok()?;
    let ts: [u8; 8] = rest[sensor_end + 1..].try_into().ok()?;
    Some((device, sensor, decode_ts(ts)))
}

/// Value of a device key: registered_at_ms (u64 LE). Versioned by its length.
pub fn encode_device_value(registered_at_ms: u64) -> Vec<u8> {
    registered_at_ms.to_le_bytes().to_vec()
}

pub fn decode_device_value(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_order_is_logical_order() {
        let keys = [
            reading_key("car", "a", i64::MIN),
            reading_key("car", "a", -1),
            reading_key("car", "a", 0),
            reading_key("car", "a", 1_700_000_000_000),
            reading_key("car", "ab", 0),
            reading_key("car", "b", -5),
            reading_key("car-1", "a", 0),
            reading_key("cart", "a", 0),
        ];
        for pair in keys.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn device_range_holds_exactly_its_readings() {
        let (start, end) = device_reading_range("car");
        assert!(reading_key("car", "x", i64::MAX) < end);
        assert!(reading_key("car", "", i64::MIN) >= start);
        assert!(reading_key("car-1", "x", 0) >= end);
        assert!(reading_key("ca", "x", 0) < start);
    }

    #[test]
    fn reading_keys_round_trip() {
        let key = reading_key("drone-7", "alt", -42);
        assert_eq!(parse_reading_key(&key), Some(("drone-7", "alt", -42)));
        assert_eq!(parse_reading_key(b"\x01abc"), None);
        assert_eq!(decode_device_value(&encode_device_value(77)), Some(77));
    }
}
