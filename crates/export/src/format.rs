//! The formats an export writes, by the name a request gives.

use crate::error::{ExportError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Apache Parquet, Snappy-compressed, row groups of at most `ROW_GROUP_BYTES_MAX`.
    Parquet,
    /// An Arrow IPC stream (record batches one after another; `pyarrow.ipc.open_stream`).
    Arrow,
    /// CSV with a header row (RFC 4180).
    Csv,
    /// JSON lines, each a reading as `roamkv scan` prints it (and `roamkv load` reads back).
    Jsonl,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Parquet, Format::Arrow, Format::Csv, Format::Jsonl];

    pub fn parse(name: &str) -> Result<Format> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
                ExportError::BadRequest(format!(
                    "unknown export format {name:?}: use one of {}",
                    names.join(", ")
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Arrow => "arrow",
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
        }
    }

    /// The HTTP Content-Type of an export in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Parquet => "application/vnd.apache.parquet",
            Format::Arrow => "application/vnd.apache.arrow.stream",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Jsonl => "application/jsonl",
        }
    }

    /// A file name's extension for it.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Arrow => "arrows",
            Format::Csv => "csv",
            Format::Jsonl => "jsonl",
        }
    }
}
