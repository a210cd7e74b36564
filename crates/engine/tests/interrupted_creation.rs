//! A process killed while it creates a new data directory (before the identity file is renamed
//! into place) leaves LOCK, ROAMKV.tmp and empty log/ and lower/ behind. The next open must
//! finish the creation, not refuse the directory for ever; anything else in a directory without
//! an identity file is still refused and left untouched. (Found by `roamkv bench crash`: a kill
//! 154 ms after the loader started.)

use roamkv_engine::{Engine, Error, Options};

fn options() -> Options {
    Options {
        background_maintenance: false,
        ..Options::default()
    }
}

#[test]
fn a_creation_killed_before_the_identity_file_is_finished_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("log")).expect("log");
    std::fs::create_dir_all(data.join("lower")).expect("lower");
    std::fs::write(data.join("LOCK"), b"").expect("LOCK");
    std::fs::write(data.join("ROAMKV.tmp"), b"roamkv data dir").expect("torn identity");
    let engine = Engine::open(&data, options()).expect("open finishes the creation");
    engine.put("car", "speed", 1, b"v").expect("put");
    engine.close().expect("close");
    let engine = Engine::open(&data, options()).expect("reopen");
    assert_eq!(
        engine.get("car", "speed", 1).expect("get"),
        Some(b"v".to_vec())
    );
    engine.close().expect("close");
}

#[test]
fn other_content_without_an_identity_file_is_still_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("log")).expect("log");
    std::fs::write(data.join("log/00000000000000000001.seg"), b"x").expect("a segment");
    std::fs::write(data.join("ROAMKV.tmp"), b"").expect("tmp");
    match Engine::open(&data, options()) {
        Err(Error::NotADataDirectory { .. }) => {}
        other => panic!("expected NotADataDirectory, got {:?}", other.map(|_| ())),
    }
    assert!(data.join("log/00000000000000000001.seg").exists());
    assert!(!data.join("ROAMKV").exists());
}
