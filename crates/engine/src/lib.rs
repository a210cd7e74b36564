//! roamkv's engine: a two-level key-value store for the sensor streams of devices that come and
//! go at an edge gateway (paper 002, "Design and Implementation of an Efficient Key-Value
//! Storage Engine for Mobile Edge Computing").
//!
//! - Every reading, of any device, is written once to one shared, group-committed commit log and
//!   indexed in memory per device (point reads, time ranges): a new device lives there, in the
//!   **upper tier**, for its **management time**.
//! - About one management time after a reading was written, if its device is still here, it
//!   leaves the log with the rest of its segment: read once, sorted, and written once as an
//!   immutable run (a **window**) into the **lower tier**, an LSM tree (RocksDB, or LevelDB as in
//!   the paper), which never compacts it.
//! - A device that **departs** is dropped at once: nothing is rewritten; its windows drop whole
//!   once no live device reads them.
//! - The commit log is the only journal of readings: the lower tier gets bulk runs and one small
//!   synced catalog batch per pass.
//!
//! Durability: with [`Durability::Sync`] (the default) a write returns after its group's
//! fdatasync; after kill -9 or power loss no acknowledged write is lost (a torn tail is cut by
//! checksum on open). See docs/ENGINE.md for the lifecycle and docs/FORMAT.md for every byte.
//!
//! ```no_run
//! use roamkv_engine::{Engine, Options};
//! let engine = Engine::open("/var/lib/roamkv", Options::default())?;
//! let ts_ns = 1_700_000_000_000_000_000; // nanoseconds since the epoch
//! engine.put("car-17", "speed", ts_ns, b"88.5")?;
//! assert_eq!(engine.get("car-17", "speed", ts_ns)?, Some(b"88.5".to_vec()));
//! engine.depart("car-17")?;
//! # Ok::<(), roamkv_engine::Error>(())
//! ```
#![deny(clippy::unwrap_used)]

pub mod backup;
mod commit;
mod commit_log;
mod dir;
mod engine;
pub mod feed;
mod lower;
mod maintenance;
mod model;
mod options;
mod query;
mod recovery;
mod state;
mod stats;

/// The commit log's record codec, segment files and storage seam, public for the fuzzers and
/// the format tests (they live in `commit_log/`). The codec is `log_record` outside the engine:
/// beside `Record`, the reading a caller writes, a bare `record` read as the same thing.
pub use commit_log::record as log_record;
pub use commit_log::{segment, storage};
pub use dir::{LowerTierKind, is_data_dir};
pub use engine::Engine;
pub use feed::{Feed, FeedBatch, FeedRecord, FeedStatus, LogPos, SlotStatus};
pub use lower::blocks::codec as lower_blocks;
pub use lower::keys;
pub use model::error::{Error, Result};
pub use model::ids::{LowerId, SegmentSeq, WindowId};
pub use model::limits;
pub use model::limits::SCAN_PAGE_READINGS_MAX;
pub use model::reading::{NS_PER_MS, Reading, Record, ms_to_ns, validate_record};
pub use options::background;
pub use options::clock::{Clock, ManualClock, SystemClock};
pub use options::failpoints::{CRASH_POINTS_ENV, FailPoints, PassStep, crash_point};
pub use options::{Durability, IndexApply, MoveRule, Options};
pub use query::{DeviceInfo, DeviceTier, ReadView, ScanCursor, ScanPage};
pub use recovery::{CheckReport, check};
pub use stats::timed_mutex::{HoldTimes, bucket_upper_ns};
pub use stats::{LowerDiagnostics, PassTimes, Stats, TierStats};
