//! A segment file made of arbitrary bytes: opening it (header checks) and, when it opens,
//! scanning it as recovery does must never panic, and a scan never reports data past the file.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use roamkv_engine::segment::{self, Segment};

/// Sequence number the file is named after (the header must agree).
const SEQ: u64 = 5;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("roamkv-fuzz-segment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let path = segment::segment_path(dir(), SEQ);
    std::fs::write(&path, data).expect("writing the fuzz input");
    if let Ok(seg) = Segment::open(&path, SEQ) {
        assert_eq!(seg.bytes, data.len() as u64);
        let all = seg.read_all().expect("reading an opened segment");
        if let Ok(end) = segment::scan(&all, seg.seq_low(), |_, _| Ok(())) {
            assert!(end.data_end <= seg.bytes);
        }
    }
});
