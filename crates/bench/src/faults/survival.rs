//! What must survive a crash, and the check that it did: the deterministic record stream of the
//! fault soaks (`bench crash`, `bench powercut`), the ledger of what the loader acknowledged, and
//! the survey of what a data directory holds after recovery.
//!
//! Record number `i` is the reading of device `car-{i % 40}`, sensor `["speed", "rpm",
//! "fuel"][i % 3]`, at timestamp `i`, with value `"{i}-" + "x" * (i % 64)`. Because every field
//! follows from `i`, a survey can tell a record the stream produced from one it never did (a
//! wrong value, a record under the wrong device or sensor) without remembering what was sent.

use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};

use roamkv_engine::{Engine, Options};

use crate::error::{BenchError, Result};

/// Segment size the soaks' loaders use (`--segment-mib 1`): small, so that rounds switch and
/// recycle segments often. A reopening for a survey must use the same.
pub const SEGMENT_BYTES: u64 = 1 << 20;
/// Lines written at a time by `feed`.
const FEED_CHUNK_LINES: u64 = 16;

/// Devices the stream spreads its records over.
pub const DEVICES: u64 = 40;
const SENSORS: [&str; 3] = ["speed", "rpm", "fuel"];
/// Wrong records and lost record numbers named in full in a result; the rest are only counted.
pub const EXAMPLES_MAX: usize = 10;

pub fn device_of(i: u64) -> String {
    format!("car-{}", i % DEVICES)
}

pub fn sensor_of(i: u64) -> &'static str {
    SENSORS[(i % SENSORS.len() as u64) as usize]
}

pub fn value_of(i: u64) -> String {
    format!("{i}-{}", "x".repeat((i % 64) as usize))
}

/// Record `i` as the JSON line `roamkv load` reads.
pub fn json_line(i: u64) -> String {
    format!(
        "{{\"device\":\"{}\",\"sensor\":\"{}\",\"ts\":{i},\"value\":\"{}\"}}\n",
        device_of(i),
        sensor_of(i),
        value_of(i)
    )
}

/// Writes records from `start` on, at `rate` per second counted from `started`, until `out`
/// fails (the loader reading it was killed). Returns how many lines were written completely.
pub fn feed(mut out: impl Write, start: u64, rate: u64, started: Instant) -> u64 {
    let rate = rate.max(1);
    let mut sent = 0;
    loop {
        let due = started + Duration::from_secs_f64(sent as f64 / rate as f64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let chunk: String = (start + sent..start + sent + FEED_CHUNK_LINES)
            .map(json_line)
            .collect();
        if out
            .write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // Some lines of this chunk may have reached the loader; none of them count as sent,
            // which is safe: a loader that acks more than was sent is reported, never trusted.
            return sent;
        }
        sent += FEED_CHUNK_LINES;
    }
}

/// The record numbers the loader acknowledged, one range per round: a loader acks in input
/// order, so "acked N" in a round that started at record `s` means records `[s, s + N)`.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    acked: Vec<Range<u64>>,
}

impl Ledger {
    pub fn record_round(&mut self, start: u64, acked: u64) {
        if acked > 0 {
            self.acked.push(start..start + acked);
        }
    }

    /// Acknowledged records over all rounds so far.
    pub fn acked_total(&self) -> u64 {
        self.acked.iter().map(|r| r.end - r.start).sum()
    }

    /// Acknowledged records the survey did not find: (count, the first few record numbers).
    pub fn missing(&self, survey: &Survey) -> (u64, Vec<u64>) {
        let mut count = 0;
        let mut examples = Vec::new();
        for range in &self.acked {
            let mut at = range.start;
            // Present ranges are sorted and disjoint: walk those that overlap this acked range.
            let first = survey.present.partition_point(|p| p.1 <= range.start);
            for &(start, end) in &survey.present[first..] {
                if start >= range.end {
                    break;
                }
                if start > at {
                    count += start - at;
                    examples.extend((at..start).take(EXAMPLES_MAX.saturating_sub(examples.len())));
                }
                at = at.max(end);
            }
            if at < range.end {
                count += range.end - at;
                examples.extend((at..range.end).take(EXAMPLES_MAX.saturating_sub(examples.len())));
            }
        }
        (count, examples)
    }
}

/// What a data directory holds of the stream, after the engine's recovery.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Survey {
    /// Record numbers found with their exact contents, as sorted, disjoint `[start, end)` pairs.
    pub present: Vec<(u64, u64)>,
    /// Records found that the stream never produced (wrong value, device or sensor): the first few.
    pub wrong: Vec<String>,
    pub wrong_count: u64,
    /// The torn tail the engine's open cut, if any (where, and why it was torn).
    pub recovery_cut: Option<String>,
}

impl Survey {
    /// The highest record number present, if any.
    pub fn last_present(&self) -> Option<u64> {
        self.present.last().map(|&(_, end)| end - 1)
    }
}

/// Reads every device of the stream back through the engine and sorts what it finds into
/// present records and wrong ones.
pub fn survey(engine: &Engine) -> Result<Survey> {
    let mut found = Vec::new();
    let mut survey = Survey {
        recovery_cut: engine.stats().recovery_cut,
        ..Survey::default()
    };
    for d in 0..DEVICES {
        let device = format!("car-{d}");
        let readings = engine
            .scan(&device, None, i64::MIN, i64::MAX)
            .map_err(|e| BenchError::step(format!("scanning {device}"), e))?;
        for r in readings {
            let problem = match u64::try_from(r.ts_ms()) {
                Err(_) => Some("a negative timestamp".to_string()),
                Ok(i) if i % DEVICES != d => Some(format!("record {i} under {device}")),
                Ok(i) if r.sensor != sensor_of(i) => {
                    Some(format!("record {i} under sensor {:?}", r.sensor))
                }
                Ok(i) if r.value != value_of(i).as_bytes() => Some(format!(
                    "record {i} has value {:?}",
                    String::from_utf8_lossy(&r.value)
                )),
                Ok(i) => {
                    found.push(i);
                    None
                }
            };
            if let Some(problem) = problem {
                survey.wrong_count += 1;
                if survey.wrong.len() < EXAMPLES_MAX {
                    survey
                        .wrong
                        .push(format!("{device}/{}@{}: {problem}", r.sensor, r.ts_ms()));
                }
            }
        }
    }
    found.sort_unstable();
    for i in found {
        match survey.present.last_mut() {
            Some(last) if last.1 == i => last.1 += 1,
            _ => survey.present.push((i, i + 1)),
        }
    }
    Ok(survey)
}

/// Opens a soak's data directory as the next process would (recovery cuts a torn tail) and
/// surveys it. A directory that does not exist yet holds nothing.
pub fn reopen_and_survey(data: &Path) -> Result<Survey> {
    if !data.exists() {
        return Ok(Survey::default());
    }
    let options = Options {
        segment_bytes: SEGMENT_BYTES,
        background_maintenance: false,
        ..Options::default()
    };
    let engine = Engine::open(data, options)?;
    let survey = survey(&engine)?;
    engine
        .close()
        .map_err(|e| BenchError::step("closing after the survey", e))?;
    Ok(survey)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survey_of(present: &[(u64, u64)]) -> Survey {
        Survey {
            present: present.to_vec(),
            ..Survey::default()
        }
    }

    #[test]
    fn missing_counts_every_acked_record_not_present() {
        let mut ledger = Ledger::default();
        ledger.record_round(0, 10);
        ledger.record_round(100, 5);
        ledger.record_round(200, 0);
        assert_eq!(ledger.acked_total(), 15);
        // Everything there (and unacked extras): nothing missing.
        assert_eq!(
            ledger.missing(&survey_of(&[(0, 12), (100, 105)])),
            (0, vec![])
        );
        // A hole in the first round, the second round gone entirely.
        assert_eq!(
            ledger.missing(&survey_of(&[(0, 3), (5, 10)])),
            (7, vec![3, 4, 100, 101, 102, 103, 104])
        );
        assert_eq!(ledger.missing(&survey_of(&[])).0, 15);
    }

    #[test]
    fn lines_are_what_load_reads() {
        let line = json_line(41);
        assert_eq!(
            line,
            format!(
                "{{\"device\":\"car-1\",\"sensor\":\"fuel\",\"ts\":41,\"value\":\"41-{}\"}}\n",
                "x".repeat(41)
            )
        );
        let parsed: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(parsed["ts"], 41);
    }
}
