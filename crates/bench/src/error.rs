//! The bench's one error type. Each variant says what failed: the user's arguments, a step of a
//! run, a check of its results, a file, a child process or socket, an HTTP request, one of the
//! engines under test, the rig (testbed), the wire contract, JSON or CSV. Messages are what
//! `roamkv bench` prints after "roamkv bench: ".

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad arguments or a missing prerequisite: a message the user can act on.
    #[error("{0}")]
    Usage(String),
    /// A benchmark (or a step of it) failed: a child that died, a server that did not answer.
    #[error("{0}")]
    Run(String),
    /// The benchmark ran, but its results failed a check (lost or wrong data).
    #[error("{0}")]
    Check(String),
    /// A file or directory could not be made, opened, read, written or removed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done to it: "creating", "writing 42 to", ...
        op: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The system refused a step that names no file: a child process started, fed or waited
    /// for, a port, this program's own path.
    #[error("{step}: {source}")]
    Os {
        step: String,
        source: std::io::Error,
    },
    /// An HTTP request got no answer (connection refused or reset, a malformed response).
    #[error("{request}: {source}")]
    Http {
        /// "POST /path to 127.0.0.1:8080"
        request: String,
        source: std::io::Error,
    },
    /// An HTTP request was answered with a status that is not a success.
    #[error("{request}: {status} {body}")]
    HttpStatus {
        request: String,
        status: u16,
        body: String,
    },
    /// A named step failed; `source` says why ("closing the engine: ...").
    #[error("{step}: {source}")]
    Step {
        step: String,
        source: Box<BenchError>,
    },
    #[error(transparent)]
    Engine(#[from] roamkv_engine::Error),
    #[error(transparent)]
    RocksDb(#[from] rocksdb::Error),
    #[error(transparent)]
    LevelDb(#[from] roamkv_leveldb::Error),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// The rig: root, tools, loop devices and file systems, reports, PostgreSQL, qemu.
    #[error(transparent)]
    Rig(#[from] roamkv_testbed::Error),
    #[error(transparent)]
    Wire(#[from] roamkv_wire::WireError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Csv(#[from] csv::Error),
}

pub type Result<T, E = BenchError> = std::result::Result<T, E>;

impl BenchError {
    /// `op` on the file or directory `path` failed.
    pub fn io(op: impl Into<String>, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            op: op.into(),
            path: path.into(),
            source,
        }
    }

    /// `step` (a child process, a socket, ...) failed in the system.
    pub fn os(step: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Os {
            step: step.into(),
            source,
        }
    }

    /// `step` failed because of `source`.
    pub fn step(step: impl Into<String>, source: impl Into<BenchError>) -> Self {
        BenchError::Step {
            step: step.into(),
            source: Box::new(source.into()),
        }
    }
}
