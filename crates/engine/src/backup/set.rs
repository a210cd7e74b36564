//! A backup set: a directory of numbered backups of one data directory (docs/FORMAT.md,
//! "Backup sets"). Each backup's `files/` holds the files it copied; its manifest names every
//! file of the data directory, with the backup whose `files/` holds the bytes, so a later
//! backup of the same log takes the segments and table files an earlier one holds (they never
//! change) and copies only what is new.
//!
//! Writing a backup: `begin` (partial backups of killed runs are removed, the next number
//! taken), files received (`create`, `FileSink::write`, `close`: each fdatasync'd), `finish`
//! (directories synced, then the manifest written to a temporary name, synced, renamed: a
//! backup without its manifest is partial and never restored).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::{MANIFEST_FORMAT, Manifest, ManifestFile, check_name, crc_hex, kind_name};
use super::snapshot::FileKind;
use crate::commit_log::slots::{sync_dir, write_durably};
use crate::model::error::{Error, IoContext, Result};

/// The file that makes a directory a backup set.
pub const SET_IDENTITY_FILE: &str = "ROAMKV-BACKUP";
const SET_IDENTITY: &str = "roamkv backup set\nformat 1\n";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const FILES_DIR: &str = "files";

/// A backup set on disk.
#[derive(Debug, Clone)]
pub struct BackupSet {
    pub path: PathBuf,
}

/// What a set already holds that a new backup of the same log may take instead of copying:
/// the immutable files of its newest complete backup. A server taking a backup for a client
/// gets it in the request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Have {
    /// The log those files belong to (16 hex digits); files of another log are never taken.
    pub log_id: String,
    pub files: Vec<HaveFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HaveFile {
    pub name: String,
    pub bytes: u64,
    pub crc32c: String,
}

/// What a backup holds, as its source describes it at the end: every file, copied or taken
/// from an earlier backup, and where the log stood.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub log_id: String,
    pub lower: String,
    pub position: String,
    pub files: Vec<SummaryFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SummaryFile {
    pub name: String,
    pub bytes: u64,
    pub crc32c: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
    /// Not sent: the set's earlier backup holds it (`Have`).
    pub taken: bool,
}

impl SummaryFile {
    pub fn new(name: &str, bytes: u64, crc: u32, kind: FileKind, taken: bool) -> SummaryFile {
        let (kind, segment_bytes) = kind_name(kind);
        SummaryFile {
            name: name.to_string(),
            bytes,
            crc32c: crc_hex(crc),
            kind: kind.to_string(),
            segment_bytes,
            taken,
        }
    }
}

impl BackupSet {
    /// Opens the set at `path`, or makes one where nothing is (a missing or empty directory).
    /// A directory holding anything else is refused and left alone.
    pub fn open_or_create(path: &Path) -> Result<BackupSet> {
        let identity = path.join(SET_IDENTITY_FILE);
        if identity.exists() {
            return BackupSet::open(path);
        }
        let empty = match fs::read_dir(path) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e).context(|| format!("listing {}", path.display())),
        };
        if !empty {
            return Err(Error::InvalidArgument(format!(
                "{} is not empty and is not a backup set (no {SET_IDENTITY_FILE}): a backup \
                 goes into a new directory or a set made by `roamkv backup`",
                path.display()
            )));
        }
        fs::create_dir_all(path).context(|| format!("creating {}", path.display()))?;
        write_durably(&identity, SET_IDENTITY.as_bytes())?;
        Ok(BackupSet {
            path: path.to_path_buf(),
        })
    }

    /// Opens an existing set.
    pub fn open(path: &Path) -> Result<BackupSet> {
        let identity = path.join(SET_IDENTITY_FILE);
        match fs::read_to_string(&identity) {
            Ok(text) if text == SET_IDENTITY => Ok(BackupSet {
                path: path.to_path_buf(),
            }),
            Ok(_) => Err(Error::Corrupt {
                file: identity,
                offset: 0,
                reason: format!("not a backup set of this format ({SET_IDENTITY:?} expected)"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::InvalidArgument(format!(
                    "{} is not a backup set (no {SET_IDENTITY_FILE})",
                    path.display()
                )))
            }
            Err(e) => Err(e).context(|| format!("reading {}", identity.display())),
        }
    }

    /// The numbers of the backups in the set (complete or not), ascending.
    pub fn numbers(&self) -> Result<Vec<u64>> {
        let mut numbers = Vec::new();
        for entry in
            fs::read_dir(&self.path).context(|| format!("listing {}", self.path.display()))?
        {
            let entry = entry.context(|| format!("listing {}", self.path.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.len() == 10 && name.bytes().all(|b| b.is_ascii_digit()) {
                numbers.push(name.parse().unwrap_or(0));
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }

    pub fn backup_dir(&self, number: u64) -> PathBuf {
        self.path.join(format!("{number:010}"))
    }

    /// Where a backup's file is stored.
    pub fn object_path(&self, file: &ManifestFile) -> PathBuf {
        self.backup_dir(file.stored_in)
            .join(FILES_DIR)
            .join(file.name.replace('/', std::path::MAIN_SEPARATOR_STR))
    }

    /// Backup `number`'s manifest; a backup without one is partial (killed before it finished)
    /// and refused.
    pub fn manifest(&self, number: u64) -> Result<Manifest> {
        let dir = self.backup_dir(number);
        let path = dir.join(MANIFEST_FILE);
        if !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} holds no backup {number}",
                self.path.display()
            )));
        }
        if !path.exists() {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "backup {number} is partial: it has no manifest (the backup was stopped \
                     before it finished); it cannot be restored"
                ),
            });
        }
        let manifest = Manifest::read(&path)?;
        if manifest.backup != number {
            return Err(Error::Corrupt {
                file: path,
                offset: 0,
                reason: format!(
                    "the manifest is backup {}'s, not {number}'s",
                    manifest.backup
                ),
            });
        }
        Ok(manifest)
    }

    /// The newest backup that has a manifest that reads.
    pub fn newest_complete(&self) -> Result<Option<Manifest>> {
        for number in self.numbers()?.into_iter().rev() {
            if let Ok(manifest) = self.manifest(number) {
                return Ok(Some(manifest));
            }
        }
        Ok(None)
    }

    /// Starts the next backup: partial backups are removed (no manifest names their files),
    /// and the newest complete one says what may be taken rather than copied.
    pub fn begin(&self) -> Result<BackupWriter> {
        let mut last = 0;
        for number in self.numbers()? {
            let dir = self.backup_dir(number);
            if dir.join(MANIFEST_FILE).exists() {
                last = number;
            } else {
                fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
            }
        }
        let earlier = self.newest_complete()?;
        let number = last + 1;
        let dir = self.backup_dir(number);
        fs::create_dir_all(dir.join(FILES_DIR))
            .context(|| format!("creating {}", dir.display()))?;
        sync_dir(&self.path)?;
        Ok(BackupWriter {
            number,
            dir,
            earlier,
            received: HashMap::new(),
            linked: Linked::default(),
        })
    }
}

/// A backup being written (`BackupSet::begin`).
pub struct BackupWriter {
    number: u64,
    /// `NNNNNNNNNN/` of this backup.
    dir: PathBuf,
    earlier: Option<Manifest>,
    /// Files received: name -> (bytes, crc32c).
    received: HashMap<String, (u64, u32)>,
    /// Of them, those stored as hard links to the data directory's files (`link`).
    linked: Linked,
}

/// What a backup stored as hard links rather than copies (`BackupWriter::link`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Linked {
    pub files: usize,
    pub bytes: u64,
}

/// One file being received.
pub struct FileSink {
    name: String,
    path: PathBuf,
    file: File,
    bytes: u64,
    crc: u32,
}

impl FileSink {
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        self.file
            .write_all(chunk)
            .context(|| format!("writing {}", self.path.display()))?;
        self.crc = crc32c::crc32c_append(self.crc, chunk);
        self.bytes += chunk.len() as u64;
        Ok(())
    }
}

impl BackupWriter {
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Gives the backup up before anything was received (its source refused): its directory
    /// goes, as if it had not begun.
    pub fn abandon(self) -> Result<()> {
        fs::remove_dir_all(&self.dir).context(|| format!("removing {}", self.dir.display()))
    }

    /// What the set holds that this backup may take (empty for a first backup).
    pub fn have(&self) -> Have {
        let Some(earlier) = &self.earlier else {
            return Have::default();
        };
        Have {
            log_id: earlier.log_id.clone(),
            files: earlier
                .files
                .iter()
                .filter(|f| f.kind().is_ok_and(FileKind::is_immutable))
                .map(|f| HaveFile {
                    name: f.name.clone(),
                    bytes: f.bytes,
                    crc32c: f.crc32c.clone(),
                })
                .collect(),
        }
    }

    /// Where file `name` goes in this backup (checked, its folder made).
    fn place(&self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        if self.received.contains_key(name) {
            return Err(Error::InvalidArgument(format!(
                "file {name} was sent twice"
            )));
        }
        let path = self
            .dir
            .join(FILES_DIR)
            .join(name.replace('/', std::path::MAIN_SEPARATOR_STR));
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
        }
        Ok(path)
    }

    /// Starts receiving a file.
    pub fn create(&mut self, name: &str) -> Result<FileSink> {
        let path = self.place(name)?;
        let file = File::create(&path).context(|| format!("creating {}", path.display()))?;
        Ok(FileSink {
            name: name.to_string(),
            path,
            file,
            bytes: 0,
            crc: 0,
        })
    }

    /// Finishes a file: synced, noted with its length and checksum.
    pub fn close(&mut self, sink: FileSink) -> Result<()> {
        self.pause_if_asked();
        sink.file
            .sync_data()
            .context(|| format!("fdatasync {}", sink.path.display()))?;
        self.received.insert(sink.name, (sink.bytes, sink.crc));
        Ok(())
    }

    /// Stores file `name` as a hard link to `source`, a file of the data directory that is
    /// never rewritten once made (a table file of the lower tier; never a log segment, which
    /// the log recycles in place), instead of copying it: RocksDB's checkpoint does the same.
    /// `reader` (the same bytes) is read to its end for the checksum the manifest records.
    /// False, with nothing stored, where the set cannot link it: another file system than the
    /// data directory's (`EXDEV`), one without hard links, or a file at its link limit; the
    /// caller copies it then. The link needs no fdatasync: the lower tier synced the file
    /// before it named it, and `finish` syncs the directories.
    pub fn link(&mut self, name: &str, source: &Path, reader: &mut dyn Read) -> Result<bool> {
        let path = self.place(name)?;
        if let Err(e) = fs::hard_link(source, &path) {
            if cannot_link_here(&e) {
                return Ok(false);
            }
            return Err(e)
                .context(|| format!("linking {} to {}", path.display(), source.display()));
        }
        let mut buf = vec![0u8; LINK_READ_CHUNK_BYTES];
        let (mut bytes, mut crc) = (0u64, 0u32);
        loop {
            let n = reader
                .read(&mut buf)
                .context(|| format!("reading {}", source.display()))?;
            if n == 0 {
                break;
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            bytes += n as u64;
        }
        self.pause_if_asked();
        self.received.insert(name.to_string(), (bytes, crc));
        self.linked.files += 1;
        self.linked.bytes += bytes;
        Ok(true)
    }

    /// What `link` stored so far.
    pub fn linked(&self) -> Linked {
        self.linked
    }

    fn pause_if_asked(&self) {
        if std::env::var(PAUSE_ENV).is_ok_and(|n| n.parse() == Ok(self.received.len() + 1)) {
            // A test's kill -9 lands here, a file into the backup (crates/cli/tests/backup.rs).
            eprintln!(
                "backup: paused after {} files ({PAUSE_ENV})",
                self.received.len() + 1
            );
            loop {
                std::thread::park();
            }
        }
    }

    /// Writes the manifest from the source's summary, after checking it against what arrived:
    /// every file sent was received whole with the checksum the source computed, every file
    /// not sent is one this set holds with that checksum.
    pub fn finish(self, summary: &Summary) -> Result<Manifest> {
        let mut files = Vec::with_capacity(summary.files.len());
        let mut bytes_copied = 0;
        for file in &summary.files {
            check_name(&file.name)?;
            let stored_in = if file.taken {
                self.earlier_copy(&summary.log_id, file)?
            } else {
                let (bytes, crc) = self.received.get(&file.name).copied().ok_or_else(|| {
                    Error::InvalidArgument(format!("file {} was listed but not sent", file.name))
                })?;
                if bytes != file.bytes || crc_hex(crc) != file.crc32c {
                    return Err(Error::Corrupt {
                        file: self.dir.join(FILES_DIR).join(&file.name),
                        offset: bytes.min(file.bytes),
                        reason: format!(
                            "received {bytes} bytes with crc32c {}; the source sent {} bytes \
                             with crc32c {}",
                            crc_hex(crc),
                            file.bytes,
                            file.crc32c
                        ),
                    });
                }
                bytes_copied += bytes;
                self.number
            };
            files.push(ManifestFile {
                name: file.name.clone(),
                bytes: file.bytes,
                crc32c: file.crc32c.clone(),
                stored_in,
                kind: file.kind.clone(),
                segment_bytes: file.segment_bytes,
            });
        }
        let mut manifest = Manifest {
            format: MANIFEST_FORMAT,
            backup: self.number,
            created_ms: now_ms(),
            log_id: summary.log_id.clone(),
            lower: summary.lower.clone(),
            position: summary.position.clone(),
            roamkv: env!("CARGO_PKG_VERSION").to_string(),
            bytes: files.iter().map(|f| f.bytes).sum(),
            bytes_copied,
            files,
            checksum: String::new(),
        };
        sync_tree(&self.dir)?;
        let bytes = manifest.to_bytes()?;
        write_durably(&self.dir.join(MANIFEST_FILE), &bytes)?;
        Ok(manifest)
    }

    /// The earlier backup holding a file the source did not send.
    fn earlier_copy(&self, log_id: &str, file: &SummaryFile) -> Result<u64> {
        self.earlier
            .as_ref()
            .filter(|earlier| earlier.log_id == log_id)
            .and_then(|earlier| {
                earlier.files.iter().find(|f| {
                    f.name == file.name && f.bytes == file.bytes && f.crc32c == file.crc32c
                })
            })
            .map(|f| f.stored_in)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "file {} was not sent, and the set holds no copy of it with {} bytes and \
                     crc32c {}",
                    file.name, file.bytes, file.crc32c
                ))
            })
    }
}

/// Bytes a linked file is read in for its checksum.
const LINK_READ_CHUNK_BYTES: usize = 1 << 20;

/// Whether a failed `link(2)` means "copy instead": the set is on another file system, its
/// file system has no hard links, or the file has as many links as it may. Any other error
/// (no space, no permission on the set, an I/O error) is the backup's error.
fn cannot_link_here(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EXDEV | libc::EPERM | libc::EMLINK | libc::EOPNOTSUPP)
    )
}

/// The environment variable that stops a backup after that many files, for the kill -9 test.
pub const PAUSE_ENV: &str = "ROAMKV_BACKUP_PAUSE_AFTER_FILES";

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// fsyncs every directory under `dir` and `dir` itself (the files were synced as written).
pub(crate) fn sync_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).context(|| format!("listing {}", dir.display()))? {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            sync_tree(&entry.path())?;
        }
    }
    sync_dir(dir)
}
