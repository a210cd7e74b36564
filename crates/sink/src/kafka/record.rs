//! What the Kafka sink writes (docs/SERVER.md, "The Kafka record format"): JSON a consumer
//! reads without roamkv's code.
//!
//! - The data topic: one record per reading, key = the device (UTF-8; Java's murmur2 partitioner,
//!   so one device's readings share a partition, in log order),
//!   value `{"kind":"reading","edge_id":…,"device":…,"sensor":…,"ts_ns":…,"value_b64":…}` plus
//!   `"value_utf8"` when the value is UTF-8 text; one record per departure, after its batch's
//!   readings, value `{"kind":"departure","edge_id":…,"device":…,"position":…}`.
//! - The offsets topic (`<topic>.roamkv-offsets`, compacted): key = the edge id, value
//!   [`Offsets`], written in the same transaction as the records it covers.
//!
//! The value is the bytes the engine holds, in base64: this crate depends on the engine alone
//! (docs/ARCHITECTURE.md), not on the wire crate that reads EdgeX's stored form. A reading that
//! came from EdgeX holds a CBOR map (docs/FORMAT.md, the stored reading: event id, profile,
//! source, value type, units, value, tags…), which any CBOR library decodes; a plain value
//! (`88.5`) is also in `value_utf8`.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// A reading as the data topic carries it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ReadingRecord {
    /// Always `"reading"`.
    pub kind: String,
    pub edge_id: String,
    pub device: String,
    pub sensor: String,
    pub ts_ns: i64,
    /// The value's bytes, standard base64 with padding.
    pub value_b64: String,
    /// The value as text, when it is UTF-8 (an EdgeX stored reading never is: CBOR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_utf8: Option<String>,
}

/// A departure as the data topic carries it.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct DepartureRecord {
    /// Always `"departure"`.
    pub kind: String,
    pub edge_id: String,
    pub device: String,
    /// The edge's log position after the DEPART.
    pub position: String,
}

/// The sink's place, as the offsets topic keeps it (one record per transaction; compaction
/// keeps the last per edge).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Offsets {
    pub generation: i64,
    /// The feed position every record before which is in the data topic (or in a scan's
    /// export, `snapshot_runs`).
    pub position: String,
    /// The devices present must be exported by scanning before tailing from `position`.
    pub snapshot_pending: bool,
    /// The runs of the last scan (one, unless the edge died during it), oldest first; empty
    /// when none ran since the position was set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_runs: Vec<SnapshotRun>,
}

/// A reading's key, in the order a scan exports them (devices by name, then sensor, then ts).
pub type Key = (String, String, i64);

/// One run of a scan: it read the engine as of `view_end` (a read view: every log entry before
/// it, none after) and exported the keys after the previous run's `through` up to its own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SnapshotRun {
    /// The view's end in the log: [segment, offset].
    pub view_end: [u64; 2],
    /// The last key this run exported (None: none yet).
    pub through: Option<Key>,
}

impl Offsets {
    /// The last key any run of the scan exported: a run that starts again skips up to it.
    pub fn snapshot_through(&self) -> Option<&Key> {
        self.snapshot_runs
            .iter()
            .rev()
            .find_map(|r| r.through.as_ref())
    }

    /// Whether the reading `key`, in a log batch that ends at `batch_end` ([segment, offset]),
    /// was exported by the scan: the run that covered its key (the last run covers every key
    /// after the others once the scan is done) read a view that ends at or after the batch.
    pub fn exported_by_scan(&self, batch_end: [u64; 2], key: (&str, &str, i64)) -> bool {
        let last = self.snapshot_runs.len().saturating_sub(1);
        for (i, run) in self.snapshot_runs.iter().enumerate() {
            let covers = run
                .through
                .as_ref()
                .is_some_and(|(d, s, t)| key <= (d.as_str(), s.as_str(), *t))
                || (i == last && !self.snapshot_pending);
            if covers {
                return batch_end <= run.view_end;
            }
        }
        false
    }
}

pub fn reading(edge_id: &str, device: &str, sensor: &str, ts_ns: i64, value: &[u8]) -> Vec<u8> {
    let record = ReadingRecord {
        kind: "reading".into(),
        edge_id: edge_id.into(),
        device: device.into(),
        sensor: sensor.into(),
        ts_ns,
        value_b64: base64::engine::general_purpose::STANDARD.encode(value),
        value_utf8: std::str::from_utf8(value).ok().map(str::to_string),
    };
    serde_json::to_vec(&record).expect("a struct of strings and integers serializes")
}

pub fn departure(edge_id: &str, device: &str, position: &str) -> Vec<u8> {
    let record = DepartureRecord {
        kind: "departure".into(),
        edge_id: edge_id.into(),
        device: device.into(),
        position: position.into(),
    };
    serde_json::to_vec(&record).expect("a struct of strings serializes")
}

impl Offsets {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a struct of strings and integers serializes")
    }

    /// Reads an offsets record; None for bytes that are not one (named in the error).
    pub fn decode(bytes: &[u8]) -> Result<Offsets, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a roamkv offsets record: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_json_with_its_value_in_base64_and_as_text() {
        let bytes = reading("edge-a", "car-1", "speed", 17, b"88.5");
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert_eq!(
            text,
            r#"{"kind":"reading","edge_id":"edge-a","device":"car-1","sensor":"speed","ts_ns":17,"value_b64":"ODguNQ==","value_utf8":"88.5"}"#
        );
        let cbor = reading("edge-a", "car-1", "speed", 17, &[0xa5, 0x61, 0x65]);
        let back: ReadingRecord = serde_json::from_slice(&cbor).expect("json");
        assert_eq!((back.value_b64.as_str(), back.value_utf8), ("pWFl", None));
    }

    #[test]
    fn offsets_round_trip_and_bad_bytes_are_an_error() {
        let offsets = Offsets {
            generation: 2,
            position: "1:2:3:4:5".into(),
            snapshot_pending: true,
            snapshot_runs: vec![SnapshotRun {
                view_end: [3, 4096],
                through: Some(("car".into(), "speed".into(), -5)),
            }],
        };
        assert_eq!(Offsets::decode(&offsets.encode()), Ok(offsets));
        assert!(Offsets::decode(b"{}").is_err());
        assert!(Offsets::decode(b"\xff").is_err());
    }

    #[test]
    fn a_reading_was_exported_by_the_run_that_covered_its_key_if_its_view_held_it() {
        let key = |d: &str| (d.to_string(), "t".to_string(), 1);
        // Run 1 (view at [1, 100]) exported up to car-b, then the edge died; run 2 (view at
        // [1, 200]) exported the rest.
        let mut offsets = Offsets {
            generation: 1,
            position: "p".into(),
            snapshot_pending: true,
            snapshot_runs: vec![
                SnapshotRun {
                    view_end: [1, 100],
                    through: Some(key("car-b")),
                },
                SnapshotRun {
                    view_end: [1, 200],
                    through: Some(key("car-c")),
                },
            ],
        };
        assert_eq!(offsets.snapshot_through(), Some(&key("car-c")));
        let exported = |o: &Offsets, end: u64, d: &str| o.exported_by_scan([1, end], (d, "t", 1));
        assert!(exported(&offsets, 100, "car-a"));
        assert!(
            !exported(&offsets, 150, "car-a"),
            "written after run 1's view"
        );
        assert!(exported(&offsets, 150, "car-c"));
        assert!(
            !exported(&offsets, 150, "car-d"),
            "not exported while the scan is pending"
        );
        offsets.snapshot_pending = false;
        assert!(
            exported(&offsets, 150, "car-d"),
            "the last run covers the rest once done"
        );
        assert!(!exported(&offsets, 250, "car-d"));
        offsets.snapshot_runs.clear();
        assert!(!exported(&offsets, 1, "car-a"));
    }
}
