//! The data directory: its identity file, its lock, and its layout (docs/FORMAT.md, "Directory").
//!
//! ```text
//! DIR/ROAMKV        identity: "roamkv data directory\nformat 3\nlower rocksdb\n"
//! DIR/LOCK          held with an exclusive flock while an Engine (or `roamkv check`) has it open
//!                   (a shared one while it is open read-only)
//! DIR/log/*.seg     commit-log segments
//! DIR/lower/        the lower tier's own files (rocksdb/ or leveldb/)
//! ```
//!
//! Owns the directory's identity, LOCK and file names, and (`format`) every magic and version
//! number the engine writes. It may not read or write the log's or the lower tier's contents.

pub(crate) mod format;

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::model::error::{Error, IoContext, Result};

pub const IDENTITY_FILE: &str = "ROAMKV";
pub const LOCK_FILE: &str = "LOCK";
pub const LOG_DIR: &str = "log";
pub const LOWER_DIR: &str = "lower";
/// The data directory's format and identity line (format.rs).
pub use crate::dir::format::{
    DIR_FORMAT_VERSION as FORMAT_VERSION, DIR_IDENTITY_FIRST_LINE as IDENTITY_FIRST_LINE,
};

/// Which LSM engine holds the lower tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LowerTierKind {
    #[default]
    RocksDb,
    LevelDb,
}

impl LowerTierKind {
    pub fn name(self) -> &'static str {
        match self {
            LowerTierKind::RocksDb => "rocksdb",
            LowerTierKind::LevelDb => "leveldb",
        }
    }
    pub fn from_name(name: &str) -> Option<LowerTierKind> {
        match name {
            "rocksdb" => Some(LowerTierKind::RocksDb),
            "leveldb" => Some(LowerTierKind::LevelDb),
            _ => None,
        }
    }
}

/// Whether `path` is a roamkv data directory (it has the identity file): read-only tools check
/// this first rather than let `Engine::open` make a new, empty one at a mistyped path.
pub fn is_data_dir(path: &Path) -> bool {
    path.join(IDENTITY_FILE).is_file()
}

/// An open data directory. The flock is released when this is dropped (or the process dies).
#[derive(Debug)]
pub struct DataDir {
    pub path: PathBuf,
    pub lower_tier: LowerTierKind,
    /// Its format: `FORMAT_VERSION`, or `format::DIR_FORMAT_READINGS` until it is upgraded.
    pub format: u32,
    /// None: opened read-only where no LOCK file was (nothing is created to lock).
    _lock: Option<File>,
}

impl DataDir {
    pub fn log_dir(&self) -> PathBuf {
        self.path.join(LOG_DIR)
    }
    pub fn lower_dir(&self) -> PathBuf {
        self.path.join(LOWER_DIR)
    }

    /// Opens `path`, creating it if it does not exist or is empty, with the lower tier
    /// `for_new` (default RocksDB). An existing directory keeps the lower tier it was made with.
    pub fn open(path: &Path, for_new: Option<LowerTierKind>) -> Result<DataDir> {
        let identity = path.join(IDENTITY_FILE);
        let exists = identity.exists();
        if !exists {
            if path.exists() && !holds_only_creation_leftovers(path)? {
                return Err(Error::NotADataDirectory {
                    path: path.to_path_buf(),
                    reason: format!("it is not empty and has no {IDENTITY_FILE} file"),
                });
            }
            fs::create_dir_all(path).context(|| format!("creating {}", path.display()))?;
        }
        let lock = lock(path)?;
        let (lower_tier, format) = if exists {
            read_identity(&identity)?
        } else {
            let kind = for_new.unwrap_or_default();
            fs::create_dir_all(path.join(LOG_DIR))
                .context(|| format!("creating {}/{LOG_DIR}", path.display()))?;
            fs::create_dir_all(path.join(LOWER_DIR))
                .context(|| format!("creating {}/{LOWER_DIR}", path.display()))?;
            write_identity(path, kind, FORMAT_VERSION)?;
            (kind, FORMAT_VERSION)
        };
        Ok(DataDir {
            path: path.to_path_buf(),
            lower_tier,
            format,
            _lock: Some(lock),
        })
    }

    /// Opens an existing directory without creating or changing anything in it: its LOCK, if
    /// there is one, opened read-only and held with a shared flock (a writer holding it makes
    /// this `Error::Locked`; readers share it). Without a LOCK file (a directory no engine
    /// opened since it was copied) nothing is locked.
    pub fn open_read_only(path: &Path) -> Result<DataDir> {
        let identity = path.join(IDENTITY_FILE);
        if !identity.is_file() {
            return Err(Error::NotADataDirectory {
                path: path.to_path_buf(),
                reason: format!("it has no {IDENTITY_FILE} file"),
            });
        }
        let lock_path = path.join(LOCK_FILE);
        let lock = match File::open(&lock_path) {
            Ok(file) => match file.try_lock_shared() {
                Ok(()) => Some(file),
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::Locked {
                        path: path.to_path_buf(),
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::Io {
                        context: format!("locking {}", lock_path.display()),
                        source: e,
                    });
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Error::Io {
                    context: format!("opening {}", lock_path.display()),
                    source: e,
                });
            }
        };
        let (lower_tier, format) = read_identity(&identity)?;
        Ok(DataDir {
            path: path.to_path_buf(),
            lower_tier,
            format,
            _lock: lock,
        })
    }

    /// Records that the directory is now of the current format (its upgrade is complete and
    /// durable): the identity file replaced atomically.
    pub(crate) fn mark_upgraded(&mut self) -> Result<()> {
        write_identity(&self.path, self.lower_tier, FORMAT_VERSION)?;
        self.format = FORMAT_VERSION;
        Ok(())
    }
}

/// True if `path` is empty or holds only what a creation killed before it wrote the identity
/// file leaves behind (LOCK, ROAMKV.tmp, empty log/ and lower/): open then finishes the creation.
/// Refusing such a directory would make a crash in the first milliseconds of a new directory's
/// life permanent (found by `roamkv bench crash`).
fn holds_only_creation_leftovers(path: &Path) -> Result<bool> {
    let list = |dir: &Path| -> Result<Vec<(String, bool)>> {
        fs::read_dir(dir)
            .context(|| format!("listing {}", dir.display()))?
            .map(|entry| {
                let entry = entry.context(|| format!("listing {}", dir.display()))?;
                let is_dir = entry
                    .file_type()
                    .context(|| format!("stat {}", entry.path().display()))?
                    .is_dir();
                Ok((entry.file_name().to_string_lossy().into_owned(), is_dir))
            })
            .collect()
    };
    let identity_tmp = format!("{IDENTITY_FILE}.tmp");
    for (name, is_dir) in list(path)? {
        let leftover = match (name.as_str(), is_dir) {
            (LOCK_FILE, false) => true,
            (n, false) if n == identity_tmp => true,
            (LOG_DIR | LOWER_DIR, true) => list(&path.join(&name))?.is_empty(),
            _ => false,
        };
        if !leftover {
            return Ok(false);
        }
    }
    Ok(true)
}

fn lock(path: &Path) -> Result<File> {
    let lock_path = path.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .context(|| format!("opening {}", lock_path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: path.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::Io {
            context: format!("locking {}", lock_path.display()),
            source: e,
        }),
    }
}

fn write_identity(path: &Path, kind: LowerTierKind, format: u32) -> Result<()> {
    let text = format!(
        "{IDENTITY_FIRST_LINE}\nformat {format}\nlower {}\n",
        kind.name()
    );
    let tmp = path.join(format!("{IDENTITY_FILE}.tmp"));
    fs::write(&tmp, text).context(|| format!("writing {}", tmp.display()))?;
    File::open(&tmp)
        .and_then(|f| f.sync_all())
        .context(|| format!("syncing {}", tmp.display()))?;
    fs::rename(&tmp, path.join(IDENTITY_FILE)).context(|| format!("renaming {}", tmp.display()))?;
    File::open(path)
        .and_then(|d| d.sync_all())
        .context(|| format!("syncing directory {}", path.display()))
}

/// (lower tier, format) of an identity file.
fn read_identity(identity: &Path) -> Result<(LowerTierKind, u32)> {
    let dir = identity.parent().unwrap_or(identity).to_path_buf();
    let bad = |reason: String| Error::NotADataDirectory {
        path: dir.clone(),
        reason,
    };
    let text = fs::read_to_string(identity)
        .map_err(|e| bad(format!("cannot read {IDENTITY_FILE}: {e}")))?;
    let mut lines = text.lines();
    if lines.next() != Some(IDENTITY_FIRST_LINE) {
        return Err(bad(format!(
            "{IDENTITY_FILE} does not start with \"{IDENTITY_FIRST_LINE}\""
        )));
    }
    let version: u32 = lines
        .next()
        .and_then(|l| l.strip_prefix("format "))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad(format!("{IDENTITY_FILE} has no format line")))?;
    if version != FORMAT_VERSION && version != format::DIR_FORMAT_READINGS {
        return Err(Error::FormatVersion {
            path: dir.clone(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let kind = lines
        .next()
        .and_then(|l| l.strip_prefix("lower "))
        .and_then(LowerTierKind::from_name)
        .ok_or_else(|| bad(format!("{IDENTITY_FILE} names no known lower tier")))?;
    Ok((kind, version))
}
