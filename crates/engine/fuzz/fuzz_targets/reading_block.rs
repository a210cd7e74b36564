//! The reading-block decoder (docs/FORMAT.md, "Reading blocks") on arbitrary bytes: the first 8
//! are the first reading's timestamp (as its key would give it), the rest the block. It must
//! never panic, and whatever decodes must encode to a block that decodes to the same readings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roamkv_engine::lower_blocks::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Some((ts, block)) = data.split_first_chunk::<8>() else {
        return;
    };
    let first_ts = i64::from_le_bytes(*ts);
    if let Ok(readings) = decode(first_ts, block) {
        let borrowed: Vec<(i64, &[u8])> = readings.iter().map(|(t, v)| (*t, &v[..])).collect();
        let again = encode(&borrowed);
        assert_eq!(decode(first_ts, &again).as_ref(), Ok(&readings));
    }
});
