//! Aggregation: writes and bytes per request kind and per file, flushes, reads.

use super::request::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteCount {
    pub writes: u64,
    pub bytes: u64,
}

impl WriteCount {
    fn add(&mut self, bytes: u64) {
        self.writes += 1;
        self.bytes += bytes;
    }
}

#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug)]
pub struct KindCounts {
    pub data: WriteCount,
    pub fs_journal: WriteCount,
    pub metadata: WriteCount,
}

impl KindCounts {
    pub fn total(&self) -> WriteCount {
        WriteCount {
            writes: self.data.writes + self.fs_journal.writes + self.metadata.writes,
            bytes: self.data.bytes + self.fs_journal.bytes + self.metadata.bytes,
        }
    }
}

#[derive(Serialize, Deserialize, Default, Clone, Debug)]
pub struct Summary {
    pub by_kind: KindCounts,
    pub flushes: u64,
    /// Data writes per file, path relative to the mount point.
    pub by_file: BTreeMap<String, WriteCount>,
    pub reads: WriteCount,
    /// Wall time between start and stop.
    pub duration_us: u64,
}

impl Summary {
    /// Adds one classified request. A write that carries a preflush flag also costs a flush
    /// (kernels that split it issue a separate FF request, which is counted on its own; here the
    /// device kept it attached).
    pub fn count(&mut self, kind: Kind, bytes: u64, preflush: bool, file: Option<&str>) {
        match kind {
            Kind::Data => self.by_kind.data.add(bytes),
            Kind::FsJournal => self.by_kind.fs_journal.add(bytes),
            Kind::Metadata => self.by_kind.metadata.add(bytes),
            Kind::Flush => self.flushes += 1,
            Kind::Read => self.reads.add(bytes),
        }
        if preflush && kind != Kind::Flush {
            self.flushes += 1;
        }
        if let Some(f) = file {
            self.by_file.entry(f.to_string()).or_default().add(bytes);
        }
    }
}
