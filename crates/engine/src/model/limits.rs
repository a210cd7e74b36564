//! Every bound the engine enforces, in one place, with the reason for each.
//! Relations between them are checked at compile time at the bottom of this file.

/// Device ids are names like "car-17"; 255 bytes keeps the record header's u16 length field far
/// from overflow and the mapping table's per-device cost small.
pub const DEVICE_ID_BYTES_MAX: usize = 255;
/// Sensor ids are names like "speed" (TPCx-IoT uses short ids); same reasoning as device ids.
pub const SENSOR_ID_BYTES_MAX: usize = 255;
/// Device ids starting with U+0001 hold an embedding program's own records (the server's index
/// of event ids). The engine keeps them as any device; a program refuses the prefix in names it
/// takes from outside, and one that copies devices elsewhere (the cloud sink) leaves them out.
pub const INTERNAL_DEVICE_PREFIX: &str = "\u{1}";
/// What can be wrong with an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdProblem {
    Empty,
    TooLong { len: usize },
    ContainsNul,
}

/// What is wrong with an id (device or sensor), if anything: ids are names, 1..=`max` bytes,
/// without NUL (NUL ends a sensor in lower-tier keys). The one rule for input (`put` maps it to
/// an `Error`) and for bytes read from disk (decoders word it with `id_problem`).
pub fn id_rule(id: &str, max: usize) -> Option<IdProblem> {
    if id.is_empty() {
        Some(IdProblem::Empty)
    } else if id.len() > max {
        Some(IdProblem::TooLong { len: id.len() })
    } else if id.as_bytes().contains(&0) {
        Some(IdProblem::ContainsNul)
    } else {
        None
    }
}

/// `id_rule`, in words.
pub fn id_problem(id: &str, max: usize) -> Option<String> {
    id_rule(id, max).map(|problem| match problem {
        IdProblem::Empty => "is empty".to_string(),
        IdProblem::TooLong { len } => format!("is {len} bytes, the limit is {max}"),
        IdProblem::ContainsNul => "contains a NUL byte".to_string(),
    })
}

/// Sensor readings are small; 256 KiB keeps one record far below the smallest segment, so a
/// record can always be placed, and bounds the memory a single read allocates.
pub const VALUE_BYTES_MAX: usize = 256 * 1024;
/// A batch is written as one contiguous run in one segment (atomic on recovery), so it must fit
/// in a segment.
pub const BATCH_RECORDS_MAX: usize = 65_536;
/// Encoded bytes of one batch (records + their headers). It fits in a segment of the default
/// size (asserted below), not in every allowed size: with a smaller `Options::segment_bytes`
/// the bound in force is the segment's capacity, which `Engine::put_batch` enforces
/// (`encode_batch` refuses a batch over `min(BATCH_BYTES_MAX, segment capacity)` with
/// `Error::BatchTooLarge`, changing nothing). What every allowed size holds is the largest
/// single record (asserted below), so a batch can always be split to fit.
pub const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Writers wait (back-pressure) while more than this many encoded bytes are queued for the
/// next group commit, so a slow disk cannot make the queue grow without bound.
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// With `IndexApply::AfterAck`, writers apply groups themselves, or wait, while the groups
/// committed and not yet applied to the index (`index_apply`) hold more than this many bytes:
/// the lag is what a read may have to apply or wait for before it sees its device's
/// acknowledged writes, so it is kept to about a millisecond of applying (~1,000 readings of
/// 1 KB).
pub const INDEX_LAG_BYTES_MAX: usize = 1024 * 1024;
/// Applied after the acknowledgement (`IndexApply::AfterAck`), a group goes into the index in
/// slices of about this many readings (a PUTS record counts its readings), taking the state
/// lock once per slice (never cutting a batch: readers see a batch whole), so that no lock hold
/// lasts a whole group: a group can hold tens of thousands of readings.
pub const APPLY_SLICE_RECORDS: usize = 256;

/// Segment files: fixed size, preallocated. The smallest allowed size still holds the largest
/// record (not the largest batch: see `BATCH_BYTES_MAX`).
pub const SEGMENT_BYTES_MIN: u64 = 1024 * 1024;
/// Offsets inside a segment are stored as u32 in the index.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 31;
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// The segment header occupies the first page so that records start page-aligned.
pub const SEGMENT_HEADER_BYTES: u64 = 4096;
/// The log writes whole blocks of this size (`Segment::write_blocks`): a write that covers part
/// of a file-system block the page cache does not hold makes the kernel read the block first
/// (ext4 `ext4_block_write_begin`, ~100 µs, synchronously). The file-system block size of ext4
/// and XFS as made by default; segments and their header are whole blocks.
pub const LOG_BLOCK_BYTES: u64 = 4096;
const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(LOG_BLOCK_BYTES));
const _: () = assert!(SEGMENT_BYTES_MIN.is_multiple_of(LOG_BLOCK_BYTES));

/// Segments the preparer keeps ready ahead of the active one: one is enough for a writer never
/// to wait on a segment's creation while the budget has room (docs/BENCHMARKS.md, segment
/// preparation); more would hold budget idle.
pub const READY_SEGMENTS_TARGET: usize = 1;
/// A writer stalled for log space re-checks at least this often (it is also woken when
/// maintenance frees a segment): bounds how late it sees its own `write_stall_ms_max` pass.
pub const WRITE_STALL_POLL_MS: u64 = 50;
/// A writer waiting for its group yields its CPU for up to this long before it parks: a group
/// commits in tens of microseconds, and parking and waking every waiter of every group cost a
/// third of the write path's CPU on 2 cores (RocksDB's write thread does the same;
/// docs/BENCHMARKS.md, "Diagnosis").
pub const WRITER_YIELD_US: u64 = 100;
/// A writer parked for its commit is woken by the change that lets it go on
/// (commit_log/waiters.rs); it also re-checks after this long, so that a missed wake would cost a
/// pause, not a hang (and is counted: `Stats::commit_wakes_missed`).
pub const COMMIT_PARK_RECHECK_MS: u64 = 100;

/// Default cap on the log's in-memory index; beyond it the oldest segments leave the log early.
pub const INDEX_BYTES_MAX_DEFAULT: u64 = 256 * 1024 * 1024;
/// After leaving early for memory, the index is brought down to this fraction of the cap, so
/// that early passes come in bulk rather than one per put.
pub const INDEX_LOW_WATER_PERCENT: u64 = 80;

/// Retired segments kept for reuse; more are deleted (space returns to the file system).
/// Retirement comes in bursts (a device that stayed its whole management time pins every
/// segment after its first record until it settles), so a small pool would delete segments
/// that are needed again moments later and must then be zero-filled anew: 16 x 64 MiB bounds
/// the reserve at 1 GiB while keeping steady-state ingest free of zero-fill writes. Spares count
/// against the log budget, so the pool is also capped at a quarter of it.
pub const SPARE_SEGMENTS_MAX: usize = 16;

/// Bytes of values one run (one window, one file of the lower tier) holds, and so what a pass
/// holds in memory while it sorts: a segment whose live readings are more is split into
/// several windows. Large enough to amortise an SST ingestion, small next to the memory
/// budgets an edge gateway gives the engine (the bench's cgroups are 256-512 MiB).
pub const WINDOW_BYTES_MAX: u64 = 32 * 1024 * 1024;
/// A pass reads the readings it moves in one sweep over their segment, skipping gaps between
/// them longer than this (a gap shorter than about one disk latency's worth of bandwidth,
/// ~150 us x 400 MB/s, is cheaper to read through than to seek over).
pub const MOVE_READ_GAP_BYTES: u64 = 64 * 1024;
/// The read buffer of a pass: the sweep reads its segment this much at a time.
pub const MOVE_READ_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Windows (runs) a device's readings may lie in before its windowed readings are consolidated
/// into the settled store: a read of one device touches at most this many runs, plus the log
/// and the settled store.
pub const WINDOWS_PER_DEVICE_MAX: usize = 16;
/// Bytes of window files may be at most this percentage of their live bytes (space
/// amplification 1.5): past it, the windows with the least live data are consolidated away.
pub const WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX: u64 = 150;
/// ...unless their dead bytes are fewer than this: a small store is not worth rewriting.
pub const WINDOW_DEAD_BYTES_MIN: u64 = 64 * 1024 * 1024;
/// Reclaim starts at this share of the space bound (of the amplification over 100 %, and of
/// the dead bytes' floor): windows keep dying while a consolidation runs, so reclaim that starts
/// at the bound is over it until it ends (at ~130 K ops/s, 6 s over it in 1800 s when it started
/// there, 3 s at 75 %: at that rate windows die by tens of MB a second, and 75 % leaves 16 MiB
/// of headroom; docs/BENCHMARKS.md).
pub const WINDOW_RECLAIM_START_PERCENT: u64 = 50;
/// Readings one consolidation pass moves out of windows, bounding its memory as
/// `WINDOW_BYTES_MAX` bounds a pass's.
pub const CONSOLIDATION_BYTES_MAX: u64 = WINDOW_BYTES_MAX;
/// A device is consolidated into the settled space only once it has been here this many
/// management times; a younger device's windowed readings are consolidated into a new window,
/// which drops whole when its devices leave. The settled space is an LSM range whose dead
/// bytes return only through compaction: it is for devices that stay, not for the many a
/// gateway sees pass by. At a high ingest rate a device makes a window with every segment
/// (five a second at 300 MB/s), so a count of windows says nothing about how long it stays:
/// sending devices to the settled space by count sent the bench's stayers there seconds
/// before they left, and their dead bytes piled up (issue 29).
pub const SETTLE_AGE_MANAGEMENT_TIMES: u64 = 4;

/// Default log budget (`Options::log_bytes_max` = None): the log must hold about one management
/// time of ingest (a segment leaves the log one management time after it was sealed), so the
/// default is twice the management time at this ingest rate, which is the engine's measured peak
/// on a 2-core gateway (about 300 MB/s) rounded up. It is then capped at half of the file
/// system's free space at open, and never below LOG_SEGMENTS_MIN segments.
pub const LOG_INGEST_BYTES_PER_SEC_ASSUMED: u64 = 384 * 1024 * 1024;
/// The smallest log budget, in segments: the active one, one ready spare, and room for the
/// cleaner to work (a budget below this would stall writers while maintenance is healthy).
pub const LOG_SEGMENTS_MIN: u64 = 8;
/// Above this share of the budget, maintenance moves the oldest segment's readings out of the
/// log before their management time ends (the log is filling faster than management time
/// empties it).
pub const LOG_PRESSURE_PERCENT: u64 = 75;
/// Default bound on how long a write waits for log space (RocksDB's write stall): past it the
/// write fails with `Error::NoSpace` and changes nothing.
pub const WRITE_STALL_MS_MAX_DEFAULT: u64 = 10_000;
/// In `None`/`Periodic` mode, write-back of the log is started every this many bytes written
/// (RocksDB's bytes_per_sync), and the leader waits for the write-back of the window before
/// the previous one: dirty log pages stay below about two windows, so a memory cgroup never
/// fills with them.
pub const LOG_WRITEBACK_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;
/// Largest page one `scan_page` call returns: bounds the memory of a single read.
pub const SCAN_PAGE_READINGS_MAX: usize = 100_000;
/// A read may race with a pass that moves its readings out of the log and recycles their
/// segment: the record then carries another segment's sequence. Retrying finds them in the
/// lower tier; each retry follows a pass that moved them, so a few always suffice.
pub const READ_ATTEMPTS_MAX: usize = 4;
/// Trims a device's readings in windows may be under before maintenance consolidates the device
/// (see `keys::merge_trims`): a read checks each of them per reading.
pub const TRIMS_PER_DEVICE_MAX: usize = 8;

/// Longest feed slot name (names are file names: ASCII letters, digits, `-` and `_`).
pub const SLOT_NAME_BYTES_MAX: usize = 64;
/// A slot's file is rewritten at most this often while its reader advances: a crash loses at
/// most this much progress of the *hold* (the reader's own cursor is elsewhere), which only
/// keeps a little more log. Close writes the latest.
pub const SLOT_PERSIST_INTERVAL_MS: u64 = 1_000;
/// The first read of a feed call: at least this much, so that small budgets still make progress.
pub const FEED_READ_BYTES_MIN: usize = 64 * 1024;
/// Default cap on what the feed's holds keep (`Options::feed_hold_bytes_max` = None), as a share
/// of the log budget: a reader away for long keeps at most a quarter of the log from retiring,
/// well below `LOG_PRESSURE_PERCENT`, where holds are released anyway.
pub const FEED_HOLD_BUDGET_PERCENT: u64 = 25;

/// A backup's hold on the segments it copies (`backup/snapshot.rs`) outlasts log pressure: it
/// is released only when the log passes this share of its budget, close enough to a full
/// budget that a writer could soon wait for room. Below it, a copy under full ingest (where the
/// log sits at `LOG_PRESSURE_PERCENT`, moving readings early) would lose its hold at once. The
/// copy moves the hold on a segment at a time, oldest first, so what it keeps shrinks while
/// ingest adds to the log.
pub const BACKUP_HOLD_RELEASE_PERCENT: u64 = 95;

/// Devices the mapping table may hold (upper and settled). About 200 bytes each: 16 M devices
/// bound the table near 3 GiB; registering one more fails with `Error::TooManyDevices`.
pub const DEVICES_MAX_DEFAULT: u64 = 16_000_000;

// A batch of the largest size fits in a segment of the default size (after the header); a
// single record of the largest size fits in the smallest segment. (Smaller segments cap a batch
// at run time: see `BATCH_BYTES_MAX`.)
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
// One record always fits in a run, and a read chunk holds the largest record.
const _: () = assert!(VALUE_BYTES_MAX as u64 * 2 <= WINDOW_BYTES_MAX);
const _: () = assert!(VALUE_BYTES_MAX * 2 <= MOVE_READ_CHUNK_BYTES);
const _: () = assert!(WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX > 100);
const _: () = assert!(WINDOW_RECLAIM_START_PERCENT > 0 && WINDOW_RECLAIM_START_PERCENT < 100);
// Holds are released under log pressure: their default cap sits below it.
const _: () = assert!(FEED_HOLD_BUDGET_PERCENT < LOG_PRESSURE_PERCENT);
const _: () = assert!(
    LOG_PRESSURE_PERCENT < BACKUP_HOLD_RELEASE_PERCENT && BACKUP_HOLD_RELEASE_PERCENT < 100
);
const _: () =
    assert!(READY_SEGMENTS_TARGET >= 1 && READY_SEGMENTS_TARGET < LOG_SEGMENTS_MIN as usize);
