//! The fuzz targets' seed corpora (crates/engine/fuzz/corpus, written by scripts/fuzz-seeds.py)
//! must stay valid inputs: a seed that no longer decodes would leave the fuzzer starting in
//! front of the checksums again.

use std::path::{Path, PathBuf};

use roamkv_engine::log_record::{self as record, Decode};
use roamkv_engine::segment::{self, Segment};
use roamkv_engine::{LowerId, SegmentSeq, WindowId};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn record_seeds_decode() {
    for name in [
        "put",
        "puts",
        "register",
        "depart",
        "trim",
        "segment-end",
        "batch",
    ] {
        let bytes = seed("record_decode", name);
        let seq_low = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let mut at = 0;
        while at < bytes.len() {
            match record::decode(&bytes[at..], seq_low) {
                Decode::Record(d) => at += d.len,
                other => panic!("seed {name} at {at}: {other:?}"),
            }
        }
    }
}

#[test]
fn segment_seeds_open_and_scan() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, records, torn) in [
        ("segment-with-a-batch", 2, false),
        ("segment-with-puts", 2, false),
        ("empty-segment", 0, false),
        ("torn-tail", 0, true),
    ] {
        let path: PathBuf = segment::segment_path(dir.path(), SegmentSeq(5));
        // Seeds are the start of a segment; the rest of the file is zeros up to the size the
        // header claims (as the fuzz target does).
        let bytes = seed("segment_open", name);
        let claimed = u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes"));
        std::fs::write(&path, &bytes).expect("write");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(claimed))
            .expect("extend");
        let seg = Segment::open(
            &roamkv_engine::storage::PlainFiles::shared(),
            &path,
            SegmentSeq(5),
        )
        .unwrap_or_else(|e| panic!("seed {name}: {e}"));
        let data = seg.read_all().expect("read");
        let mut seen = 0;
        let end = segment::scan(&data, seg.seq_low(), |_, _| {
            seen += 1;
            Ok(())
        })
        .expect("scan");
        assert_eq!((seen, end.damage.is_some()), (records, torn), "seed {name}");
    }
}

#[test]
fn key_seeds_decode() {
    use roamkv_engine::keys::{self, CatalogMeta, DeviceRecord, Place, WindowTrim};
    assert_eq!(
        Place::Window(WindowId(3)).parse(&seed("key_decode", "run-key")),
        Some((LowerId(42), "speed", -42))
    );
    assert_eq!(
        Place::Settled.parse(&seed("key_decode", "settled-key")),
        Some((LowerId(42), "speed", -42))
    );
    assert_eq!(
        keys::parse_catalog_device_key(&seed("key_decode", "catalog-device-key")),
        Some((LowerId(9), None))
    );
    assert_eq!(
        keys::parse_catalog_device_key(&seed("key_decode", "membership-key")),
        Some((LowerId(9), Some(WindowId(3))))
    );
    assert_eq!(
        DeviceRecord::decode(&seed("key_decode", "device-record")),
        Some(DeviceRecord {
            registered_at_ms: 77,
            settled: true,
            trims: vec![WindowTrim {
                before_ns: -1,
                upto_win: WindowId(9)
            }],
            name: "car-1".into()
        })
    );
    assert_eq!(
        CatalogMeta::decode(&seed("key_decode", "catalog-meta")),
        Some(CatalogMeta {
            next_win: WindowId(3),
            next_lower_id: LowerId(4),
            last_aged_seq: SegmentSeq(5)
        })
    );
}

#[test]
fn reading_block_seeds_decode() {
    for name in ["shaped-small", "shaped-zstd", "raw-zstd", "raw-binary"] {
        let bytes = seed("reading_block", name);
        let (ts, block) = bytes.split_at(8);
        let first_ts = i64::from_le_bytes(ts.try_into().expect("8 bytes"));
        let readings = roamkv_engine::lower_blocks::decode(first_ts, block)
            .unwrap_or_else(|e| panic!("seed {name}: {e:?}"));
        assert!(!readings.is_empty(), "seed {name}");
    }
}
