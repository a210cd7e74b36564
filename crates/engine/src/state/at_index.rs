//! What the log holds where an index entry points: a decoded record's reading of one sensor at
//! one ts, found once (`in_decoded`) or, for several readings of one record, through a map of its
//! readings (`RecordLookup`). The read path (query/log.rs) and the move to the lower tier
//! (maintenance/age_out/runs.rs) check every reading they take from the log through it.

use std::collections::HashMap;

use crate::commit_log::record::{Body, Decode};

/// What the log holds where an index entry points.
pub(crate) enum AtIndex<'a> {
    /// The indexed reading (same sensor and timestamp): its device and value.
    Put { device: &'a str, value: &'a [u8] },
    /// Not the indexed reading: the segment was retired and reused meanwhile (why, in words).
    Elsewhere(String),
    /// Bytes of this segment that fail their checksum: damage on disk. (A reused segment fails
    /// the sequence check instead, which reads as `Elsewhere`.)
    Corrupt(String),
}

/// What a decoded record holds of an index entry's reading (`sensor` at `ts_ns`), found by
/// walking the record's readings: `RecordLookup`'s way when one reading of a record is wanted.
fn in_decoded<'a>(record: &Decode<'a>, sensor: &str, ts_ns: i64) -> AtIndex<'a> {
    match record {
        Decode::Record(d) => reading_in(&d.body, sensor, ts_ns),
        Decode::End => AtIndex::Elsewhere("the index points at no record of this segment".into()),
        Decode::Corrupt(reason) => AtIndex::Corrupt(reason.clone()),
    }
}

/// A decoded record's readings found by (sensor, ts), for reading several of them: `in_decoded`
/// parses a PUTS record's readings up to the one it looks for, each time.
pub(crate) enum RecordLookup<'a> {
    /// A PUTS record's readings, the last of each (sensor, ts), as the index kept them.
    Puts {
        device: &'a str,
        readings: HashMap<(&'a str, i64), &'a [u8]>,
    },
    /// Any other record, or a PUTS record one reading is wanted of: `in_decoded`.
    Decoded(Decode<'a>),
}

impl<'a> RecordLookup<'a> {
    /// A lookup of `record`, where `wanted` readings will be looked up.
    pub(crate) fn new(record: Decode<'a>, wanted: usize) -> RecordLookup<'a> {
        if wanted > 1
            && let Decode::Record(d) = &record
            && let Body::Puts {
                device,
                readings: puts,
            } = d.body
        {
            let mut readings = HashMap::with_capacity(puts.len());
            for r in puts.iter() {
                readings.insert((r.sensor, r.ts_ns), r.value);
            }
            return RecordLookup::Puts { device, readings };
        }
        RecordLookup::Decoded(record)
    }

    pub(crate) fn find(&self, sensor: &str, ts_ns: i64) -> AtIndex<'a> {
        match self {
            RecordLookup::Puts { device, readings } => match readings.get(&(sensor, ts_ns)) {
                Some(value) => AtIndex::Put { device, value },
                None => not_in_record(sensor, ts_ns),
            },
            RecordLookup::Decoded(record) => in_decoded(record, sensor, ts_ns),
        }
    }
}

fn not_in_record<'a>(sensor: &str, ts_ns: i64) -> AtIndex<'a> {
    AtIndex::Elsewhere(format!(
        "the index points at a record without the reading of {sensor} at {ts_ns}"
    ))
}

/// The reading of `sensor` at `ts_ns` in a decoded record: of a PUTS record, the last such
/// (a later one replaces an earlier one of the same sensor and ts, as the index did).
fn reading_in<'a>(body: &Body<'a>, sensor: &str, ts_ns: i64) -> AtIndex<'a> {
    let found = match *body {
        Body::Put {
            device,
            sensor: s,
            ts_ns: t,
            value,
        } if t == ts_ns && s == sensor => Some((device, value)),
        Body::Puts { device, readings } => readings
            .iter()
            .filter(|r| r.ts_ns == ts_ns && r.sensor == sensor)
            .last()
            .map(|r| (device, r.value)),
        _ => None,
    };
    match found {
        Some((device, value)) => AtIndex::Put { device, value },
        None => not_in_record(sensor, ts_ns),
    }
}
