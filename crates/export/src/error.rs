//! An export's errors: the request's (the caller's to fix: a 4xx), the engine's, the output's.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ExportError {
    /// The request cannot be served as given (an unknown format, a start after its end).
    #[error("{0}")]
    BadRequest(String),
    /// A device named in the request is not at this edge.
    #[error("no device {0:?} at this edge")]
    UnknownDevice(String),
    #[error(transparent)]
    Engine(#[from] roamkv_engine::Error),
    /// Writing the output failed: a client that left, a full disk.
    #[error("writing the export: {0}")]
    Output(#[from] std::io::Error),
    /// The format's encoder refused (a bug, or an output error it wrapped).
    #[error("encoding the export: {0}")]
    Encode(String),
}

impl From<arrow_schema::ArrowError> for ExportError {
    fn from(e: arrow_schema::ArrowError) -> Self {
        match e {
            arrow_schema::ArrowError::IoError(_, io) => ExportError::Output(io),
            other => ExportError::Encode(other.to_string()),
        }
    }
}

impl From<parquet::errors::ParquetError> for ExportError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        ExportError::Encode(e.to_string())
    }
}

impl From<csv::Error> for ExportError {
    fn from(e: csv::Error) -> Self {
        if e.is_io_error() {
            match e.into_kind() {
                csv::ErrorKind::Io(io) => ExportError::Output(io),
                other => ExportError::Encode(format!("{other:?}")),
            }
        } else {
            ExportError::Encode(e.to_string())
        }
    }
}

pub type Result<T, E = ExportError> = std::result::Result<T, E>;
