//! docs/FORMAT.md is the truth: its worked examples are parsed from the page and decoded with the
//! engine's public decoders, the encoders must produce the same bytes, its limits table must name
//! the values of `limits.rs`, and the keys it lists for each lower tier must be the only keys the
//! engine leaves there. Change the format and the page together, or this fails.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use roamkv_engine::record::{self, Body, Decode};
use roamkv_engine::segment::{self, Segment};
use roamkv_engine::{LowerTierKind, key, limits};

fn format_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/FORMAT.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `<!-- example: NAME -->` block of the page: NAME -> its bytes. Inside the fenced block
/// after the marker, each line is hex bytes separated by spaces; `#` starts a comment. Anything
/// else is an error, so a typo in the page fails here rather than decoding as something else.
fn examples(doc: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- example:")
            .and_then(|rest| rest.strip_suffix("-->"))
        else {
            continue;
        };
        let name = name.trim().to_string();
        let fence = lines.next().map(|(_, l)| l.trim());
        assert!(
            fence.is_some_and(|f| f.starts_with("```")),
            "FORMAT.md: example {name} is not followed by a fenced block"
        );
        let mut bytes = Vec::new();
        for (number, line) in lines.by_ref() {
            if line.trim().starts_with("```") {
                break;
            }
            let data = line.split('#').next().unwrap_or("");
            for token in data.split_whitespace() {
                let byte = (token.len() == 2)
                    .then(|| u8::from_str_radix(token, 16).ok())
                    .flatten()
                    .unwrap_or_else(|| {
                        panic!(
                            "FORMAT.md line {}: {token:?} in example {name} is not a hex byte",
                            number + 1
                        )
                    });
                bytes.push(byte);
            }
        }
        assert!(!bytes.is_empty(), "FORMAT.md: example {name} has no bytes");
        assert!(
            out.insert(name.clone(), bytes).is_none(),
            "FORMAT.md: two examples are named {name}"
        );
    }
    out
}

fn example(name: &str) -> Vec<u8> {
    examples(&format_md())
        .remove(name)
        .unwrap_or_else(|| panic!("FORMAT.md has no example named {name}"))
}

const TS_MS: i64 = 1_700_000_000_000;

#[test]
fn the_page_has_every_example_this_test_reads() {
    let names: Vec<String> = examples(&format_md()).into_keys().collect();
    assert_eq!(
        names,
        [
            "depart",
            "device-key",
            "device-value",
            "persist-key",
            "reading-key",
            "register-put-batch",
            "segment-header",
            "trim",
        ]
    );
}

#[test]
fn the_segment_header_example_is_what_the_engine_writes_and_reads() {
    let header = example("segment-header");
    assert_eq!(header.len(), 36, "magic..crc: 36 bytes");
    let dir = tempfile::tempdir().expect("tempdir");
    // Written by the engine: the same first 36 bytes, then zeros to the end of the header page.
    let (created, _) = Segment::create(
        &roamkv_engine::storage::PlainFiles::shared(),
        dir.path(),
        3,
        1 << 20,
        true,
    )
    .expect("create");
    let written = std::fs::read(&created.path).expect("read");
    assert_eq!(&written[..36], header.as_slice());
    assert!(
        written[36..limits::SEGMENT_HEADER_BYTES as usize]
            .iter()
            .all(|b| *b == 0)
    );
    drop(created);

    // Read by the engine: the page's bytes in a file of the page's name and size.
    let other = tempfile::tempdir().expect("tempdir");
    let path = segment::segment_path(other.path(), 3);
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some("00000000000000000003.seg")
    );
    let mut file = vec![0u8; 1 << 20];
    file[..36].copy_from_slice(&header);
    std::fs::write(&path, &file).expect("write");
    let opened = Segment::open(&roamkv_engine::storage::PlainFiles::shared(), &path, 3)
        .expect("the page's header opens");
    assert_eq!((opened.seq, opened.bytes), (3, 1 << 20));
    assert_eq!(&header[..8], segment::MAGIC);
}

#[test]
fn the_record_examples_decode_to_what_the_page_says() {
    let batch = example("register-put-batch");
    let Decode::Record(register) = record::decode(&batch, 3) else {
        panic!(
            "REGISTER example does not decode: {:?}",
            record::decode(&batch, 3)
        );
    };
    assert_eq!(
        (register.body, register.batch_end, register.len),
        (
            Body::Register {
                device: "car-1",
                registered_at_ms: TS_MS as u64
            },
            false,
            31
        )
    );
    let Decode::Record(put) = record::decode(&batch[register.len..], 3) else {
        panic!("PUT example does not decode");
    };
    assert_eq!(
        (put.body, put.batch_end, put.len),
        (
            Body::Put {
                device: "car-1",
                sensor: "speed",
                ts_ms: TS_MS,
                value: b"88.5"
            },
            true,
            46
        )
    );
    assert_eq!(register.len + put.len, batch.len());

    let depart = example("depart");
    let Decode::Record(d) = record::decode(&depart, 3) else {
        panic!("DEPART example does not decode");
    };
    assert_eq!(
        (d.body, d.batch_end, d.len),
        (Body::Depart { device: "car-1" }, true, depart.len())
    );
    // In another segment (another sequence) the same bytes are "end of data", as the page says.
    assert_eq!(record::decode(&depart, 4), Decode::End);

    let trim = example("trim");
    let Decode::Record(t) = record::decode(&trim, 3) else {
        panic!(
            "TRIM example does not decode: {:?}",
            record::decode(&trim, 3)
        );
    };
    assert_eq!(
        (t.body, t.batch_end, t.len),
        (
            Body::Trim {
                device: "car-1",
                before_ms: TS_MS
            },
            true,
            trim.len()
        )
    );
    assert_eq!(record::trim_len("car-1"), trim.len());
}

#[test]
fn the_encoders_write_the_record_examples_byte_for_byte() {
    let mut batch = Vec::new();
    record::encode_register(&mut batch, 3, "car-1", TS_MS as u64);
    let start = batch.len();
    let crc = record::encode_put_unsealed(&mut batch, "car-1", "speed", TS_MS, b"88.5");
    record::seal(&mut batch[start..], 3, true, crc);
    assert_eq!(batch, example("register-put-batch"));
    assert_eq!(
        batch.len() - start,
        record::put_len("car-1", "speed", b"88.5")
    );

    let mut depart = Vec::new();
    record::encode_depart(&mut depart, 3, "car-1");
    assert_eq!(depart, example("depart"));

    let mut trim = Vec::new();
    record::encode_trim(&mut trim, 3, "car-1", TS_MS);
    assert_eq!(trim, example("trim"));
}

#[test]
fn a_segment_holding_the_examples_scans_as_two_complete_batches() {
    let mut data = vec![0u8; limits::SEGMENT_HEADER_BYTES as usize];
    data.extend(example("register-put-batch"));
    data.extend(example("depart"));
    let end = data.len() as u64;
    data.resize(data.len() + 4096, 0);
    let mut devices = Vec::new();
    let scanned = segment::scan(&data, 3, |_, r| {
        devices.push(r.body.device().to_string());
        Ok(())
    })
    .expect("scan");
    assert_eq!(devices, ["car-1", "car-1", "car-1"]);
    assert_eq!(scanned.data_end, end);
    assert_eq!(scanned.damage, None);
}

#[test]
fn the_key_examples_decode_to_what_the_page_says() {
    let reading = example("reading-key");
    assert_eq!(key::parse_reading_key(&reading), Some((7, "speed", TS_MS)));
    assert_eq!(key::reading_key(7, "speed", TS_MS), reading);

    let device = example("device-key");
    assert_eq!(key::parse_device_key(&device), Some(7));
    assert_eq!(key::device_key(7), device);

    let value = example("device-value");
    assert_eq!(
        key::decode_device_value(&value),
        Some((TS_MS as u64, "car-1"))
    );
    assert_eq!(key::encode_device_value(TS_MS as u64, "car-1"), value);

    // The persist key is neither a reading nor a device key, and sorts after all of them.
    let persist = example("persist-key");
    assert_eq!(key::parse_reading_key(&persist), None);
    assert_eq!(key::parse_device_key(&persist), None);
    assert!(persist > key::device_key(u64::MAX));
    assert!(persist > key::reading_key(u64::MAX, "zzz", i64::MAX));
}

/// The limits table: `| \`NAME\` | shown | bytes | where |` rows.
fn documented_limits(doc: &str) -> BTreeMap<String, u64> {
    let section = doc
        .split("\n## Limits")
        .nth(1)
        .expect("FORMAT.md has a Limits section");
    section
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let bytes = cells.get(3)?.parse().ok()?;
            Some((name.to_string(), bytes))
        })
        .collect()
}

#[test]
fn the_limits_table_names_the_values_of_limits_rs() {
    let documented = documented_limits(&format_md());
    let actual: BTreeMap<String, u64> = [
        ("DEVICE_ID_BYTES_MAX", limits::DEVICE_ID_BYTES_MAX as u64),
        ("SENSOR_ID_BYTES_MAX", limits::SENSOR_ID_BYTES_MAX as u64),
        ("VALUE_BYTES_MAX", limits::VALUE_BYTES_MAX as u64),
        ("BATCH_RECORDS_MAX", limits::BATCH_RECORDS_MAX as u64),
        ("BATCH_BYTES_MAX", limits::BATCH_BYTES_MAX as u64),
        ("SEGMENT_BYTES_MIN", limits::SEGMENT_BYTES_MIN),
        ("SEGMENT_BYTES_MAX", limits::SEGMENT_BYTES_MAX),
        ("SEGMENT_BYTES_DEFAULT", limits::SEGMENT_BYTES_DEFAULT),
        ("SEGMENT_HEADER_BYTES", limits::SEGMENT_HEADER_BYTES),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect();
    assert_eq!(documented, actual);
}

#[test]
fn the_writer_enforces_the_documented_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let longest = "d".repeat(limits::DEVICE_ID_BYTES_MAX);
    let too_long = "d".repeat(limits::DEVICE_ID_BYTES_MAX + 1);
    let largest = vec![7u8; limits::VALUE_BYTES_MAX];
    assert!(engine.put(&longest, "s", 1, b"v").is_ok());
    assert!(engine.put("dev", "s", 1, &largest).is_ok());
    for (device, sensor, value) in [
        (too_long.as_str(), "s", &b"v"[..]),
        ("", "s", &b"v"[..]),
        ("a\0b", "s", &b"v"[..]),
        ("dev", "", &b"v"[..]),
        ("dev", "s", &vec![7u8; limits::VALUE_BYTES_MAX + 1][..]),
    ] {
        assert!(
            engine.put(device, sensor, 2, value).is_err(),
            "accepted device {:?} sensor {sensor:?} value of {} bytes",
            device.get(..8),
            value.len()
        );
    }
    for segment_bytes in [
        limits::SEGMENT_BYTES_MIN - 4096,
        limits::SEGMENT_BYTES_MAX + 4096,
        limits::SEGMENT_BYTES_MIN + 512,
    ] {
        let other = tempfile::tempdir().expect("tempdir");
        let opts = roamkv_engine::Options {
            segment_bytes,
            ..options(&clock)
        };
        assert!(
            roamkv_engine::Engine::open(other.path(), opts).is_err(),
            "segment_bytes {segment_bytes} was accepted"
        );
    }
}

/// Settles one device into the given lower tier (a migration, then `persist` on close) and
/// returns the lower tier's directory.
fn settled_lower_tier(dir: &Path, lower: LowerTierKind) -> PathBuf {
    let clock = clock();
    let engine = open_with(dir, &clock, lower);
    for ts in 0..50 {
        engine
            .put("car-1", "speed", TS_MS + ts, b"88.5")
            .expect("put");
    }
    clock.advance_ms(MANAGEMENT_MS + 1);
    engine.maintain().expect("maintain");
    assert_eq!(engine.stats().lower.devices, 1, "the device did not settle");
    engine.close().expect("close");
    dir.join("lower")
}

/// What FORMAT.md says a lower-tier key is: a reading, a device record, or (LevelDB) the
/// persist key, byte for byte as the page writes it.
fn documented_key_kind(k: &[u8], persist_key: &[u8]) -> Option<&'static str> {
    if key::parse_reading_key(k).is_some() {
        Some("reading")
    } else if key::parse_device_key(k).is_some() {
        Some("device")
    } else if k == persist_key {
        Some("persist")
    } else {
        None
    }
}

#[cfg(feature = "leveldb")]
#[test]
fn the_leveldb_tier_holds_only_the_documented_keys_including_the_persist_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lower = settled_lower_tier(dir.path(), LowerTierKind::LevelDb);
    let persist_key = example("persist-key");
    let db = roamkv_leveldb::Db::open(&lower.join("leveldb"), &roamkv_leveldb::Options::default())
        .expect("open the LevelDB tier");
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut it = db.iter();
    it.seek_to_first();
    while it.valid() {
        let kind = documented_key_kind(it.key(), &persist_key)
            .unwrap_or_else(|| panic!("undocumented key {:?} in the LevelDB tier", it.key()));
        if kind == "persist" {
            assert!(
                it.value().is_empty(),
                "the persist key's value is not empty"
            );
        }
        *kinds.entry(kind).or_default() += 1;
        it.next();
    }
    it.status().expect("iterate");
    assert_eq!(
        kinds,
        BTreeMap::from([("device", 1), ("persist", 1), ("reading", 50)])
    );
}

#[test]
fn the_rocksdb_tier_holds_only_readings_and_device_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lower = settled_lower_tier(dir.path(), LowerTierKind::RocksDb);
    let persist_key = example("persist-key");
    let db =
        rocksdb::DB::open_for_read_only(&rocksdb::Options::default(), lower.join("rocksdb"), false)
            .expect("open the RocksDB tier");
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for item in db.iterator(rocksdb::IteratorMode::Start) {
        let (k, _) = item.expect("iterate");
        let kind = documented_key_kind(&k, &persist_key)
            .unwrap_or_else(|| panic!("undocumented key {k:?} in the RocksDB tier"));
        *kinds.entry(kind).or_default() += 1;
    }
    assert_eq!(kinds, BTreeMap::from([("device", 1), ("reading", 50)]));
}
