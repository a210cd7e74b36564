//! What one classified block request is: its kind (file data, file-system journal, other
//! metadata, flush, read) and where and when it went.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Data,
    FsJournal,
    Metadata,
    Flush,
    Read,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::FsJournal => "fs_journal",
            Kind::Metadata => "metadata",
            Kind::Flush => "flush",
            Kind::Read => "read",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Request {
    /// Issue time, microseconds since the tracer started.
    pub time_us: u64,
    /// Start sector (512 bytes) on `device`.
    pub lba: u64,
    pub bytes: u64,
    /// "W" write, "R" read, "F" flush, "D" discard (counted with metadata).
    pub op: String,
    pub kind: Kind,
    /// Path relative to the mount point, for data writes; " (deleted)" appended if the file was
    /// gone when the trace stopped.
    pub file: Option<String>,
    /// The kernel's rwbs flags, e.g. "WS", "WSM", "FF", "WFS" (FUA).
    pub rwbs: String,
    /// Which device ("loop3"); differs from the data device for an external journal/log.
    pub device: String,
    /// Issuing task as the kernel recorded it (e.g. "jbd2/loop3-8", "kworker/1:1H", "dd").
    pub comm: String,
    /// Issue -> completion, when the completion was seen.
    pub latency_us: Option<u64>,
}
