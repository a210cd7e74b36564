//! The seeds of the fuzz target `edgex_stored` (crates/wire/fuzz/corpus, written by
//! scripts/fuzz-seeds.py) are what they say: each decodes as the form it is named for, so the
//! fuzzer starts from inputs that reach past the first byte.

use roamkv_wire::edgex::event_index::IndexEntry;
use roamkv_wire::edgex::readable::readable;

fn seed(name: &str) -> (i64, Vec<u8>) {
    let path = format!(
        "{}/fuzz/corpus/edgex_stored/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (ts, value) = bytes.split_at(8);
    (
        i64::from_le_bytes(ts.try_into().expect("8 bytes")),
        value.to_vec(),
    )
}

#[test]
fn every_seed_decodes_as_its_form() {
    let (ts, value) = seed("compact-reading");
    let reading = readable(&value, ts).expect("a compact reading");
    assert_eq!(reading.value.as_deref(), Some("2.153000e+01"));
    assert!(!reading.map_form);
    for (name, device, readings) in [
        ("index-entry", "gw-device-0042", 3),
        ("index-entry-offsets", "car-1", 2),
        ("index-entry-map", "car-1", 1),
    ] {
        let (ts, value) = seed(name);
        let entry = IndexEntry::decode("e", ts, &value).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (entry.device.as_str(), entry.readings.len()),
            (device, readings),
            "{name}"
        );
    }
    let (ts, value) = seed("index-entry-offsets");
    let entry = IndexEntry::decode("e", ts, &value).expect("decodes");
    assert_eq!(entry.readings[1].1, ts - 1, "offset -1");
}
