//! Online backup and restore (docs/SERVER.md, "Backup and restore"; docs/FORMAT.md,
//! "Backup sets").
//!
//! - `snapshot`: a consistent copy of an open engine's files while writers go on, and the
//!   position it was taken at (`Engine::snapshot`).
//! - `set`: a directory of numbered backups; a later backup of the same log copies only the
//!   files an earlier one does not hold.
//! - `manifest`: each backup's list of files with their checksums, written last.
//! - `stream`: a snapshot into a set, in-process or as a tar stream across the network.
//! - `restore`: a backup back into a new data directory (a new history of the log), and the
//!   check of a set.
//!
//! It copies files and holds the log through `commit::hold`; it may not change what the engine
//! holds (a backup is read-only towards its source).

mod manifest;
mod restore;
mod set;
mod snapshot;
mod stream;

pub use manifest::{MANIFEST_FORMAT, Manifest, ManifestFile};
pub use restore::{Restored, Verified, restore, verify};
pub use set::{
    BackupSet, BackupWriter, FILES_DIR, FileSink, Have, HaveFile, Linked, MANIFEST_FILE, PAUSE_ENV,
    SET_IDENTITY_FILE, Summary, SummaryFile,
};
pub(crate) use snapshot::remove_staging;
pub use snapshot::{FileKind, STAGING_DIR, Snapshot, SnapshotFile};
pub use stream::{SUMMARY_ENTRY, Stored, read_tar, to_set, write_tar};
