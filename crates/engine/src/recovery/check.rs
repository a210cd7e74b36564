//! `roamkv check`: every checksum of a data directory verified without changing it, its log's
//! end judged by the rules `open` cuts by.

use std::path::Path;

use super::catalog::load_catalog;
use super::tail::{last_written, list_segments, missing_segment};
use crate::commit_log::segment::{self, ScanEnd, Segment};
use crate::commit_log::storage::PlainFiles;
use crate::dir::{DataDir, LowerTierKind};
use crate::lower::open::{Access, open_lower};
use crate::model::error::{Error, Result};
use crate::model::ids::SegmentSeq;

/// What `check` found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub segments: u64,
    pub records: u64,
    pub lower_keys: u64,
    /// A torn tail at the end of the log (normal after a crash; the next open cuts it).
    pub torn_tail: Option<String>,
    /// Damage: bad headers, bad records in the middle of the log, lower-tier checksum errors.
    pub problems: Vec<String>,
}

/// Verifies every checksum of a data directory without changing it: every record of every
/// live segment, and every block of the lower tier. Shares the directory's lock (a writer's
/// makes it `Error::Locked`), opens the segments and a RocksDB lower tier read-only (LevelDB
/// has no read-only open: it is opened as the engine opens it).
pub fn check(path: &Path) -> Result<CheckReport> {
    if !path.join(crate::dir::IDENTITY_FILE).exists() {
        return Err(Error::NotADataDirectory {
            path: path.to_path_buf(),
            reason: format!("it has no {} file", crate::dir::IDENTITY_FILE),
        });
    }
    let mut dir = DataDir::open_read_only(path)?;
    let mut report = CheckReport::default();
    let access = match dir.lower_tier {
        LowerTierKind::RocksDb => Access::ReadOnly,
        LowerTierKind::LevelDb => Access::NoUpgrade,
    };
    let lower = open_lower(&mut dir, 16 << 20, access);
    let catalog = match &lower {
        Ok(l) => load_catalog(l.as_ref()).map(|c| c.meta.last_aged_seq),
        Err(e) => Err(Error::Lower(e.to_string())),
    };
    let last_aged_seq = catalog.unwrap_or_else(|e| {
        report.problems.push(e.to_string());
        SegmentSeq(0)
    });
    let storage = PlainFiles::shared();
    let mut listed = list_segments(&*storage, &dir.log_dir(), false)?;
    listed.retain(|(seq, _)| *seq > last_aged_seq);
    if let Some(error) = missing_segment(&dir.log_dir(), &listed, last_aged_seq) {
        report.problems.push(error.to_string());
    }
    let mut opened = Vec::new();
    for (seq, file) in listed {
        report.segments += 1;
        match Segment::open_as(&storage, &file, seq, true) {
            Ok(segment) => opened.push(segment),
            Err(e) => report.problems.push(e.to_string()),
        }
    }
    let mut ends = Vec::new();
    for segment in &opened {
        let data = segment.read_all()?;
        let end = segment::scan(&data, segment.seq_low(), |_, _| {
            report.records += 1;
            Ok(())
        })?;
        ends.push(end);
    }
    check_tail(&opened, &ends, &mut report);
    match lower.and_then(|lower| lower.verify()) {
        Ok(keys) => report.lower_keys = keys,
        Err(e) => report.problems.push(e.to_string()),
    }
    Ok(report)
}

/// `check`'s judgement of the log's end, by the rules `open` cuts by.
pub(super) fn check_tail(segments: &[Segment], ends: &[ScanEnd], report: &mut CheckReport) {
    if segments.is_empty() {
        return;
    }
    let last = last_written(ends);
    let Some(first_short) = ends
        .iter()
        .position(|e| e.damage.is_some() || e.sealed_at_ms.is_none())
    else {
        return;
    };
    if first_short >= last && ends[first_short].damage.is_none() {
        return; // the active segment: the end of the log
    }
    let end = &ends[first_short];
    let segment = &segments[first_short];
    let offset = end.damage.as_ref().map_or(end.data_end, |(o, _)| *o);
    let reason = end.damage.as_ref().map_or(
        "the segment ends without its SEGMENT_END record while later segments hold data".into(),
        |(_, r)| r.clone(),
    );
    let durable_after = end.valid_record_after.is_some()
        || ends[first_short + 1..]
            .iter()
            .any(|e| e.first_synced_record.is_some());
    let text = format!("{} at offset {offset}: {reason}", segment.path.display());
    if durable_after {
        report.problems.push(format!(
            "{text}; records after it were durable: not a torn tail"
        ));
    } else {
        report.torn_tail = Some(text);
    }
}
