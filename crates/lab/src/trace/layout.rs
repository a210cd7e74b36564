//! Where things live on the traced device: the file-system journal (ext4's journal inode, the XFS
//! internal log, or an external journal device) and each file's extents, read from the tools'
//! output (debugfs, xfs_db, btrfs inspect-internal).

use super::events::SECTOR_BYTES;
use super::request::Kind;
use crate::LabError;
use roamkv_testbed::command::run_command;
use roamkv_testbed::fixture::{Fixture, FsSpec};
use serde::{Deserialize, Serialize};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A half-open sector range [start, end) on the data device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SectorRange {
    pub start: u64,
    pub end: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FileExtent {
    pub path: String,
    pub range: SectorRange,
    /// The file no longer existed when the trace stopped.
    pub deleted: bool,
}

/// Everything the classifier needs to know about the file system on the traced device(s).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Layout {
    /// (major, minor) of the data device.
    pub data_device: (u32, u32),
    /// (major, minor) of an external journal/log device, if any: every write there is journal.
    pub journal_device: Option<(u32, u32)>,
    pub journal_extents: Vec<SectorRange>,
    pub files: Vec<FileExtent>,
}

impl Layout {
    pub(super) fn region_of(&self, start: u64, end: u64) -> Option<Kind> {
        let overlaps = |r: &SectorRange| r.start < end.max(start + 1) && start < r.end;
        if self.journal_extents.iter().any(overlaps) {
            Some(Kind::FsJournal)
        } else {
            None
        }
    }

    pub(super) fn file_of(&self, start: u64, end: u64) -> Option<&FileExtent> {
        // Prefer the extent containing the first sector; else any overlapping one.
        self.files
            .iter()
            .find(|f| f.range.start <= start && start < f.range.end)
            .or_else(|| {
                self.files
                    .iter()
                    .find(|f| f.range.start < end && start < f.range.end)
            })
    }
}

/// Parses debugfs `stat <8>` output: "EXTENTS:\n(0-4095):32801-36896, (4096-8191):40000-44095".
pub fn parse_debugfs_extents(text: &str, block_bytes: u64) -> Vec<SectorRange> {
    let Some((_, extents)) = text.split_once("EXTENTS:") else {
        return Vec::new();
    };
    let per_block = block_bytes / SECTOR_BYTES;
    extents
        .split([',', '\n'])
        .filter_map(|item| {
            let (_, physical) = item.trim().split_once("):")?;
            let (first, last) = match physical.split_once('-') {
                Some((a, b)) => (a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?),
                None => {
                    let b = physical.trim().parse::<u64>().ok()?;
                    (b, b)
                }
            };
            Some(SectorRange {
                start: first * per_block,
                end: (last + 1) * per_block,
            })
        })
        .collect()
}

/// Parses `xfs_db -c 'sb 0' -c 'print logstart logblocks blocksize agblocks agblklog'` output.
pub fn parse_xfs_log(text: &str) -> Option<SectorRange> {
    let value = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().parse().ok()).flatten()
        })
    };
    let (logstart, logblocks) = (value("logstart")?, value("logblocks")?);
    let (block_bytes, agblocks, agblklog) =
        (value("blocksize")?, value("agblocks")?, value("agblklog")?);
    if logstart == 0 {
        return None; // external log
    }
    // XFS fsblock numbers are (ag number << agblklog) | block within the AG.
    let agno = logstart >> agblklog;
    let agbno = logstart & ((1 << agblklog) - 1);
    let per_block = block_bytes / SECTOR_BYTES;
    let start = (agno * agblocks + agbno) * per_block;
    Some(SectorRange {
        start,
        end: start + logblocks * per_block,
    })
}

/// btrfs chunk map: (logical start, length, physical start) of single-stripe DATA chunks, from
/// `btrfs inspect-internal dump-tree -t chunk DEV`. FIEMAP on btrfs reports logical addresses.
pub fn parse_btrfs_chunks(text: &str) -> Vec<(u64, u64, u64)> {
    let mut chunks = Vec::new();
    let mut logical: Option<u64> = None;
    let mut length: Option<u64> = None;
    let mut is_data = false;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.split_once("CHUNK_ITEM ").map(|(_, r)| r) {
            logical = rest.split(')').next().and_then(|v| v.trim().parse().ok());
            length = None;
            is_data = false;
        } else if line.starts_with("length ") {
            let words: Vec<&str> = line.split_whitespace().collect();
            length = words.get(1).and_then(|v| v.parse().ok());
            is_data = words
                .iter()
                .position(|w| *w == "type")
                .and_then(|i| words.get(i + 1))
                .is_some_and(|t| t.starts_with("DATA"));
        } else if line.starts_with("stripe 0 ")
            && is_data
            && let (Some(l), Some(len)) = (logical, length)
            && let Some(phys) = line
                .split_whitespace()
                .skip_while(|w| *w != "offset")
                .nth(1)
                .and_then(|v| v.parse().ok())
        {
            chunks.push((l, len, phys));
        }
    }
    chunks
}

pub(super) fn device_numbers(device: &Path) -> Result<(u32, u32), LabError> {
    let meta = fs::metadata(device).map_err(|e| LabError::io(device, e))?;
    let rdev = meta.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

pub(super) fn journal_extents(fixture: &Fixture) -> Vec<SectorRange> {
    let dev = fixture.device().to_string_lossy().into_owned();
    match fixture.spec() {
        FsSpec::Ext4 | FsSpec::Ext4Writeback | FsSpec::Ext4Journal | FsSpec::Ext4FastCommit => {
            let block_bytes = run_command(&["dumpe2fs", "-h", &dev])
                .ok()
                .and_then(|t| {
                    t.lines().find_map(|l| {
                        l.strip_prefix("Block size:")
                            .and_then(|v| v.trim().parse().ok())
                    })
                })
                .unwrap_or(4096);
            run_command(&["debugfs", "-R", "stat <8>", &dev])
                .map(|t| parse_debugfs_extents(&t, block_bytes))
                .unwrap_or_default()
        }
        FsSpec::Xfs => run_command(&[
            "xfs_db",
            "-r",
            "-c",
            "sb 0",
            "-c",
            "print logstart logblocks blocksize agblocks agblklog",
            &dev,
        ])
        .ok()
        .and_then(|t| parse_xfs_log(&t))
        .into_iter()
        .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn btrfs_chunks(fixture: &Fixture) -> Vec<(u64, u64, u64)> {
    if fixture.spec() != FsSpec::Btrfs {
        return Vec::new();
    }
    let dev = fixture.device().to_string_lossy().into_owned();
    run_command(&[
        "btrfs",
        "inspect-internal",
        "dump-tree",
        "-t",
        "chunk",
        &dev,
    ])
    .map(|t| parse_btrfs_chunks(&t))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debugfs_journal_extents() {
        let text =
            "Inode: 8   Type: regular\nEXTENTS:\n(0-4095):32801-36896, (4096-4100):50000-50004\n";
        let r = parse_debugfs_extents(text, 4096);
        assert_eq!(
            r,
            vec![
                SectorRange {
                    start: 32801 * 8,
                    end: 36897 * 8
                },
                SectorRange {
                    start: 400_000,
                    end: 50005 * 8
                }
            ]
        );
    }

    #[test]
    fn xfs_log_location() {
        let text = "logstart = 65542\nlogblocks = 16384\nblocksize = 4096\nagblocks = 32768\nagblklog = 15\n";
        let r = parse_xfs_log(text).expect("internal log");
        assert_eq!(r.start, (2 * 32768 + 6) * 8);
        assert_eq!(r.end - r.start, 16384 * 8);
        assert!(parse_xfs_log(&text.replace("65542", "0")).is_none());
    }

    #[test]
    fn btrfs_data_chunks_only() {
        let text = "\titem 1 key (FIRST_CHUNK_TREE CHUNK_ITEM 13631488) itemoff 16105 itemsize 80\n\t\tlength 8388608 owner 2 stripe_len 65536 type DATA|single\n\t\t\tstripe 0 devid 1 offset 13631488\n\titem 3 key (FIRST_CHUNK_TREE CHUNK_ITEM 30408704) itemoff 15881 itemsize 112\n\t\tlength 33554432 owner 2 stripe_len 65536 type METADATA|DUP\n\t\t\tstripe 0 devid 1 offset 38797312\n";
        assert_eq!(
            parse_btrfs_chunks(text),
            vec![(13_631_488, 8_388_608, 13_631_488)]
        );
    }
}
