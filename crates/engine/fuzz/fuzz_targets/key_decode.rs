//! The lower-tier key and value decoders on arbitrary bytes: must never panic, and whatever
//! decodes must re-encode to the same bytes (one encoding per key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roamkv_engine::key;

fuzz_target!(|data: &[u8]| {
    if let Some((id, sensor, ts)) = key::parse_reading_key(data) {
        assert_eq!(key::reading_key(id, sensor, ts), data);
    }
    if let Some(id) = key::parse_device_key(data) {
        assert_eq!(key::device_key(id), data);
    }
    if let Some((registered_at_ms, name)) = key::decode_device_value(data) {
        assert_eq!(key::encode_device_value(registered_at_ms, name), data);
    }
    if let Ok(ts) = <[u8; 8]>::try_from(data) {
        assert_eq!(key::encode_ts(key::decode_ts(ts)), ts);
    }
});
