//! The lower-tier key and value decoders on arbitrary bytes: must never panic, and whatever
//! decodes must re-encode to the same bytes (one encoding per key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roamkv_engine::keys::{self, CatalogMeta, DeviceRecord, Place};

fuzz_target!(|data: &[u8]| {
    if let Some((lower_id, sensor, ts)) = Place::Settled.parse(data) {
        assert_eq!(keys::settled_key(lower_id, sensor, ts), data);
    }
    if let Some(win) = keys::window_of(data)
        && let Some((lower_id, sensor, ts)) = Place::Window(win).parse(data)
    {
        assert_eq!(keys::run_key(win, lower_id, sensor, ts), data);
    }
    match keys::parse_catalog_device_key(data) {
        Some((lower_id, None)) => assert_eq!(keys::device_key(lower_id), data),
        Some((lower_id, Some(win))) => assert_eq!(keys::membership_key(lower_id, win), data),
        None => {}
    }
    if let Some(record) = DeviceRecord::decode(data) {
        assert_eq!(record.encode(), data);
    }
    if let Some(meta) = CatalogMeta::decode(data) {
        assert_eq!(meta.encode(), data);
    }
    if let Ok(ts) = <[u8; 8]>::try_from(data) {
        assert_eq!(keys::encode_ts(keys::decode_ts(ts)), ts);
    }
});
