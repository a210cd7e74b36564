//! The read path's log half: the chosen records, read with pread outside the state lock and
//! checked (checksum, and that each is the record the index meant).
//!
//! A PUTS record holds up to 255 readings of one device, and a scan in (sensor, ts) order
//! chooses readings from many records in turn (an event's ten sensors are in one record): the
//! chosen readings are taken record by record, in log order, each record read, checked and
//! decoded once for all the readings chosen from it (found in it by a map of its readings,
//! state/at_index.rs), and then put back in the scan's order. What is held at once is the
//! readings found and one record.

use std::sync::Arc;

use crate::commit_log::record;
use crate::commit_log::segment::Segment;
use crate::model::error::Error;
use crate::model::reading::Reading;
use crate::state::at_index::{AtIndex, RecordLookup};
use crate::state::upper::IndexEntry;

/// Reads the chosen log records (outside the state lock).
pub(super) fn read_log(
    device: &str,
    chosen: Vec<(String, IndexEntry, Arc<Segment>)>,
) -> Result<Vec<Reading>, ReadError> {
    let record_at = |i: usize| (chosen[i].1.segment_seq, chosen[i].1.offset);
    let mut in_log_order: Vec<usize> = (0..chosen.len()).collect();
    in_log_order.sort_unstable_by_key(|&i| record_at(i));
    let mut found: Vec<Option<Reading>> = (0..chosen.len()).map(|_| None).collect();
    for same_record in in_log_order.chunk_by(|&a, &b| record_at(a) == record_at(b)) {
        let (_, first, segment) = &chosen[same_record[0]];
        let bytes = segment.read_record(first.offset as u64, first.record_len())?;
        let lookup =
            RecordLookup::new(record::decode(&bytes, segment.seq_low()), same_record.len());
        let error = |reason: String| Error::Corrupt {
            file: segment.path.clone(),
            offset: first.offset as u64,
            reason,
        };
        for &i in same_record {
            let (sensor, entry, _) = &chosen[i];
            match lookup.find(sensor, entry.ts_ns) {
                AtIndex::Put { device: d, value } if d == device => {
                    found[i] = Some(Reading {
                        device: device.into(),
                        sensor: sensor.clone(),
                        ts_ns: entry.ts_ns,
                        value: value.to_vec(),
                    });
                }
                AtIndex::Put { .. } => {
                    return Err(ReadError::Moved(error(
                        "the index points at another device's record".into(),
                    )));
                }
                AtIndex::Elsewhere(reason) => return Err(ReadError::Moved(error(reason))),
                AtIndex::Corrupt(reason) => return Err(ReadError::Fatal(error(reason))),
            }
        }
    }
    Ok(found.into_iter().flatten().collect())
}

pub(crate) enum ReadError {
    /// The record was not where the index said: its segment left the log meanwhile.
    Moved(Error),
    Fatal(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Fatal(e)
    }
}
