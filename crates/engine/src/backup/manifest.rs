//! A backup's manifest (`SET/NNNNNNNNNN/manifest.json`, docs/FORMAT.md "Backup sets"): what
//! the backup holds, file by file with a checksum, where each file's bytes are stored, and the
//! position of the log it was taken at. Written last: a backup without one is partial.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::snapshot::FileKind;
use crate::model::error::{Error, IoContext, Result};

/// The manifest format this build writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// One backup, as its manifest says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub format: u32,
    /// Its number in the set (1, 2, …).
    pub backup: u64,
    /// When it finished (ms since the epoch).
    pub created_ms: u64,
    /// The backed-up directory's log identity (`feed/LOG_ID`, 16 hex digits).
    pub log_id: String,
    /// The lower tier (`rocksdb` or `leveldb`).
    pub lower: String,
    /// The recorded position (a feed position, docs/FORMAT.md "Feed positions"): every write
    /// acknowledged before the backup began is before it; nothing after it is in the backup.
    pub position: String,
    /// The roamkv that wrote it.
    pub roamkv: String,
    pub files: Vec<ManifestFile>,
    /// Bytes of all its files.
    pub bytes: u64,
    /// Bytes this backup stored in its `files/`: copied, or hard-linked to the data
    /// directory's table files (the rest it takes from earlier backups of the set).
    pub bytes_copied: u64,
    /// crc32c (8 hex digits) of this manifest serialized with `checksum` empty.
    pub checksum: String,
}

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestFile {
    /// Its path in the data directory, '/'-separated.
    pub name: String,
    pub bytes: u64,
    /// crc32c of its bytes, 8 hex digits.
    pub crc32c: String,
    /// The backup of the set whose `files/` holds its bytes (this one, or an earlier one).
    pub stored_in: u64,
    /// `segment`, `table` or `other` (`FileKind`).
    pub kind: String,
    /// A segment's length in the data directory (the rest zeros); absent for other files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
}

impl ManifestFile {
    pub fn kind(&self) -> Result<FileKind> {
        match (self.kind.as_str(), self.segment_bytes) {
            ("segment", Some(segment_bytes)) => Ok(FileKind::Segment { segment_bytes }),
            ("table", None) => Ok(FileKind::Table),
            ("other", None) => Ok(FileKind::Other),
            (kind, _) => Err(Error::InvalidArgument(format!(
                "file {} has kind {kind:?} (with segment_bytes {:?}): not a kind this build knows",
                self.name, self.segment_bytes
            ))),
        }
    }
}

/// The manifest's names of the kinds.
pub fn kind_name(kind: FileKind) -> (&'static str, Option<u64>) {
    match kind {
        FileKind::Segment { segment_bytes } => ("segment", Some(segment_bytes)),
        FileKind::Table => ("table", None),
        FileKind::Other => ("other", None),
    }
}

pub fn crc_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

impl Manifest {
    /// Its bytes on disk, with the checksum set.
    pub fn to_bytes(&mut self) -> Result<Vec<u8>> {
        self.checksum = String::new();
        let unsigned = serde_json::to_vec(self).map_err(json_err)?;
        self.checksum = crc_hex(crc32c::crc32c(&unsigned));
        let mut bytes = serde_json::to_vec_pretty(self).map_err(json_err)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Reads and checks one: it parses, its checksum holds, its format is this build's, and it
    /// names no file outside the data directory.
    pub fn read(path: &Path) -> Result<Manifest> {
        let bytes = std::fs::read(path).context(|| format!("reading {}", path.display()))?;
        let corrupt = |reason: String| Error::Corrupt {
            file: path.to_path_buf(),
            offset: 0,
            reason,
        };
        let mut manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("not a manifest: {e}")))?;
        let stated = std::mem::take(&mut manifest.checksum);
        let unsigned = serde_json::to_vec(&manifest).map_err(json_err)?;
        let actual = crc_hex(crc32c::crc32c(&unsigned));
        if stated != actual {
            return Err(corrupt(format!(
                "checksum {stated} does not match its contents ({actual}): the manifest was changed"
            )));
        }
        manifest.checksum = stated;
        if manifest.format != MANIFEST_FORMAT {
            return Err(corrupt(format!(
                "manifest format {}; this build reads format {MANIFEST_FORMAT}",
                manifest.format
            )));
        }
        for file in &manifest.files {
            check_name(&file.name).map_err(|e| corrupt(e.to_string()))?;
            file.kind().map_err(|e| corrupt(e.to_string()))?;
        }
        Ok(manifest)
    }
}

/// A file name a backup may hold: relative, '/'-separated, each part of `[A-Za-z0-9._-]` and
/// not `.` or `..` (a stream or a manifest cannot name a file outside the directory).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        });
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{name:?} is not a file name a backup holds"
        )))
    }
}

fn json_err(e: serde_json::Error) -> Error {
    Error::InvalidArgument(format!("manifest: {e}"))
}
