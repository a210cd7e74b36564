//! Bad input gets a typed error and changes nothing; the data directory is guarded.

mod common;

use common::*;
use roamkv_engine::limits::{
    BATCH_RECORDS_MAX, DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX, VALUE_BYTES_MAX,
};
use roamkv_engine::{Engine, Error, Options, Record};

#[test]
fn bad_records_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    engine.put("car", "speed", 1, b"ok").expect("put");
    let before = engine.stats();

    let long_device = "d".repeat(DEVICE_ID_BYTES_MAX + 1);
    let long_sensor = "s".repeat(SENSOR_ID_BYTES_MAX + 1);
    let big_value = vec![0u8; VALUE_BYTES_MAX + 1];
    let cases: Vec<(&str, &str, &[u8])> = vec![
        ("", "speed", b"v"),
        ("car", "", b"v"),
        (&long_device, "speed", b"v"),
        ("car", &long_sensor, b"v"),
        ("ca\0r", "speed", b"v"),
        ("car", "sp\0eed", b"v"),
        ("car", "speed", &big_value),
    ];
    for (device, sensor, value) in cases {
        // The bad record rides in a batch with a good one: the whole batch is refused.
        let batch = [
            Record {
                device: "good",
                sensor: "x",
                ts_ns: 5,
                value: b"v",
            },
            Record {
                device,
                sensor,
                ts_ns: 2,
                value,
            },
        ];
        let err = engine.put_batch(&batch).expect_err("must be refused");
        assert!(err.is_invalid_input(), "{err}");
    }
    let ok: Vec<Record<'_>> = (0..=BATCH_RECORDS_MAX)
        .map(|_| Record {
            device: "car",
            sensor: "s",
            ts_ns: 3,
            value: b"",
        })
        .collect();
    assert!(matches!(
        engine.put_batch(&ok),
        Err(Error::BatchTooLarge { .. })
    ));

    assert!(
        engine
            .get("", "speed", 1)
            .expect_err("empty id")
            .is_invalid_input()
    );
    assert!(engine.depart("").expect_err("empty id").is_invalid_input());

    let after = engine.stats();
    assert_eq!(after.user_records, before.user_records);
    assert_eq!(after.log_bytes_written, before.log_bytes_written);
    assert_eq!(after.upper.devices, 1);
    assert_eq!(engine.get("good", "x", 5).expect("get"), None);
}

#[test]
fn a_batch_larger_than_a_segment_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock); // 1 MiB segments
    let value = vec![7u8; 200 * 1024];
    let batch: Vec<Record<'_>> = (0..6)
        .map(|ts| Record {
            device: "car",
            sensor: "cam",
            ts_ns: ts,
            value: &value,
        })
        .collect();
    assert!(matches!(
        engine.put_batch(&batch),
        Err(Error::BatchTooLarge { .. })
    ));
    engine.put_batch(&batch[..4]).expect("a batch that fits");
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    match Engine::open(dir.path(), options(&clock)) {
        Err(Error::Locked { path }) => assert_eq!(path, dir.path()),
        other => panic!("expected Locked, got {:?}", other.map(|_| ())),
    }
    drop(engine);
    open(dir.path(), &clock);
}

#[test]
fn a_directory_that_is_not_roamkvs_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("precious.txt"), b"do not touch").expect("write");
    let clock = clock();
    match Engine::open(dir.path(), options(&clock)) {
        Err(Error::NotADataDirectory { .. }) => {}
        other => panic!("expected NotADataDirectory, got {:?}", other.map(|_| ())),
    }
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("precious.txt")]);

    std::fs::write(dir.path().join("ROAMKV"), b"something else\n").expect("write");
    assert!(matches!(
        Engine::open(dir.path(), options(&clock)),
        Err(Error::NotADataDirectory { .. })
    ));
}

#[test]
fn invalid_options_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    for options in [
        Options {
            segment_bytes: 4096,
            ..options(&clock)
        },
        Options {
            segment_bytes: (1 << 20) + 1,
            ..options(&clock)
        },
        Options {
            index_bytes_max: 10,
            ..options(&clock)
        },
    ] {
        assert!(matches!(
            Engine::open(dir.path(), options),
            Err(Error::InvalidOptions(_))
        ));
    }
}
