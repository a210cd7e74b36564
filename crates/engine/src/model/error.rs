//! The engine's one error type. Expected failures (bad input, bad bytes on disk, I/O errors,
//! a locked directory) are variants; broken invariants are panics.

use std::path::PathBuf;

use crate::model::ids::SegmentSeq;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what} id is empty")]
    EmptyId { what: &'static str },
    #[error("{what} id is {len} bytes, the limit is {max}")]
    IdTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} id contains a NUL byte (ids are names; NUL separates key components)")]
    IdContainsNul { what: &'static str },
    #[error("value is {len} bytes, the limit is {max}")]
    ValueTooLarge { len: usize, max: usize },
    #[error(
        "batch of {records} records / {bytes} encoded bytes is over the limit ({max_records} records, {max_bytes} bytes)"
    )]
    BatchTooLarge {
        records: usize,
        bytes: usize,
        max_records: usize,
        max_bytes: usize,
    },
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// An argument of a call is out of its range (a page limit, a time window); nothing changed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{path} is not a roamkv data directory: {reason}")]
    NotADataDirectory { path: PathBuf, reason: String },
    #[error("{path} is locked by another process (its LOCK file is held)")]
    Locked { path: PathBuf },
    /// A write to an engine opened read-only (`Options::read_only`), or a directory that cannot
    /// be opened so (LevelDB's open always writes).
    #[error("{0}")]
    ReadOnly(String),
    #[error(
        "{path} has data directory format {found}; this build reads format {expected} only (export the data with the roamkv that wrote it, then load it into a new directory)"
    )]
    FormatVersion {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("corrupt data in {file} at offset {offset}: {reason}")]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("lower tier: {0}")]
    Lower(String),
    #[error("the engine stopped accepting writes after an earlier failure: {0}")]
    Poisoned(String),
    /// The log budget (or the file system) is full and maintenance could not free space within
    /// the write-stall bound. Nothing was written; reads work; writes resume once space returns.
    #[error(
        "no space for the write: {reason} (log {log_bytes} of {log_bytes_max} bytes); nothing was written, retry later"
    )]
    NoSpace {
        reason: String,
        log_bytes: u64,
        log_bytes_max: u64,
    },
    #[error("the mapping table holds {devices} devices, the limit (devices_max) is {max}")]
    TooManyDevices { devices: u64, max: u64 },
    /// A change-feed reader's position is no longer in the log: its segment retired (the
    /// hold was released at its cap). The reader recovers by scanning the devices present.
    #[error(
        "the log no longer holds feed position {position} (its oldest segment is {oldest_seq}): a gap"
    )]
    FeedGap {
        position: String,
        oldest_seq: SegmentSeq,
    },
    /// A change-feed position that belongs to another log or another history of this one (the
    /// data directory was replaced, re-created or restored from a copy).
    #[error("feed position {position} does not belong to this log: {reason}")]
    FeedDiverged { position: String, reason: String },
    /// A backup or restore refused or failed (the message says which file and why).
    #[error("{0}")]
    Backup(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attaches the file (or action) to an I/O error, so every message names what failed.
pub(crate) trait IoContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}

impl Error {
    /// True for errors caused by the caller's input; such calls changed nothing.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::EmptyId { .. }
                | Error::IdTooLong { .. }
                | Error::IdContainsNul { .. }
                | Error::ValueTooLarge { .. }
                | Error::BatchTooLarge { .. }
                | Error::InvalidArgument(_)
        )
    }

    /// True for errors after which the same write may succeed later (space came back); such
    /// calls changed nothing.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::NoSpace { .. } | Error::TooManyDevices { .. })
    }
}
