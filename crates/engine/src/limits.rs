//! Every bound the engine enforces, in one place, with the reason for each.
//! Relations between them are checked at compile time at the bottom of this file.

/// Device ids are names like "car-17"; 255 bytes keeps the record header's u16 length field far
/// from overflow and the mapping table's per-device cost small.
pub const DEVICE_ID_BYTES_MAX: usize = 255;
/// Sensor ids are names like "speed" (TPCx-IoT uses short ids); same reasoning as device ids.
pub const SENSOR_ID_BYTES_MAX: usize = 255;
/// Sensor readings are small; 256 KiB keeps one record far below the smallest segment, so a
/// record can always be placed, and bounds the memory a single read allocates.
pub const VALUE_BYTES_MAX: usize = 256 * 1024;
/// A batch is written as one contiguous run in one segment (atomic on recovery), so it must fit
/// in a segment: see the assertion below.
pub const BATCH_RECORDS_MAX: usize = 65_536;
/// Encoded bytes of one batch (records + their headers).
pub const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Writers wait (back-pressure) while more than this many encoded bytes are queued for the
/// next group commit, so a slow disk cannot make the queue grow without bound.
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Segment files: fixed size, preallocated. The smallest allowed size still holds the largest batch.
pub const SEGMENT_BYTES_MIN: u64 = 1024 * 1024;
/// Offsets inside a segment are stored as u32 in the index.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 31;
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// The segment header occupies the first page so that records start page-aligned.
pub const SEGMENT_HEADER_BYTES: u64 = 4096;

/// Default cap on the upper tier's index memory; beyond it the oldest devices migrate early.
pub const INDEX_BYTES_MAX_DEFAULT: u64 = 256 * 1024 * 1024;
/// After an early migration, the index is brought down to this fraction of the cap, so that
/// early migrations come in bulk rather than one device per put.
pub const INDEX_LOW_WATER_PERCENT: u64 = 80;

/// Retired segments kept for reuse; more are deleted (space returns to the file system).
/// Retirement comes in bursts (a device that stayed its whole management time pins every
/// segment after its first record until it settles), so a small pool would delete segments
/// that are needed again moments later and must then be zero-filled anew: 16 x 64 MiB bounds
/// the reserve at 1 GiB while keeping steady-state ingest free of zero-fill writes.
pub const SPARE_SEGMENTS_MAX: usize = 16;

/// Devices migrated together in one sorted run (one SST ingestion): bounds the memory of a
/// migration pass (about this many values) and how long shutdown waits for a pass to end.
pub const MIGRATION_RECORDS_PER_RUN_MAX: usize = 100_000;
/// Migration reads the log in windows of up to this many bytes (records of many devices are
/// interleaved in the log; reading each record alone would be one random read per record).
pub const MIGRATION_READ_WINDOW_BYTES: u64 = 4 * 1024 * 1024;

// A batch of the largest size must fit in the smallest segment (after the header); a single
// record of the largest size too.
const _: () = assert!(BATCH_BYTES_MAX as u64 + SEGMENT_HEADER_BYTES <= SEGMENT_BYTES_DEFAULT);
const _: () = assert!(
    (VALUE_BYTES_MAX + DEVICE_ID_BYTES_MAX + SENSOR_ID_BYTES_MAX + 64) as u64
        + SEGMENT_HEADER_BYTES
        <= SEGMENT_BYTES_MIN
);
const _: () = assert!(BATCH_BYTES_MAX <= PENDING_BYTES_MAX);
const _: () =
    assert!(DEVICE_ID_BYTES_MAX <= u16::MAX as usize && SENSOR_ID_BYTES_MAX <= u16::MAX as usize);
const _: () = assert!(SEGMENT_BYTES_MAX <= u32::MAX as u64 + 1);
