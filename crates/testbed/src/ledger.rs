//! The writers' ledger of the fault tests (a kill -9, a crash point, a link cut, a handoff, a
//! sink): what each writer was told about each reading — acknowledged, or no answer (the server
//! died under the request: the reading may or may not be there) — held against what a reader
//! finds afterwards. Exactly once is shown by counting: every acknowledged reading found once
//! with its value, nothing found that was never written, nothing found twice. A refused write
//! (e.g. 409 from a fenced device) is neither: it is not noted.
//!
//! A reading is (device, ts_ns) with the value `value_of(device, ts_ns)`, so that a reader can
//! tell a wrong value from a right one without the writer's memory.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// The readings examples a failure names.
const EXAMPLES_MAX: usize = 10;

/// One reading as the ledger keys it.
pub type Key = (String, i64);

#[derive(Debug, Default, Clone)]
pub struct Ledger {
    acked: BTreeMap<Key, String>,
    unanswered: BTreeSet<Key>,
    next_ts: BTreeMap<String, i64>,
}

/// The value every ledger writer writes for a reading: a reader checks it without the ledger.
pub fn value_of(device: &str, ts_ns: i64) -> String {
    format!("{device}/{ts_ns}")
}

/// `range`'s readings of `device` and `sensor` as the native route's JSON lines, each with its
/// ledger value.
pub fn native_lines(device: &str, sensor: &str, range: Range<i64>) -> String {
    range
        .map(|ts| {
            format!(
                "{{\"device\":\"{device}\",\"sensor\":\"{sensor}\",\"ts_ns\":{ts},\"value\":\"{}\"}}\n",
                value_of(device, ts)
            )
        })
        .collect()
}

impl Ledger {
    /// The next `n` timestamps of `device` (1, 2, ... in the order they are asked for): a
    /// reading is never written twice by the writers, so a reading found twice is a duplicate.
    pub fn next(&mut self, device: &str, n: i64) -> Range<i64> {
        let from = *self.next_ts.entry(device.to_string()).or_insert(1);
        self.next_ts.insert(device.to_string(), from + n);
        from..from + n
    }

    /// The writer was told `range` of `device` is stored.
    pub fn acknowledged(&mut self, device: &str, range: Range<i64>) {
        for ts in range {
            self.acked
                .insert((device.to_string(), ts), value_of(device, ts));
        }
    }

    /// The writer got no answer for `range` of `device`.
    pub fn unanswered(&mut self, device: &str, range: Range<i64>) {
        self.unanswered
            .extend(range.map(|ts| (device.to_string(), ts)));
    }

    /// Notes a write's outcome by its HTTP status: 2xx acknowledged, 0 (no answer) unanswered,
    /// anything else refused (not noted). Returns the status.
    pub fn note(&mut self, device: &str, range: Range<i64>, status: u16) -> u16 {
        match status {
            200..=299 => self.acknowledged(device, range),
            0 => self.unanswered(device, range),
            _ => {}
        }
        status
    }

    /// Acknowledged readings in all.
    pub fn acknowledged_count(&self) -> usize {
        self.acked.len()
    }

    /// Acknowledged readings of `device`, in timestamp order.
    pub fn acknowledged_of(&self, device: &str) -> Vec<i64> {
        self.acked
            .keys()
            .filter(|(d, _)| d == device)
            .map(|(_, ts)| *ts)
            .collect()
    }

    /// Holds what a reader `found` (device, ts, value; duplicates kept) against the ledger,
    /// for the devices `devices` (None: every device the ledger or the reader names): every
    /// acknowledged reading found once with its value, nothing found that was never written,
    /// nothing found twice. The error names how many of each, with examples.
    pub fn check(
        &self,
        found: impl IntoIterator<Item = (String, i64, String)>,
        devices: Option<&[&str]>,
    ) -> Result<(), String> {
        let wanted = |device: &str| devices.is_none_or(|list| list.contains(&device));
        let mut seen: BTreeMap<Key, String> = BTreeMap::new();
        let mut twice = Vec::new();
        let mut wrong = Vec::new();
        let mut phantom = Vec::new();
        for (device, ts, value) in found.into_iter().filter(|(d, _, _)| wanted(d)) {
            let key = (device, ts);
            if value != value_of(&key.0, key.1) {
                wrong.push(format!("{}/{} = {value:?}", key.0, key.1));
            }
            if !self.acked.contains_key(&key) && !self.unanswered.contains(&key) {
                phantom.push(format!("{}/{}", key.0, key.1));
            }
            if seen.insert(key.clone(), value).is_some() {
                twice.push(format!("{}/{}", key.0, key.1));
            }
        }
        let lost: Vec<String> = self
            .acked
            .keys()
            .filter(|(d, _)| wanted(d))
            .filter(|key| !seen.contains_key(*key))
            .map(|(d, ts)| format!("{d}/{ts}"))
            .collect();
        let problems: Vec<String> = [
            ("acknowledged but not found", lost),
            ("found twice", twice),
            ("found with another value", wrong),
            ("found but never written", phantom),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(what, list)| {
            format!(
                "{} {what} (e.g. {:?})",
                list.len(),
                &list[..list.len().min(EXAMPLES_MAX)]
            )
        })
        .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "against the writers' ledger ({} acknowledged, {} unanswered): {}",
                self.acked.len(),
                self.unanswered.len(),
                problems.join("; ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(device: &str, ts: &[i64]) -> Vec<(String, i64, String)> {
        ts.iter()
            .map(|&t| (device.to_string(), t, value_of(device, t)))
            .collect()
    }

    #[test]
    fn exactly_the_acknowledged_readings_pass() {
        let mut ledger = Ledger::default();
        let range = ledger.next("car", 3);
        ledger.note("car", range, 201);
        let maybe = ledger.next("car", 2);
        ledger.note("car", maybe, 0);
        let refused = ledger.next("car", 1);
        ledger.note("car", refused, 409);
        assert_eq!(ledger.check(found("car", &[1, 2, 3]), None), Ok(()));
        assert_eq!(ledger.check(found("car", &[1, 2, 3, 4]), None), Ok(()));
    }

    #[test]
    fn each_kind_of_failure_is_named() {
        let mut ledger = Ledger::default();
        let range = ledger.next("car", 3);
        ledger.acknowledged("car", range);
        let lost = ledger
            .check(found("car", &[1, 2]), None)
            .expect_err("a failure");
        assert!(lost.contains("1 acknowledged but not found"), "{lost}");
        let twice = ledger
            .check(found("car", &[1, 2, 3, 3]), None)
            .expect_err("a failure");
        assert!(twice.contains("1 found twice"), "{twice}");
        let phantom = ledger
            .check(found("car", &[1, 2, 3, 9]), None)
            .expect_err("a failure");
        assert!(phantom.contains("1 found but never written"), "{phantom}");
        let mut bad = found("car", &[1, 2, 3]);
        bad[0].2 = "other".into();
        let wrong = ledger.check(bad, None).expect_err("a failure");
        assert!(wrong.contains("1 found with another value"), "{wrong}");
    }

    #[test]
    fn a_check_of_one_device_ignores_the_others() {
        let mut ledger = Ledger::default();
        let a = ledger.next("a", 2);
        ledger.acknowledged("a", a);
        let b = ledger.next("b", 2);
        ledger.acknowledged("b", b);
        assert_eq!(ledger.check(found("a", &[1, 2]), Some(&["a"])), Ok(()));
        assert!(ledger.check(found("a", &[1, 2]), None).is_err());
    }
}
