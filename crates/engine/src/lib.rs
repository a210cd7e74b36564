//! roamkv's engine: a two-level key-value store for the sensor streams of devices that come and
//! go at an edge gateway (paper 002, "Design and Implementation of an Efficient Key-Value
//! Storage Engine for Mobile Edge Computing").
//!
//! - New devices live in the **upper tier**: their records are written once, to one shared,
//!   group-committed commit log, and indexed in memory per device (point reads, time ranges).
//! - When a device's **management time** ends and it is still here, it is **migrated**, sorted
//!   and in bulk, into the **lower tier**, an LSM tree (RocksDB, or LevelDB as in the paper).
//! - A device that **departs** is dropped at once: nothing is rewritten.
//! - The commit log is the only journal: the lower tier runs with its own WAL off.
//!
//! Durability: with [`Durability::Sync`] (the default) a write returns after its group's
//! fdatasync; after kill -9 or power loss no acknowledged write is lost (a torn tail is cut by
//! checksum on open). See docs/ENGINE.md for the lifecycle and docs/FORMAT.md for every byte.
//!
//! ```no_run
//! use roamkv_engine::{Engine, Options};
//! let engine = Engine::open("/var/lib/roamkv", Options::default())?;
//! engine.put("car-17", "speed", 1_700_000_000_000, b"88.5")?;
//! assert_eq!(engine.get("car-17", "speed", 1_700_000_000_000)?, Some(b"88.5".to_vec()));
//! engine.depart("car-17")?;
//! # Ok::<(), roamkv_engine::Error>(())
//! ```
#![deny(clippy::unwrap_used)]

mod clock;
mod commit_log;
mod dir;
mod engine;
mod error;
mod failpoints;
pub mod key;
pub mod limits;
mod lower;
mod maintenance;
mod mapping;
mod options;
mod query;
mod reading;
pub mod record;
mod recovery;
pub mod segment;
mod spares;
mod state;
mod stats;
pub mod storage;
mod timed_mutex;
mod trim;
mod upper;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::Engine;
pub use error::{Error, Result};
pub use failpoints::{FailPoints, MigrationStep};
pub use lower::LowerTierKind;
pub use options::{Durability, Options};
pub use query::{DeviceInfo, DeviceTier, SCAN_PAGE_READINGS_MAX, ScanCursor, ScanPage};
pub use reading::{Reading, Record, validate_record};
pub use recovery::{CheckReport, check};
pub use stats::{LowerDiagnostics, PassTimes, Stats, TierStats};
pub use timed_mutex::{HoldTimes, bucket_upper_ns};
