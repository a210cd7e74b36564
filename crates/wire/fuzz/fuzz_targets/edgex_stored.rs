//! The server's stored EdgeX bytes on arbitrary input (docs/FORMAT.md, "The server's records and
//! EdgeX readings in the engine"): the first 8 bytes are the key's timestamp, the rest a value.
//! Both forms of a stored reading and both forms of an index entry must decode or refuse, never
//! panic; a value that reads as exactly a stored reading's encoding re-encodes to its very
//! bytes, and an index entry that decodes comes back through the compact form unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roamkv_wire::edgex::event_index::IndexEntry;
use roamkv_wire::edgex::readable::{readable, stored_bytes};
use roamkv_wire::edgex::stored_of;

fuzz_target!(|data: &[u8]| {
    let Some((ts, value)) = data.split_first_chunk::<8>() else {
        return;
    };
    let ts = i64::from_le_bytes(*ts);
    let _ = stored_of(value, ts);
    if let Some(reading) = readable(value, ts) {
        assert_eq!(stored_bytes(reading, ts).expect("re-encodes"), value);
    }
    if let Ok(entry) = IndexEntry::decode("e", ts, value) {
        let compact = entry.encode(ts).expect("an entry encodes");
        assert_eq!(IndexEntry::decode("e", ts, &compact).expect("decodes"), entry);
    }
});
