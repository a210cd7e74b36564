//! Every version number and magic the engine writes, in one place (docs/FORMAT.md gives the
//! bytes around each). A file whose magic or version is not the one here is refused, naming
//! both, never misread.

/// The data directory's format (its `ROAMKV` identity file). 3: the lower tier's readings in
/// blocks (lower/blocks/). 2: timestamps in nanoseconds; the lower tier as windows, a settled
/// space and a catalog, a key per reading — opened and upgraded to 3 in place by the first
/// writable open (read-only opens read it as it is). A directory of another format is refused
/// with both versions named; format 1 directories are not upgraded in place (their lower tier
/// holds millisecond keys under another layout).
pub const DIR_FORMAT_VERSION: u32 = 3;
/// The one earlier format a directory may have and still be opened: a key per reading.
pub const DIR_FORMAT_READINGS: u32 = 2;
/// The first line of the identity file.
pub const DIR_IDENTITY_FIRST_LINE: &str = "roamkv data directory";

/// A commit-log segment's first 8 bytes.
pub const SEGMENT_MAGIC: &[u8; 8] = b"RKVLOG01";
/// A segment's format. 3: a batch's readings as PUTS records, one per device (its id once,
/// timestamps as deltas). 2: timestamps in nanoseconds, SEGMENT_END carries the sealing time,
/// a PUT record per reading. A segment of either is read (format 3's records are format 2's
/// and PUTS); new and recycled segments are written as format 3. A build before format 3 refuses
/// a format 3 segment, naming the file and the version's offset.
pub const SEGMENT_FORMAT_VERSION: u32 = 3;
/// The earlier segment format still read (its segments leave the log as it moves on).
pub const SEGMENT_FORMAT_PUT_PER_READING: u32 = 2;

/// The feed's `LOG_ID` file's first 8 bytes (the log's identity).
pub const LOG_ID_MAGIC: &[u8; 8] = b"RKVLGID1";
/// A feed slot file's first 8 bytes.
pub const SLOT_MAGIC: &[u8; 8] = b"RKVSLOT1";

/// The lower tier catalog's meta record: its first 4 bytes.
pub const CATALOG_META_FORMAT: u32 = 1;

// Little-endian fields at named offsets: the one way every on-disk structure reads its numbers
// (None when the field runs past the bytes).
pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}
