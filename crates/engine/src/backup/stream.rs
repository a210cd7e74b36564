//! A snapshot copied into a backup set: in the same process (`to_set`, `roamkv backup --data`),
//! or across a network as a tar stream (`write_tar` in the server, `read_tar` in the client:
//! `roamkv backup --server`). The stream is plain tar (so `curl … | tar x` shows what it
//! holds): one entry per file sent, named as in the data directory, then the summary
//! (`SUMMARY_ENTRY`, JSON: every file with its checksum, sent or taken from the set). The
//! receiver checks each file's length and crc32c against the summary before it writes the
//! manifest; a stream cut short leaves a partial backup, never a manifest.

use std::io::{Read, Write};

use super::manifest::Manifest;
use super::set::{BackupSet, BackupWriter, Have, Linked, Summary, SummaryFile};
use super::snapshot::{FileKind, Snapshot, SnapshotFile};
use crate::model::error::{Error, IoContext, Result};

/// The stream's last entry.
pub const SUMMARY_ENTRY: &str = "roamkv-backup-summary.json";
/// The largest summary a receiver reads (a few hundred bytes a file).
const SUMMARY_BYTES_MAX: u64 = 256 << 20;
const CHUNK_BYTES: usize = 1 << 20;

/// Counts and checksums what passes through, and fails if the source ends early.
struct Checked<'a> {
    source: Box<dyn Read + 'a>,
    name: &'a str,
    expected: u64,
    bytes: u64,
    crc: u32,
}

impl Read for Checked<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.source.read(out)?;
        if n == 0 && self.bytes != self.expected {
            return Err(std::io::Error::other(format!(
                "{} ended at {} of {} bytes while it was copied",
                self.name, self.bytes, self.expected
            )));
        }
        self.crc = crc32c::crc32c_append(self.crc, &out[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Sends every file of the snapshot the set does not have through `send`, and describes all
/// of them.
fn copy_snapshot(
    snapshot: &Snapshot,
    have: &Have,
    send: &mut dyn FnMut(&SnapshotFile, &mut dyn Read) -> Result<()>,
) -> Result<Summary> {
    let log_id = format!("{:016x}", snapshot.log_id());
    let mut files = Vec::with_capacity(snapshot.files().len());
    for file in snapshot.files() {
        let taken = (have.log_id == log_id && file.kind.is_immutable())
            .then(|| {
                have.files
                    .iter()
                    .find(|h| h.name == file.name && h.bytes == file.bytes)
            })
            .flatten();
        if let Some(held) = taken {
            let mut entry = SummaryFile::new(&file.name, file.bytes, 0, file.kind, true);
            entry.crc32c = held.crc32c.clone();
            files.push(entry);
            snapshot.done_with(file);
            continue;
        }
        let mut checked = Checked {
            source: snapshot.open(file)?,
            name: &file.name,
            expected: file.bytes,
            bytes: 0,
            crc: 0,
        };
        send(file, &mut checked)?;
        if checked.bytes != file.bytes {
            return Err(Error::InvalidArgument(format!(
                "{}: {} bytes sent of {}",
                file.name, checked.bytes, file.bytes
            )));
        }
        files.push(SummaryFile::new(
            &file.name,
            file.bytes,
            checked.crc,
            file.kind,
            false,
        ));
    }
    Ok(Summary {
        log_id,
        lower: snapshot.lower_tier().name().to_string(),
        position: snapshot.position().to_string(),
        files,
    })
}

/// A backup `to_set` stored: its manifest, and which of the files it stored (`bytes_copied`)
/// are hard links to the data directory's table files rather than copies.
#[derive(Debug, Clone)]
pub struct Stored {
    pub manifest: Manifest,
    pub linked: Linked,
}

/// Copies a snapshot into a backup set in this process: the next backup of the set. The lower
/// tier's table files are hard-linked where the set is on the data directory's file system
/// (`BackupWriter::link`), copied elsewhere; every other file is copied.
pub fn to_set(snapshot: &Snapshot, set: &BackupSet) -> Result<Stored> {
    let mut writer = set.begin()?;
    let have = writer.have();
    let mut may_link = true;
    let summary = copy_snapshot(snapshot, &have, &mut |file, reader| {
        if let (true, FileKind::Table, Some(source)) = (may_link, file.kind, file.staged_path()) {
            if writer.link(&file.name, source, reader)? {
                return Ok(());
            }
            // One refusal answers for the whole set: the rest are copied without asking.
            may_link = false;
        }
        let mut sink = writer.create(&file.name)?;
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = reader
                .read(&mut buf)
                .context(|| format!("reading {} of the snapshot", file.name))?;
            if n == 0 {
                break;
            }
            sink.write(&buf[..n])?;
        }
        writer.close(sink)
    })?;
    let linked = writer.linked();
    Ok(Stored {
        manifest: writer.finish(&summary)?,
        linked,
    })
}

/// Writes a snapshot as a tar stream, leaving out the files `have` says the receiver holds.
pub fn write_tar(snapshot: &Snapshot, have: &Have, out: &mut dyn Write) -> Result<Summary> {
    let mut tar = tar::Builder::new(out);
    let mtime = super::set::now_ms() / 1000;
    let summary = copy_snapshot(snapshot, have, &mut |file, reader| {
        let mut header = tar_header(file.bytes, mtime);
        tar.append_data(&mut header, &file.name, reader)
            .context(|| format!("sending {}", file.name))
    })?;
    let json = serde_json::to_vec_pretty(&summary)
        .map_err(|e| Error::InvalidArgument(format!("summary: {e}")))?;
    let mut header = tar_header(json.len() as u64, mtime);
    tar.append_data(&mut header, SUMMARY_ENTRY, json.as_slice())
        .and_then(|()| tar.finish())
        .context(|| "sending the backup's summary".to_string())?;
    Ok(summary)
}

fn tar_header(bytes: u64, mtime: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(bytes);
    header.set_mode(0o640);
    header.set_mtime(mtime);
    header
}

/// Receives a tar stream from `write_tar` into the backup `writer` began, and writes its
/// manifest once every file checked out.
pub fn read_tar(input: &mut dyn Read, mut writer: BackupWriter) -> Result<Manifest> {
    let mut archive = tar::Archive::new(input);
    let mut summary: Option<Summary> = None;
    let entries = archive
        .entries()
        .context(|| "reading the backup stream".to_string())?;
    for entry in entries {
        let mut entry = entry.context(|| "reading the backup stream".to_string())?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if name == SUMMARY_ENTRY {
            let mut json = Vec::new();
            (&mut entry)
                .take(SUMMARY_BYTES_MAX)
                .read_to_end(&mut json)
                .context(|| "reading the backup's summary".to_string())?;
            summary = Some(serde_json::from_slice(&json).map_err(|e| {
                Error::InvalidArgument(format!("the backup's summary does not parse: {e}"))
            })?);
            continue;
        }
        let mut sink = writer.create(&name)?;
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = entry
                .read(&mut buf)
                .context(|| format!("receiving {name}"))?;
            if n == 0 {
                break;
            }
            sink.write(&buf[..n])?;
        }
        writer.close(sink)?;
    }
    let summary = summary.ok_or_else(|| {
        Error::InvalidArgument(
            "the backup stream ended before its summary: the source stopped sending (the \
             server's log says why); this backup stays partial"
                .into(),
        )
    })?;
    writer.finish(&summary)
}
