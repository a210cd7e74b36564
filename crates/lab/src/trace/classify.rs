//! Classification: each raw block event becomes a named request (file data, file-system journal,
//! other metadata, flush, read) by its device and LBA, using the file system's `Layout`.
//! A pure function of parsed events, so it is unit-tested on recorded traces in tests/fixtures.

use super::events::{RawEvent, RwbsOp, parse_rwbs, parse_trace_line};
use super::layout::Layout;
use super::request::{Kind, Request};
use super::summary::Summary;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Trace {
    pub requests: Vec<Request>,
    pub summary: Summary,
}

/// Completions are matched to issues FIFO per (device, op, sector).
type PendingIssues = HashMap<((u32, u32), char, u64), VecDeque<usize>>;

/// Turns raw events into classified requests and a summary. `start_ns` is the trace start on the
/// same clock as the events (earlier events are dropped: they leaked in from before the start).
pub fn classify(
    events: &[RawEvent],
    layout: &Layout,
    start_ns: u64,
    device_names: &HashMap<(u32, u32), String>,
) -> Trace {
    let mut sorted: Vec<&RawEvent> = events.iter().filter(|e| e.time_ns >= start_ns).collect();
    sorted.sort_by_key(|e| e.time_ns);
    let mut pending: PendingIssues = HashMap::new();
    let mut requests: Vec<Request> = Vec::new();
    let mut summary = Summary::default();
    for event in sorted {
        let dev = (event.major, event.minor);
        let rwbs = parse_rwbs(&event.rwbs);
        let match_sector = if rwbs.op == 'F' {
            u64::MAX
        } else {
            event.sector
        };
        if !event.issue {
            // A flush machinery completion of a write with 0 sectors carries no new information.
            if let Some(queue) = pending.get_mut(&(dev, rwbs.op, match_sector))
                && let Some(index) = queue.pop_front()
                && let Some(req) = requests.get_mut(index)
            {
                let issue_ns = req.time_us * 1000 + start_ns;
                req.latency_us = Some(event.time_ns.saturating_sub(issue_ns) / 1000);
            }
            continue;
        }
        let Some((op, kind, file)) = name_request(event, rwbs, layout) else {
            continue;
        };
        summary.count(kind, event.bytes, rwbs.preflush, file.as_deref());
        pending
            .entry((dev, rwbs.op, match_sector))
            .or_default()
            .push_back(requests.len());
        requests.push(Request {
            time_us: (event.time_ns - start_ns) / 1000,
            lba: event.sector,
            bytes: event.bytes,
            op: op.to_string(),
            kind,
            file,
            rwbs: event.rwbs.clone(),
            device: device_names
                .get(&dev)
                .cloned()
                .unwrap_or_else(|| format!("{},{}", dev.0, dev.1)),
            comm: event.comm.clone(),
            latency_us: None,
        });
    }
    Trace { requests, summary }
}

/// The operation letter, kind and file (for data writes) of an issued request; None for
/// operations that are neither reads, writes, discards nor flushes.
fn name_request(
    event: &RawEvent,
    rwbs: RwbsOp,
    layout: &Layout,
) -> Option<(&'static str, Kind, Option<String>)> {
    let dev = (event.major, event.minor);
    let end = event.sector + event.nr_sector.max(1);
    let (op, kind, file) = match rwbs.op {
        'F' => ("F", Kind::Flush, None),
        'R' => ("R", Kind::Read, None),
        'W' | 'D' | 'E' | 'Z' => {
            let op = if rwbs.op == 'W' { "W" } else { "D" };
            if Some(dev) == layout.journal_device {
                (op, Kind::FsJournal, None)
            } else if dev != layout.data_device {
                (op, Kind::Metadata, None)
            } else if let Some(kind) = layout.region_of(event.sector, end) {
                (op, kind, None)
            } else if let Some(f) = layout.file_of(event.sector, end).filter(|_| rwbs.op == 'W') {
                let name = if f.deleted {
                    format!("{} (deleted)", f.path)
                } else {
                    f.path.clone()
                };
                (op, Kind::Data, Some(name))
            } else {
                (op, Kind::Metadata, None)
            }
        }
        _ => return None,
    };
    // A zero-byte write that only carries a preflush is the flush itself.
    if rwbs.op == 'W' && event.bytes == 0 && rwbs.preflush {
        return Some(("F", Kind::Flush, file));
    }
    Some((op, kind, file))
}

/// Everything `classify` needs, as recorded: replaying it gives the same `Trace` (test fixtures).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Capture {
    pub lines: Vec<String>,
    pub layout: Layout,
    pub start_ns: u64,
    /// "major,minor" -> device name.
    pub device_names: BTreeMap<String, String>,
}

impl Capture {
    pub fn classify(&self) -> Trace {
        let events: Vec<RawEvent> = self
            .lines
            .iter()
            .filter_map(|l| parse_trace_line(l))
            .collect();
        let names = self
            .device_names
            .iter()
            .filter_map(|(k, v)| {
                let (major, minor) = k.split_once(',')?;
                Some(((major.parse().ok()?, minor.parse().ok()?), v.clone()))
            })
            .collect();
        classify(&events, &self.layout, self.start_ns, &names)
    }
}
