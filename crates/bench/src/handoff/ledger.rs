//! The load generator's ledger of `roamkv bench handoff`'s fault rounds: every reading a writer
//! sent, with what it was told — acknowledged (201), refused (an answer that is not 201, or no
//! connection at all: nothing may be stored) or unknown (the connection broke or timed out after
//! the request left: it may be stored or not, as Jepsen's indeterminate operations) — and the
//! verdict of what an edge or the cloud holds against it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// What a writer was told of one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    Refused,
    Unknown,
}

/// The only sensor the fault rounds write.
pub const SENSOR: &str = "s";

/// The value of `device`'s reading at `ts`, padded to `bytes`: a holder's value is checked
/// against it.
pub fn value_of(device: &str, ts: i64, bytes: usize) -> String {
    let mut v = format!("{device}/{ts}/");
    while v.len() < bytes {
        v.push('x');
    }
    v
}

/// One device's ledger: outcome per reading (by ts), and the answers counted by status.
#[derive(Debug, Default)]
pub struct DeviceLedger {
    pub device: String,
    pub readings: BTreeMap<i64, Outcome>,
    /// HTTP status -> requests answered with it (0: no connection; 1: no answer).
    pub answers: BTreeMap<u16, u64>,
}

/// What a holder has against the ledger.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, PartialEq, Eq)]
pub struct Verdict {
    /// Acknowledged readings the holder lacks, or holds with another value.
    pub lost: u64,
    /// Readings the holder has that were never sent, or were refused.
    pub phantom: u64,
}

impl DeviceLedger {
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.readings.values().filter(|o| **o == outcome).count() as u64
    }

    /// The verdict on `held` (ts -> value), the whole history of the device at one holder.
    pub fn verdict(&self, held: &BTreeMap<i64, String>, value_bytes: usize) -> Verdict {
        let mut v = Verdict::default();
        for (ts, outcome) in &self.readings {
            if *outcome == Outcome::Acked
                && held.get(ts) != Some(&value_of(&self.device, *ts, value_bytes))
            {
                v.lost += 1;
            }
        }
        for (ts, value) in held {
            let sent = matches!(
                self.readings.get(ts),
                Some(Outcome::Acked | Outcome::Unknown)
            );
            if !sent || *value != value_of(&self.device, *ts, value_bytes) {
                v.phantom += 1;
            }
        }
        v
    }
}

/// Which edge a device's writer writes to now (0: A, 1: B); the controller moves it when a
/// handoff is done.
pub type Owner = Arc<AtomicUsize>;

/// How a writer writes.
#[derive(Debug, Clone)]
pub struct WriterSpec {
    /// Each edge's base URL (as the load reaches it).
    pub urls: [String; 2],
    pub readings_per_request: i64,
    pub value_bytes: usize,
    /// Pause between requests.
    pub pause: Duration,
    /// A request without an answer after this is unknown.
    pub timeout: Duration,
}

/// Writes batches of `device` to its owner until `stop`; returns its ledger.
pub fn write_until(
    device: String,
    owner: Owner,
    spec: WriterSpec,
    stop: Arc<AtomicBool>,
) -> DeviceLedger {
    let client = reqwest::blocking::Client::builder()
        .timeout(spec.timeout)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("an HTTP client without TLS builds");
    let mut ledger = DeviceLedger {
        device: device.clone(),
        ..DeviceLedger::default()
    };
    let mut ts = 1i64;
    while !stop.load(Ordering::Relaxed) {
        let url = format!(
            "{}/api/roamkv/v1/readings",
            spec.urls[owner.load(Ordering::Relaxed)]
        );
        let batch = ts..ts + spec.readings_per_request;
        let body: String = batch
            .clone()
            .map(|t| {
                format!(
                    "{{\"device\":\"{device}\",\"sensor\":\"{SENSOR}\",\"ts_ns\":{t},\"value\":\"{}\"}}\n",
                    value_of(&device, t, spec.value_bytes)
                )
            })
            .collect();
        let (outcome, status) = match client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
        {
            Ok(r) if r.status().as_u16() == 201 => (Outcome::Acked, 201),
            Ok(r) => (Outcome::Refused, r.status().as_u16()),
            // No connection: the request never left.
            Err(e) if e.is_connect() => (Outcome::Refused, 0),
            Err(_) => (Outcome::Unknown, 1),
        };
        *ledger.answers.entry(status).or_default() += 1;
        ledger.readings.extend(batch.map(|t| (t, outcome)));
        ts += spec.readings_per_request;
        std::thread::sleep(spec.pause);
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_counts_lost_phantom_and_wrong_values() {
        let mut l = DeviceLedger {
            device: "car".into(),
            ..Default::default()
        };
        l.readings.insert(1, Outcome::Acked);
        l.readings.insert(2, Outcome::Acked);
        l.readings.insert(3, Outcome::Unknown);
        l.readings.insert(4, Outcome::Refused);
        let v = |ts| value_of("car", ts, 16);
        // All acknowledged, an unknown one present: clean.
        let held: BTreeMap<i64, String> = [(1, v(1)), (2, v(2)), (3, v(3))].into();
        assert_eq!(l.verdict(&held, 16), Verdict::default());
        // One acknowledged missing, a refused one present, one never sent present.
        let held: BTreeMap<i64, String> = [(1, v(1)), (4, v(4)), (9, v(9))].into();
        assert_eq!(
            l.verdict(&held, 16),
            Verdict {
                lost: 1,
                phantom: 2
            }
        );
        // A wrong value is both: the acknowledged value is gone, and this one nobody sent.
        let held: BTreeMap<i64, String> = [(1, v(1)), (2, "other".into())].into();
        assert_eq!(
            l.verdict(&held, 16),
            Verdict {
                lost: 1,
                phantom: 1
            }
        );
    }
}
