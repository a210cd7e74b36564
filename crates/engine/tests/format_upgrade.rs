//! A data directory of format 2 (the lower tier a key per reading, as every roamkv before
//! blocks wrote it) opens and reads as it is read-only, and is upgraded in place to format 3
//! (readings in blocks) by the first writable open: every reading reads back the same, before
//! and after, and after more writes and a reopen; `check` verifies both forms. Its log is of
//! segment format 2 (a PUT record per reading; `tail-dev-*` are still in it): read as it is, and
//! written into with PUTS records (segment format 3) by the upgraded engine.

mod common;

use std::path::{Path, PathBuf};

use roamkv_engine::{Engine, Options, check};
use sha2::{Digest, Sha256};

/// What `roamkv export` read out of the fixture with the binary that wrote it (data/README.md).
const READINGS: usize = 28_460;
const SHA256: &str = "26a22ee6650f68a2abec9279ec4a649087e8952440e7eb0ece5d04e511310422";

fn unpack() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/format2-rocksdb.tar.xz");
    let status = std::process::Command::new("tar")
        .arg("-xJf")
        .arg(&fixture)
        .arg("-C")
        .arg(tmp.path())
        .status()
        .expect("tar (with xz-utils) runs");
    assert!(status.success(), "unpacking {}", fixture.display());
    let dir = tmp.path().join("dir");
    (tmp, dir)
}

fn format_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("ROAMKV"))
        .expect("identity")
        .lines()
        .nth(1)
        .expect("a format line")
        .to_string()
}

/// (readings, SHA-256 of their lines) over every device, as the fixture's digest was taken.
fn digest(engine: &Engine) -> (usize, String) {
    let mut hash = Sha256::new();
    let mut n = 0;
    for device in engine.devices() {
        for r in engine
            .scan(&device.name, None, i64::MIN, i64::MAX)
            .expect("scan")
        {
            let value = String::from_utf8(r.value).expect("text values");
            hash.update(format!(
                "{}\t{}\t{}\t{value}\n",
                r.device, r.sensor, r.ts_ns
            ));
            n += 1;
        }
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    (n, hex)
}

fn options() -> Options {
    Options {
        background_maintenance: false,
        ..Options::default()
    }
}

#[test]
fn a_format_2_directory_reads_the_same_before_and_after_its_upgrade_in_place() {
    let (_tmp, dir) = unpack();
    assert_eq!(format_of(&dir), "format 2");
    let report = check(&dir).expect("check of format 2");
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    let read_only = Engine::open(
        &dir,
        Options {
            read_only: true,
            ..options()
        },
    )
    .expect("read-only open of format 2");
    assert_eq!(digest(&read_only), (READINGS, SHA256.to_string()));
    drop(read_only);
    assert_eq!(
        format_of(&dir),
        "format 2",
        "a read-only open changes nothing"
    );

    let engine = Engine::open(&dir, options()).expect("writable open: the upgrade");
    assert_eq!(format_of(&dir), "format 3");
    assert_eq!(digest(&engine), (READINGS, SHA256.to_string()));
    // A point read of a reading written again after it had settled: the newest write wins.
    assert_eq!(
        engine
            .get("dev-1", "temp", 1_700_000_030_001_000_000)
            .expect("get"),
        Some(b"overwritten-3".to_vec())
    );
    // New writes, then everything moved on: maintenance writes blocks beside the upgraded ones.
    engine
        .put("dev-1", "temp", 1_700_000_030_001_000_000, b"after-upgrade")
        .expect("put");
    engine
        .put("dev-9", "temp", 1_700_000_000_000_000_000, b"21.5")
        .expect("put");
    engine.maintain().expect("maintain");
    engine.close().expect("close");

    let report = check(&dir).expect("check of format 3");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let engine = Engine::open(&dir, options()).expect("reopen");
    let (n, _) = digest(&engine);
    assert_eq!(n, READINGS + 1, "one new reading, one written again");
    assert_eq!(
        engine
            .get("dev-1", "temp", 1_700_000_030_001_000_000)
            .expect("get"),
        Some(b"after-upgrade".to_vec())
    );
    let lower = std::fs::read_dir(dir.join("lower/rocksdb"))
        .expect("ls")
        .count();
    assert!(lower > 0);
}
