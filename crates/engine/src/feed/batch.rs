//! What a feed read returns: the log's records as readers see them, in whole engine batches.

use crate::commit_log::position::LogPos;
use crate::commit_log::record::Body;

/// One record of the log, as a feed reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedRecord {
    /// A device's first write of an incarnation (engine clock time).
    Register {
        device: String,
        registered_at_ms: u64,
    },
    Put {
        device: String,
        sensor: String,
        ts_ns: i64,
        value: Vec<u8>,
    },
    /// The device left this edge (its data was dropped here).
    Depart { device: String },
    /// The device's readings older than `before_ns` were deleted here.
    Trim { device: String, before_ns: i64 },
}

impl FeedRecord {
    /// Appends what a log record is to a reader: a reading for each of a PUTS record's, in
    /// order; nothing for a SEGMENT_END.
    pub(crate) fn push_from_body(body: &Body<'_>, out: &mut Vec<FeedRecord>) {
        out.push(match *body {
            Body::Register {
                device,
                registered_at_ms,
            } => FeedRecord::Register {
                device: device.to_string(),
                registered_at_ms,
            },
            Body::Put {
                device,
                sensor,
                ts_ns,
                value,
            } => FeedRecord::Put {
                device: device.to_string(),
                sensor: sensor.to_string(),
                ts_ns,
                value: value.to_vec(),
            },
            Body::Puts { device, readings } => {
                out.extend(readings.iter().map(|r| FeedRecord::Put {
                    device: device.to_string(),
                    sensor: r.sensor.to_string(),
                    ts_ns: r.ts_ns,
                    value: r.value.to_vec(),
                }));
                return;
            }
            Body::Depart { device } => FeedRecord::Depart {
                device: device.to_string(),
            },
            Body::Trim { device, before_ns } => FeedRecord::Trim {
                device: device.to_string(),
                before_ns,
            },
            Body::SegmentEnd { .. } => return,
        })
    }
}

/// What one read returns: whole engine batches, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedBatch {
    pub records: Vec<FeedRecord>,
    /// Where the next read starts (after the last batch read; `from` if there was none).
    pub next: LogPos,
    /// Where each engine batch ends: (records before that point, the position after it). A
    /// reader may stop at any of them (e.g. to bound a downstream transaction).
    pub batch_ends: Vec<(usize, LogPos)>,
    /// Bytes of log the read covered.
    pub log_bytes: u64,
}
