//! The decoders of bytes read from disk refuse what docs/FORMAT.md forbids. Each test was written
//! against the decoders of 8292681 and before, failed there (the decoders accepted empty, NUL-containing and
//! over-long ids, over-long values, and unbounded segment sizes), and passes since the decoders
//! share one id rule (`limits::id_problem`) and check every length against limits.rs.
//!
//! FORMAT.md: "Device and sensor ids are UTF-8, 1..=255 bytes, without NUL. Values are
//! 0..=256 KiB." and a segment is "between 1 MiB and 2 GiB", "a multiple of 4096".

use std::os::unix::fs::FileExt;

use roamkv_engine::keys::{self, DeviceRecord, Place};
use roamkv_engine::limits::{
    DEVICE_ID_BYTES_MAX, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX,
};
use roamkv_engine::log_record::{self as record, Decode};
use roamkv_engine::segment::{self, Segment};
use roamkv_engine::{Error, LowerId, SegmentSeq, WindowId};

const SEQ: u32 = 5;

fn put(device: &str, sensor: &str, value: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    let crc = record::encode_put_unsealed(&mut buf, device, sensor, 1, value);
    record::seal(&mut buf, SEQ, true, crc);
    buf
}

/// The decoder must call a sealed record with a forbidden field corrupt, not hand it on.
fn assert_rejected(bytes: &[u8], what: &str) {
    match record::decode(bytes, SEQ) {
        Decode::Corrupt(_) => {}
        other => panic!("{what}: decoded as {other:?}, FORMAT.md forbids it"),
    }
}

#[test]

fn record_with_an_empty_id_is_corrupt() {
    assert_rejected(&put("", "speed", b"v"), "PUT with empty device");
    assert_rejected(&put("car", "", b"v"), "PUT with empty sensor");
    let mut register = Vec::new();
    record::encode_register(&mut register, SEQ, "", 7);
    assert_rejected(&register, "REGISTER with empty device");
    let mut depart = Vec::new();
    record::encode_depart(&mut depart, SEQ, "");
    assert_rejected(&depart, "DEPART with empty device");
}

#[test]

fn record_with_a_nul_in_an_id_is_corrupt() {
    assert_rejected(&put("car\0x", "speed", b"v"), "PUT with NUL in device");
    assert_rejected(&put("car", "sp\0eed", b"v"), "PUT with NUL in sensor");
    let mut register = Vec::new();
    record::encode_register(&mut register, SEQ, "c\0r", 7);
    assert_rejected(&register, "REGISTER with NUL in device");
}

#[test]

fn record_with_an_over_long_id_is_corrupt() {
    let long_device = "d".repeat(DEVICE_ID_BYTES_MAX + 1);
    let long_sensor = "s".repeat(SENSOR_ID_BYTES_MAX + 1);
    assert_rejected(
        &put(&long_device, "speed", b"v"),
        "PUT with a 256-byte device",
    );
    assert_rejected(
        &put("car", &long_sensor, b"v"),
        "PUT with a 256-byte sensor",
    );
    let mut depart = Vec::new();
    record::encode_depart(&mut depart, SEQ, &long_device);
    assert_rejected(&depart, "DEPART with a 256-byte device");
}

#[test]

fn record_with_an_over_long_value_is_corrupt() {
    let value = vec![b'v'; VALUE_BYTES_MAX + 1];
    assert_rejected(
        &put("car", "speed", &value),
        "PUT with a value over 256 KiB",
    );
}

/// A segment file whose header (valid checksum) claims `header_bytes`, the file that long (sparse).
fn segment_claiming(header_bytes: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = segment::segment_path(dir.path(), SegmentSeq(u64::from(SEQ)));
    let mut header = vec![0u8; 36];
    header[0..8].copy_from_slice(segment::MAGIC);
    header[8..12].copy_from_slice(&segment::FORMAT_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&u64::from(SEQ).to_le_bytes());
    header[24..32].copy_from_slice(&header_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&header[..32]);
    header[32..36].copy_from_slice(&crc.to_le_bytes());
    let file = std::fs::File::create(&path).expect("create");
    file.set_len(header_bytes).expect("set_len (sparse)");
    file.write_all_at(&header, 0).expect("write header");
    (dir, path)
}

fn assert_open_refuses(header_bytes: u64, what: &str) {
    let (_dir, path) = segment_claiming(header_bytes);
    match Segment::open(
        &roamkv_engine::storage::PlainFiles::shared(),
        &path,
        SegmentSeq(u64::from(SEQ)),
    ) {
        Err(Error::Corrupt { offset: 24, .. }) => {}
        Err(e) => panic!("{what}: refused, but not as a bad size field: {e}"),
        Ok(s) => panic!(
            "{what}: opened a {} byte segment; FORMAT.md allows {SEGMENT_BYTES_MIN}..={SEGMENT_BYTES_MAX}, multiples of 4096",
            s.bytes
        ),
    }
}

#[test]

fn segment_over_the_size_limit_is_refused() {
    assert_open_refuses(SEGMENT_BYTES_MAX + 4096, "2 GiB + 4 KiB");
    assert_open_refuses((5 << 30) + 4096, "5 GiB");
}

#[test]

fn segment_below_the_minimum_or_unaligned_is_refused() {
    assert_open_refuses(8192, "8 KiB");
    assert_open_refuses(SEGMENT_BYTES_MIN + 100, "1 MiB + 100 bytes");
}

#[test]

fn reading_key_with_a_bad_sensor_is_refused() {
    assert_eq!(
        Place::Settled.parse(&keys::settled_key(LowerId(1), "", 0)),
        None
    );
    let long = "s".repeat(SENSOR_ID_BYTES_MAX + 1);
    assert_eq!(
        Place::Settled.parse(&keys::settled_key(LowerId(1), &long, 0)),
        None
    );
    assert_eq!(
        Place::Window(WindowId(2)).parse(&keys::run_key(WindowId(2), LowerId(1), &long, 0)),
        None
    );
}

#[test]

fn device_record_with_a_bad_name_is_refused() {
    let record = |name: &str| DeviceRecord {
        registered_at_ms: 1,
        settled: false,
        trims: Vec::new(),
        name: name.into(),
    };
    assert_eq!(DeviceRecord::decode(&record("car\0x").encode()), None);
    let long = "d".repeat(DEVICE_ID_BYTES_MAX + 1);
    assert_eq!(DeviceRecord::decode(&record(&long).encode()), None);
    assert!(DeviceRecord::decode(&record("car-1").encode()).is_some());
}

/// The holes above are in the decoders, not in what the engine writes: the write path already
/// refuses each of these ids and values (so this one runs, and passes).
#[test]
fn the_write_path_refuses_what_the_decoders_accept() {
    let long = "d".repeat(DEVICE_ID_BYTES_MAX + 1);
    let big = vec![0u8; VALUE_BYTES_MAX + 1];
    for (device, sensor, value) in [
        ("", "s", &b"v"[..]),
        ("c", "", &b"v"[..]),
        ("c\0x", "s", &b"v"[..]),
        (long.as_str(), "s", &b"v"[..]),
        ("c", "s", &big[..]),
    ] {
        let record = roamkv_engine::Record {
            device,
            sensor,
            ts_ns: 0,
            value,
        };
        assert!(
            roamkv_engine::validate_record(&record).is_err(),
            "validate_record accepted device {:?} sensor {:?} value {} bytes",
            device.get(..8),
            sensor,
            value.len()
        );
    }
}
