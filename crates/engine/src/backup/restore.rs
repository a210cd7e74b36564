//! Restoring a backup into a new data directory, and verifying a set.
//!
//! A restore builds the directory beside its target (`.NAME.restoring`), checking every file's
//! length and crc32c as it copies, extends the segments to their size (the last one with
//! written zeros, as the engine makes segments: it is the one new writes go to), syncs it all
//! and renames it into place: the target never holds half a restore, and an existing data
//! directory is never touched. The copy has no `feed/`: its first open makes a new log
//! identity, so the change feed and the cloud sink see a new history (a restored edge is not
//! taken for the original), and no feed slot holds its log.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::manifest::{Manifest, ManifestFile, crc_hex};
use super::set::{BackupSet, sync_tree};
use super::snapshot::FileKind;
use crate::commit_log::slots::sync_dir;
use crate::model::error::{Error, IoContext, Result};

const CHUNK_BYTES: usize = 1 << 20;

/// What a restore did.
#[derive(Debug, Clone)]
pub struct Restored {
    pub backup: u64,
    pub position: String,
    pub files: usize,
    pub bytes: u64,
    pub elapsed_ms: u64,
}

/// Restores backup `number` (the newest complete one if None) of `set` into `to`, which must
/// not exist or be an empty directory.
pub fn restore(set: &BackupSet, number: Option<u64>, to: &Path) -> Result<Restored> {
    let started = Instant::now();
    check_target(to)?;
    let manifest = match number {
        Some(n) => set.manifest(n)?,
        None => set.newest_complete()?.ok_or_else(|| {
            Error::InvalidArgument(format!("{} holds no complete backup", set.path.display()))
        })?,
    };
    let building = building_path(to)?;
    if building.exists() {
        // A restore to the same target that was killed: nothing else makes this name.
        fs::remove_dir_all(&building).context(|| format!("removing {}", building.display()))?;
    }
    let built = build(set, &manifest, &building);
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&building);
        return Err(e);
    }
    fs::rename(&building, to)
        .context(|| format!("renaming {} to {}", building.display(), to.display()))?;
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(Restored {
        backup: manifest.backup,
        position: manifest.position.clone(),
        files: manifest.files.len(),
        bytes: manifest.bytes,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// The target may not hold anything: a restore never overwrites.
fn check_target(to: &Path) -> Result<()> {
    match fs::read_dir(to) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(Error::InvalidArgument(format!(
                "{} exists and is not empty: a restore never overwrites a directory (restore \
                 into a new one)",
                to.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(Error::InvalidArgument(
            format!("{} is a file", to.display()),
        )),
        Err(e) => Err(e).context(|| format!("listing {}", to.display())),
    }
}

fn building_path(to: &Path) -> Result<PathBuf> {
    let name = to
        .file_name()
        .ok_or_else(|| Error::InvalidArgument(format!("{} names no directory", to.display())))?;
    Ok(to.with_file_name(format!(".{}.restoring", name.to_string_lossy())))
}

/// Every file of the manifest copied and checked into `dir`, segments extended, all synced.
fn build(set: &BackupSet, manifest: &Manifest, dir: &Path) -> Result<()> {
    for sub in [crate::dir::LOG_DIR, crate::dir::LOWER_DIR] {
        fs::create_dir_all(dir.join(sub)).context(|| format!("creating {}", dir.display()))?;
    }
    let last_segment = manifest
        .files
        .iter()
        .filter(|f| matches!(f.kind(), Ok(FileKind::Segment { .. })))
        .map(|f| f.name.as_str())
        .max();
    for file in &manifest.files {
        let target = dir.join(file.name.replace('/', std::path::MAIN_SEPARATOR_STR));
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).context(|| format!("creating {}", parent.display()))?;
        }
        let mut out = File::create(&target).context(|| format!("creating {}", target.display()))?;
        copy_checked(&set.object_path(file), file, &mut out)?;
        if let FileKind::Segment { segment_bytes } = file.kind()? {
            extend_segment(
                &mut out,
                &target,
                file.bytes,
                segment_bytes,
                last_segment == Some(file.name.as_str()),
            )?;
        }
        out.sync_data()
            .context(|| format!("fdatasync {}", target.display()))?;
    }
    sync_tree(dir)
}

/// Copies a stored file to `out` (when given), checking its length and crc32c; the error names
/// the stored file.
fn copy_checked(source: &Path, file: &ManifestFile, out: &mut dyn Write) -> Result<()> {
    let mut input = File::open(source)
        .context(|| format!("opening {} (backup file {})", source.display(), file.name))?;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut bytes = 0u64;
    let mut crc = 0u32;
    loop {
        let n = input
            .read(&mut buf)
            .context(|| format!("reading {}", source.display()))?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        bytes += n as u64;
        out.write_all(&buf[..n])
            .context(|| format!("writing the copy of {}", file.name))?;
    }
    let corrupt = |offset: u64, reason: String| Error::Corrupt {
        file: source.to_path_buf(),
        offset,
        reason,
    };
    if bytes != file.bytes {
        return Err(corrupt(
            bytes.min(file.bytes),
            format!(
                "{bytes} bytes; the manifest says {} (a truncated or grown copy)",
                file.bytes
            ),
        ));
    }
    if crc_hex(crc) != file.crc32c {
        return Err(corrupt(
            0,
            format!(
                "crc32c {} does not match the manifest's {}: the copy's bytes changed",
                crc_hex(crc),
                file.crc32c
            ),
        ));
    }
    Ok(())
}

/// A segment back at its size: zeros after its data (read as the end of the log). The last
/// segment gets written zeros, so that commits into it stay writes into allocated blocks.
fn extend_segment(
    out: &mut File,
    path: &Path,
    bytes: u64,
    segment_bytes: u64,
    last: bool,
) -> Result<()> {
    if last {
        let zeros = vec![0u8; CHUNK_BYTES];
        let mut at = bytes;
        while at < segment_bytes {
            let n = (segment_bytes - at).min(CHUNK_BYTES as u64) as usize;
            out.write_all(&zeros[..n])
                .context(|| format!("zero-filling {}", path.display()))?;
            at += n as u64;
        }
    }
    out.set_len(segment_bytes)
        .context(|| format!("extending {}", path.display()))
}

/// One backup of a set, checked.
#[derive(Debug)]
pub struct Verified {
    pub backup: u64,
    /// Its manifest, or why it cannot be restored (partial, a file damaged or missing).
    pub outcome: Result<Manifest>,
}

/// Checks every backup of the set: its manifest, and every file it names (present, its length,
/// its crc32c). A file several backups share is read once.
pub fn verify(set: &BackupSet) -> Result<Vec<Verified>> {
    let mut checked: std::collections::HashMap<PathBuf, Result<(), String>> = Default::default();
    let mut out = Vec::new();
    for number in set.numbers()? {
        let outcome = set.manifest(number).and_then(|manifest| {
            for file in &manifest.files {
                let path = set.object_path(file);
                let result = checked
                    .entry(path.clone())
                    .or_insert_with(|| {
                        copy_checked(&path, file, &mut std::io::sink()).map_err(|e| e.to_string())
                    })
                    .clone();
                result.map_err(Error::Backup)?;
            }
            Ok(manifest)
        });
        out.push(Verified {
            backup: number,
            outcome,
        });
    }
    Ok(out)
}
