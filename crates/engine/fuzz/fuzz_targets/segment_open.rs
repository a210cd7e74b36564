//! A segment file made of arbitrary bytes: opening it (header checks) and, when it opens,
//! scanning it as recovery does must never panic, and a scan never reports data past the file.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use roamkv_engine::segment::{self, Segment};
use roamkv_engine::SegmentSeq;

/// Sequence number the file is named after (the header must agree).
const SEQ: SegmentSeq = SegmentSeq(5);

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("roamkv-fuzz-segment-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz scratch directory");
        dir
    })
}

/// Segments are at least 1 MiB: an input is the start of a file, and when its header claims a
/// larger size (up to CLAIMED_BYTES_MAX) the file is extended with zeros (sparse) to that size,
/// so that small inputs can be whole, valid segments. Returns the file's length.
fn extend_to_claimed_size(path: &std::path::Path, data: &[u8]) -> u64 {
    const CLAIMED_BYTES_MAX: u64 = 4 << 20;
    let claimed = data
        .get(24..32)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    if claimed > data.len() as u64 && claimed <= CLAIMED_BYTES_MAX {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("reopen");
        file.set_len(claimed).expect("extending the fuzz input");
        return claimed;
    }
    data.len() as u64
}

fuzz_target!(|data: &[u8]| {
    let path = segment::segment_path(dir(), SEQ);
    std::fs::write(&path, data).expect("writing the fuzz input");
    let file_bytes = extend_to_claimed_size(&path, data);
    if let Ok(seg) = Segment::open(&roamkv_engine::storage::PlainFiles::shared(), &path, SEQ) {
        assert_eq!(seg.bytes, file_bytes);
        let all = seg.read_all().expect("reading an opened segment");
        if let Ok(end) = segment::scan(&all, seg.seq_low(), |_, _| Ok(())) {
            assert!(end.data_end <= seg.bytes);
        }
    }
});
