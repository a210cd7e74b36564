//! One error type for the rig and the lab built on it: every expected failure (bad input, missing
//! tool, not root, busy device, kernel feature absent) is a variant with a message a newcomer can
//! act on.
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown file system {given:?}; valid names: {valid}")]
    UnknownFs { given: String, valid: String },
    #[error("this needs root (loop devices, mount, tracefs); run it with sudo or as root")]
    NotRoot,
    #[error(
        "`{tool}` not found; install the Debian package `{package}` (apt-get install {package})"
    )]
    MissingTool { tool: String, package: String },
    #[error("command failed: `{command}` (exit {status}): {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("device {0} is busy (mounted or in use); unmount it first")]
    DeviceBusy(PathBuf),
    #[error("{0} would be overwritten by mkfs; pass --i-mean-it to confirm")]
    NotConfirmed(PathBuf),
    #[error("tracefs unavailable: {0}")]
    TracefsUnavailable(String),
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
