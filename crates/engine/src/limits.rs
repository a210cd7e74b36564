//! Every bound the engine enforces, in one place, with the reason for each.
//! Relations between them are checked at compile time at the bottom of this file.

/// Device ids are names like "car-17"; 255 bytes keeps the record header's u16 length field far
/// from overflow and the mapping table's per-device cost small.
pub const DEVICE_ID_BYTES_MAX: usize = 255;
/// Sensor ids are names like "speed" (TPCx-IoT uses short ids); same reasoning as device ids.
pub const SENSOR_ID_BYTES_MAX: usize = 255;
/// What is wrong with an id (device or sensor), if anything: ids are names, 1..=`max` bytes,
/// without NUL (NUL ends a sensor in lower-tier keys). The one rule for input and for bytes read
/// from disk.
pub fn id_problem(id: &str, max: usize) -> Option<String> {
    if id.is_empty() {
        Some("is empty".into())
    } else if id.len() > max {
        Some(format!("is {} bytes, the limit is {max}", id.len()))
    } else if id.as_bytes().contains(&0) {
        Some("contains a NUL byte".into())
    } else {
        None
    }
}

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
/// the reserve at 1 GiB while keeping steady-state ingest free of zero-fill writes. Spares count
/// against the log budget, so the pool is also capped at a quarter of it.
pub const SPARE_SEGMENTS_MAX: usize = 16;

/// Devices migrated together in one sorted run (one SST ingestion): bounds how long shutdown
/// waits for a pass to end.
pub const MIGRATION_RECORDS_PER_RUN_MAX: usize = 100_000;
/// Bytes of values one migration pass holds in memory (the sorted run it ingests). Sized so that
/// a pass is large enough to amortise an SST ingestion (tens of MiB) and small next to the
/// memory budgets an edge gateway gives the engine (the bench's cgroups are 256-512 MiB).
pub const MIGRATION_RUN_BYTES_MAX: u64 = 32 * 1024 * 1024;

/// Default log budget (`Options::log_bytes_max` = None): the log must hold about one management
/// time of ingest (a segment retires once every device in it has left or settled), so the
/// default is twice the management time at this ingest rate, which is the engine's measured peak
/// on a 2-core gateway (about 300 MB/s) rounded up. It is then capped at half of the file
/// system's free space at open, and never below LOG_SEGMENTS_MIN segments.
pub const LOG_INGEST_BYTES_PER_SEC_ASSUMED: u64 = 384 * 1024 * 1024;
/// The smallest log budget, in segments: the active one, one ready spare, and room for the
/// cleaner to work (a budget below this would stall writers while maintenance is healthy).
pub const LOG_SEGMENTS_MIN: u64 = 8;
/// Above this share of the budget, maintenance settles early the devices that pin the oldest
/// segments (the log is filling faster than management time empties it).
pub const LOG_PRESSURE_PERCENT: u64 = 75;
/// Default bound on how long a write waits for log space (RocksDB's write stall): past it the
/// write fails with `Error::NoSpace` and changes nothing.
pub const WRITE_STALL_MS_MAX_DEFAULT: u64 = 10_000;
/// In `None`/`Periodic` mode, write-back of the log is started every this many bytes written
/// (RocksDB's bytes_per_sync), and the leader waits for the write-back of the window before
/// the previous one: dirty log pages stay below about two windows, so a memory cgroup never
/// fills with them.
pub const LOG_WRITEBACK_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;
/// The lower tier is made durable (memtable flush) at most this often for retirement alone;
/// under log pressure, at once. Each persist makes a small L0 file: bounding their rate bounds
/// the compaction they cause.
pub const LOWER_PERSIST_INTERVAL_MS: u64 = 1_000;
/// Devices the mapping table may hold (upper and settled). About 200 bytes each: 16 M devices
/// bound the table near 3 GiB; registering one more fails with `Error::TooManyDevices`.
pub const DEVICES_MAX_DEFAULT: u64 = 16_000_000;
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
