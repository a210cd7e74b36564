//! The read path's log half: the chosen records, read with pread outside the state lock and
//! checked (checksum, and that each is the record the index meant).

use std::sync::Arc;

use crate::commit_log::segment::Segment;
use crate::model::error::Error;
use crate::model::reading::Reading;
use crate::state::upper::{AtIndex, IndexEntry, at_index};

/// Reads the chosen log records (outside the state lock).
pub(super) fn read_log(
    device: &str,
    chosen: Vec<(String, IndexEntry, Arc<Segment>)>,
) -> Result<Vec<Reading>, ReadError> {
    let mut readings = Vec::with_capacity(chosen.len());
    for (sensor, entry, segment) in chosen {
        let bytes = segment.read_record(entry.offset as u64, entry.record_len())?;
        let error = |reason: String| Error::Corrupt {
            file: segment.path.clone(),
            offset: entry.offset as u64,
            reason,
        };
        match at_index(&bytes, segment.seq_low(), &entry, &sensor) {
            AtIndex::Put { device: d, value } if d == device => readings.push(Reading {
                device: device.into(),
                sensor,
                ts_ns: entry.ts_ns,
                value: value.to_vec(),
            }),
            AtIndex::Put { .. } => {
                return Err(ReadError::Moved(error(
                    "the index points at another device's record".into(),
                )));
            }
            AtIndex::Elsewhere(reason) => return Err(ReadError::Moved(error(reason))),
            AtIndex::Corrupt(reason) => return Err(ReadError::Fatal(error(reason))),
        }
    }
    Ok(readings)
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
