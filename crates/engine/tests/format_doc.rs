//! docs/FORMAT.md is the truth: its worked examples are parsed from the page and decoded with the
//! engine's public decoders, the encoders must produce the same bytes, its limits table must name
//! the values of `limits.rs`, and the keys it lists for each lower tier must be the only keys the
//! engine leaves there. Change the format and the page together, or this fails.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::format_page::{example, examples, format_md};
use common::*;
use roamkv_engine::keys::{self, CatalogMeta, DeviceRecord, Place};
use roamkv_engine::log_record::{self as record, Body, Decode};
use roamkv_engine::segment::{self, Segment};
use roamkv_engine::{LowerId, LowerTierKind, SegmentSeq, WindowId, limits};

/// The examples' engine-clock time (ms) and reading time (ns).
const TS_MS: i64 = 1_700_000_000_000;
const TS_NS: i64 = 1_700_000_000_000_000_000;

#[test]
fn the_page_has_every_example_this_test_reads() {
    let names: Vec<String> = examples(&format_md()).into_keys().collect();
    assert_eq!(
        names,
        [
            "catalog-meta",
            "catalog-meta-key",
            "depart",
            "device-key",
            "device-record",
            "membership-key",
            "membership-value",
            "reading-block",
            "register-put-batch",
            "register-puts-batch",
            "run-key",
            "segment-end",
            "segment-header",
            "settled-key",
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
        SegmentSeq(3),
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
    let path = segment::segment_path(other.path(), SegmentSeq(3));
    assert_eq!(
        path.file_name().and_then(|n| n.to_str()),
        Some("00000000000000000003.seg")
    );
    let mut file = vec![0u8; 1 << 20];
    file[..36].copy_from_slice(&header);
    std::fs::write(&path, &file).expect("write");
    let opened = Segment::open(
        &roamkv_engine::storage::PlainFiles::shared(),
        &path,
        SegmentSeq(3),
    )
    .expect("the page's header opens");
    assert_eq!((opened.seq, opened.bytes), (SegmentSeq(3), 1 << 20));
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
                ts_ns: TS_NS,
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
                before_ns: TS_NS
            },
            true,
            trim.len()
        )
    );
    assert_eq!(record::trim_len("car-1"), trim.len());

    let end = example("segment-end");
    let Decode::Record(e) = record::decode(&end, 3) else {
        panic!("SEGMENT_END example does not decode");
    };
    assert_eq!(
        (e.body, e.batch_end, e.len),
        (
            Body::SegmentEnd {
                next_seq: SegmentSeq(4),
                sealed_at_ms: TS_MS as u64
            },
            true,
            record::SEGMENT_END_BYTES
        )
    );
}

#[test]
fn the_puts_example_decodes_to_what_the_page_says_and_is_what_the_encoder_writes() {
    let batch = example("register-puts-batch");
    let three: [(&str, i64, &[u8]); 3] = [
        ("speed", TS_NS, b"88.5"),
        ("rpm", TS_NS, b"3000"),
        ("speed", TS_NS + 1_000_000_000, b"89.0"),
    ];
    // The REGISTER in front of it is the PUT example's (31 bytes).
    let Decode::Record(puts) = record::decode(&batch[31..], 3) else {
        panic!("PUTS example does not decode");
    };
    let Body::Puts { device, readings } = puts.body else {
        panic!("PUTS example decodes as {:?}", puts.body);
    };
    assert_eq!((device, puts.batch_end, puts.len), ("car-1", true, 71));
    assert_eq!(31 + puts.len, batch.len());
    assert!(
        readings
            .iter()
            .map(|r| (r.sensor, r.ts_ns, r.value))
            .eq(three)
    );
    let mut encoded = Vec::new();
    record::encode_register(&mut encoded, 3, "car-1", TS_MS as u64);
    let crc = record::encode_puts_unsealed(&mut encoded, "car-1", three.into_iter());
    record::seal(&mut encoded[31..], 3, true, crc);
    assert_eq!(encoded, batch);
}

#[test]
fn the_encoders_write_the_record_examples_byte_for_byte() {
    let mut batch = Vec::new();
    record::encode_register(&mut batch, 3, "car-1", TS_MS as u64);
    let start = batch.len();
    let crc = record::encode_put_unsealed(&mut batch, "car-1", "speed", TS_NS, b"88.5");
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
    record::encode_trim(&mut trim, 3, "car-1", TS_NS);
    assert_eq!(trim, example("trim"));

    let mut end = Vec::new();
    record::encode_segment_end(&mut end, 3, SegmentSeq(4), TS_MS as u64);
    assert_eq!(end, example("segment-end"));
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
    let run = example("run-key");
    assert_eq!(
        Place::Window(WindowId(5)).parse(&run),
        Some((LowerId(7), "speed", TS_NS))
    );
    assert_eq!(keys::run_key(WindowId(5), LowerId(7), "speed", TS_NS), run);
    assert_eq!(keys::window_of(&run), Some(WindowId(5)));

    let settled = example("settled-key");
    assert_eq!(
        Place::Settled.parse(&settled),
        Some((LowerId(7), "speed", TS_NS))
    );
    assert_eq!(keys::settled_key(LowerId(7), "speed", TS_NS), settled);

    assert_eq!(example("catalog-meta-key"), keys::meta_key());
    let meta = CatalogMeta {
        next_win: WindowId(6),
        next_lower_id: LowerId(8),
        last_aged_seq: SegmentSeq(2),
    };
    assert_eq!(CatalogMeta::decode(&example("catalog-meta")), Some(meta));
    assert_eq!(meta.encode(), example("catalog-meta"));

    let device = example("device-key");
    assert_eq!(
        keys::parse_catalog_device_key(&device),
        Some((LowerId(7), None))
    );
    assert_eq!(keys::device_key(LowerId(7)), device);
    let record = DeviceRecord {
        registered_at_ms: TS_MS as u64,
        settled: false,
        trims: Vec::new(),
        name: "car-1".into(),
    };
    assert_eq!(
        DeviceRecord::decode(&example("device-record")),
        Some(record.clone())
    );
    assert_eq!(record.encode(), example("device-record"));

    let membership = example("membership-key");
    assert_eq!(
        keys::parse_catalog_device_key(&membership),
        Some((LowerId(7), Some(WindowId(5))))
    );
    assert_eq!(keys::membership_key(LowerId(7), WindowId(5)), membership);
    assert_eq!(example("membership-value"), 1234u64.to_le_bytes());
    let (start, end) = keys::device_catalog_range(LowerId(7));
    assert!(start <= membership && membership < end && start <= device && device < end);
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
        ("WINDOW_BYTES_MAX", limits::WINDOW_BYTES_MAX),
        (
            "WINDOWS_PER_DEVICE_MAX",
            limits::WINDOWS_PER_DEVICE_MAX as u64,
        ),
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

/// A directory of format 1 is refused, naming both versions, and left untouched.
#[test]
fn a_format_1_directory_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let identity = "roamkv data directory\nformat 1\nlower rocksdb\n";
    std::fs::write(dir.path().join("ROAMKV"), identity).expect("write");
    std::fs::create_dir_all(dir.path().join("log")).expect("mkdir");
    let clock = clock();
    let error = match roamkv_engine::Engine::open(dir.path(), options(&clock)) {
        Ok(_) => panic!("a format 1 directory was opened"),
        Err(e) => e,
    };
    let text = error.to_string();
    assert!(
        matches!(
            error,
            roamkv_engine::Error::FormatVersion {
                found: 1,
                expected: 3,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        text.contains("format 1") && text.contains("format 3"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ROAMKV")).expect("read"),
        identity,
        "left as it was"
    );
    assert!(roamkv_engine::check(dir.path()).is_err());
}

/// Moves one device's readings into a window of the given lower tier (closes the engine) and
/// returns the lower tier's directory.
fn settled_lower_tier(dir: &Path, lower: LowerTierKind) -> PathBuf {
    let clock = clock();
    let engine = open_with(dir, &clock, lower);
    for ts in 0..50 {
        engine
            .put("car-1", "speed", TS_NS + ts, b"88.5")
            .expect("put");
    }
    settle(&engine, &clock);
    assert_eq!(engine.stats().lower.devices, 1, "the device did not settle");
    assert_eq!(engine.stats().windows, 1);
    engine.close().expect("close");
    dir.join("lower")
}

/// The block example decodes to what the page says, and the encoder writes it byte for byte.
#[test]
fn the_reading_block_example_is_what_the_engine_writes_and_reads() {
    let block = example("reading-block");
    let readings = roamkv_engine::lower_blocks::decode(TS_NS, &block).expect("decodes");
    let values: [&[u8]; 3] = [b"21.50", b"21.51", b"21.53"];
    let expected: Vec<(i64, Vec<u8>)> = (0..3)
        .map(|i| (TS_NS + i as i64 * 1_000_000_000, values[i].to_vec()))
        .collect();
    assert_eq!(readings, expected);
    let borrowed: Vec<(i64, &[u8])> = expected.iter().map(|(t, v)| (*t, &v[..])).collect();
    assert_eq!(roamkv_engine::lower_blocks::encode(&borrowed), block);
}

/// What a (key, value) of a family is, and how many it counts for (a block: its readings).
type KindOf = dyn Fn(&[u8], &[u8]) -> Option<(&'static str, usize)>;

/// The readings of a block (FORMAT.md, "Reading blocks"), its key a reading key.
fn block_readings(key: &[u8], block: &[u8]) -> usize {
    let ts = keys::decode_ts(key[key.len() - 8..].try_into().expect("8 bytes"));
    roamkv_engine::lower_blocks::decode(ts, block)
        .expect("a block FORMAT.md describes")
        .len()
}

/// What FORMAT.md says a catalog key is.
fn catalog_key_kind(k: &[u8]) -> Option<&'static str> {
    if k == keys::meta_key() {
        return Some("meta");
    }
    match keys::parse_catalog_device_key(k)? {
        (_, None) => Some("device"),
        (_, Some(_)) => Some("membership"),
    }
}

#[cfg(feature = "leveldb")]
#[test]
fn the_leveldb_tier_holds_only_the_documented_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lower = settled_lower_tier(dir.path(), LowerTierKind::LevelDb);
    let options = roamkv_leveldb::Options::default();
    let data = roamkv_leveldb::Db::open(&lower.join("leveldb"), &options).expect("open");
    let mut readings = 0;
    let mut it = data.iter();
    it.seek_to_first();
    while it.valid() {
        let k = it.key();
        assert_eq!(k[0], 0x04, "a runs-space tag (blocks): {k:?}");
        assert!(
            Place::Window(WindowId(0)).parse(&k[1..]).is_some(),
            "undocumented key {k:?} in the LevelDB tier"
        );
        readings += block_readings(&k[1..], it.value());
        it.next();
    }
    it.status().expect("iterate");
    assert_eq!(readings, 50);
    drop(it);
    let catalog = roamkv_leveldb::Db::open(&lower.join("leveldb-catalog"), &options).expect("open");
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut it = catalog.iter();
    it.seek_to_first();
    while it.valid() {
        let kind = catalog_key_kind(it.key())
            .unwrap_or_else(|| panic!("undocumented catalog key {:?}", it.key()));
        *kinds.entry(kind).or_default() += 1;
        it.next();
    }
    it.status().expect("iterate");
    assert_eq!(
        kinds,
        BTreeMap::from([("device", 1), ("membership", 1), ("meta", 1)])
    );
}

#[test]
fn the_rocksdb_tier_holds_only_the_documented_keys_and_families() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lower = settled_lower_tier(dir.path(), LowerTierKind::RocksDb);
    let path = lower.join("rocksdb");
    let families =
        rocksdb::DB::list_cf(&rocksdb::Options::default(), &path).expect("list families");
    assert_eq!(
        families.iter().map(String::as_str).collect::<Vec<_>>(),
        ["default", "window_blocks", "settled_blocks", "catalog"]
    );
    let db =
        rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), &path, &families, false)
            .expect("open the RocksDB tier");
    // Each key counts as its kind, a block as the readings it holds.
    let count = |family: &str, check: &KindOf| {
        let cf = db.cf_handle(family).expect("family");
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for item in db.iterator_cf(cf, rocksdb::IteratorMode::Start) {
            let (k, v) = item.expect("iterate");
            let (kind, n) = check(&k, &v)
                .unwrap_or_else(|| panic!("undocumented key {k:?} in family {family}"));
            *kinds.entry(kind).or_default() += n;
        }
        kinds
    };
    assert_eq!(
        count("window_blocks", &|k, v| Place::Window(keys::window_of(k)?)
            .parse(k)
            .map(|_| ("reading in a block", block_readings(k, v)))),
        BTreeMap::from([("reading in a block", 50)])
    );
    assert!(count("settled_blocks", &|_, _| None).is_empty());
    assert!(count("default", &|_, _| None).is_empty());
    assert_eq!(
        count("catalog", &|k, _| catalog_key_kind(k).map(|kind| (kind, 1))),
        BTreeMap::from([("device", 1), ("membership", 1), ("meta", 1)])
    );
}
