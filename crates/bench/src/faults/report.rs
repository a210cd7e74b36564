//! The verdict of a fault soak (`bench crash`, `bench powercut`): what each round's check found,
//! the totals, and their renderings (a table on the terminal, results.json and report.html).

use std::path::Path;

use roamkv_testbed::report::{Html, MachineHeader, write_json};

use crate::error::Result;
use crate::faults::survival::{EXAMPLES_MAX, Ledger, Survey};

/// What `roamkv check` printed about a data directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// "torn tail" line: damage at the end of the log that the next open cuts (not corruption).
    pub torn_tail: Option<String>,
    /// "DAMAGE:" lines, or the error that kept the check from running.
    pub damage: Vec<String>,
}

impl CheckOutcome {
    /// Reads `roamkv check`'s output lines and exit status.
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>, succeeded: bool) -> CheckOutcome {
        let mut outcome = CheckOutcome::default();
        let mut said_ok = false;
        let mut other = Vec::new();
        for line in lines {
            let line = line.trim();
            if let Some(torn) = line.strip_prefix("torn tail") {
                let place = torn.split_once(": ").map_or(torn, |(_, place)| place);
                outcome.torn_tail = Some(place.to_string());
            } else if let Some(damage) = line.strip_prefix("DAMAGE:") {
                outcome.damage.push(damage.trim().to_string());
            } else if line == "ok" {
                said_ok = true;
            } else if !line.is_empty() && !line.starts_with("checked ") {
                other.push(line.to_string());
            }
        }
        // A check that failed without naming damage (could not open the directory, say) is
        // damage too: the directory is not readable as it should be.
        if (!succeeded || !said_ok) && outcome.damage.is_empty() {
            outcome.damage.push(format!(
                "roamkv check failed: {}",
                if other.is_empty() {
                    "no output".to_string()
                } else {
                    other.join(" | ")
                }
            ));
        }
        outcome
    }
}

/// One round: a loader killed (or a machine cut off), then everything acknowledged so far checked.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RoundRow {
    pub round: u64,
    /// First record number the round's loader was given.
    pub start: u64,
    pub acked: u64,
    /// When the kill came, in ms after the loader started.
    pub kill_after_ms: u64,
    /// The loader had acknowledged records of this round when the kill came (commits were
    /// flowing), rather than being killed in its recovery or before its first commit.
    pub killed_after_first_ack: bool,
    /// Acknowledged records (of this and every earlier round) verified after the kill.
    pub acked_checked: u64,
    pub lost: u64,
    pub torn_tail_cut: Option<String>,
    pub corrupt: Vec<String>,
    pub wrong: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lost_examples: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wrong_examples: Vec<String>,
}

impl RoundRow {
    /// Judges one round from the check of the killed directory and the survey after reopening.
    pub fn judge(&mut self, ledger: &Ledger, check: &CheckOutcome, survey: Result<&Survey, &str>) {
        self.corrupt.extend(check.damage.iter().cloned());
        match survey {
            Ok(survey) => {
                let (lost, examples) = ledger.missing(survey);
                self.lost = lost;
                self.acked_checked = ledger.acked_total();
                self.torn_tail_cut = survey.recovery_cut.clone();
                self.wrong = survey.wrong_count;
                self.lost_examples = examples;
                self.wrong_examples = survey.wrong.clone();
            }
            // The directory could not be opened: nothing acknowledged can be read back.
            Err(reason) => {
                self.corrupt.push(format!("reopening failed: {reason}"));
                self.lost = ledger.acked_total();
            }
        }
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FaultResults {
    /// "crash" (kill -9 of the loader) or "powercut" (SIGKILL of the virtual machine).
    pub kind: String,
    pub seed: u64,
    pub rounds_requested: u64,
    /// Rounds completed (killed and checked).
    pub rounds: u64,
    /// Distinct acknowledged records over the whole run.
    pub acked_records: u64,
    /// Acknowledged records verified, summed over rounds: each round re-verifies all earlier ones.
    pub acked_checked: u64,
    /// Acknowledged records missing or wrong in some round's check (must be 0).
    pub lost: u64,
    pub lost_examples: Vec<u64>,
    /// Rounds whose reopening cut a torn tail (a crash mid-write; expected, not damage).
    pub torn_tails_cut: u64,
    /// Rounds killed after the loader's first acknowledgement of the round (acks flowing).
    pub rounds_killed_while_acking: u64,
    /// Checksum failures or unreadable segments that are not a torn tail (must be 0).
    pub corrupt: u64,
    pub corrupt_examples: Vec<String>,
    /// Records present that the stream never produced (must be 0).
    pub wrong: u64,
    pub wrong_examples: Vec<String>,
    pub elapsed_s: f64,
    /// What ran: the loader's settings, the kill window, where.
    pub config: serde_json::Value,
    pub machine: MachineHeader,
    pub round_rows: Vec<RoundRow>,
}

impl FaultResults {
    pub fn new(kind: &str, seed: u64, rounds_requested: u64, config: serde_json::Value) -> Self {
        FaultResults {
            kind: kind.to_string(),
            seed,
            rounds_requested,
            rounds: 0,
            acked_records: 0,
            acked_checked: 0,
            lost: 0,
            lost_examples: Vec::new(),
            torn_tails_cut: 0,
            rounds_killed_while_acking: 0,
            corrupt: 0,
            corrupt_examples: Vec::new(),
            wrong: 0,
            wrong_examples: Vec::new(),
            elapsed_s: 0.0,
            config,
            machine: MachineHeader::collect(),
            round_rows: Vec::new(),
        }
    }

    /// Adds a judged round to the totals.
    pub fn add(&mut self, row: RoundRow, ledger: &Ledger) {
        self.rounds += 1;
        self.acked_records = ledger.acked_total();
        self.acked_checked += row.acked_checked;
        self.lost += row.lost;
        self.torn_tails_cut += u64::from(row.torn_tail_cut.is_some());
        self.rounds_killed_while_acking += u64::from(row.killed_after_first_ack);
        self.corrupt += row.corrupt.len() as u64;
        self.wrong += row.wrong;
        let room = |v: usize| EXAMPLES_MAX.saturating_sub(v);
        let take = room(self.corrupt_examples.len());
        self.corrupt_examples.extend(
            row.corrupt
                .iter()
                .take(take)
                .map(|c| format!("round {}: {c}", row.round)),
        );
        let take = room(self.lost_examples.len());
        self.lost_examples
            .extend(row.lost_examples.iter().take(take));
        let take = room(self.wrong_examples.len());
        self.wrong_examples.extend(
            row.wrong_examples
                .iter()
                .take(take)
                .map(|w| format!("round {}: {w}", row.round)),
        );
        self.round_rows.push(row);
    }

    /// Nothing acknowledged was lost, nothing is corrupt, nothing appeared that was never written.
    pub fn passed(&self) -> bool {
        self.lost == 0 && self.corrupt == 0 && self.wrong == 0
    }

    pub fn summary_rows(&self) -> Vec<Vec<String>> {
        vec![
            vec![
                "rounds".into(),
                format!("{} of {}", self.rounds, self.rounds_requested),
            ],
            vec![
                "acknowledged records".into(),
                self.acked_records.to_string(),
            ],
            vec![
                "acked_checked (re-verified every round)".into(),
                self.acked_checked.to_string(),
            ],
            vec!["lost (must be 0)".into(), self.lost.to_string()],
            vec!["torn_tails_cut".into(), self.torn_tails_cut.to_string()],
            vec![
                "kills while acks flowed".into(),
                format!("{} of {}", self.rounds_killed_while_acking, self.rounds),
            ],
            vec!["corrupt (must be 0)".into(), self.corrupt.to_string()],
            vec!["wrong records (must be 0)".into(), self.wrong.to_string()],
            vec!["elapsed".into(), format!("{:.1} s", self.elapsed_s)],
            vec![
                "verdict".into(),
                if self.passed() {
                    "PASS".into()
                } else {
                    "FAIL".into()
                },
            ],
        ]
    }

    pub fn terminal_table(&self) -> String {
        let mut table = comfy_table::Table::new();
        table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        table.set_header([
            format!("bench {}, seed {}", self.kind, self.seed),
            String::new(),
        ]);
        for row in self.summary_rows() {
            table.add_row(row);
        }
        let mut text = table.to_string();
        for (what, examples) in [
            (
                "lost",
                self.lost_examples
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>(),
            ),
            ("corrupt", self.corrupt_examples.clone()),
            ("wrong", self.wrong_examples.clone()),
        ] {
            if !examples.is_empty() {
                text.push_str(&format!("\n{what}: {}", examples.join("; ")));
            }
        }
        text
    }

    /// Writes DIR/results.json and DIR/report.html.
    pub fn write(&self, out: &Path) -> Result<()> {
        let value = serde_json::to_value(self)?;
        write_json(out, "results", &value)?;
        let mut html = Html::new(&format!("roamkv bench {}", self.kind), &self.machine);
        html.table(&["", ""], &self.summary_rows());
        html.heading("Configuration");
        html.preformatted(&serde_json::to_string_pretty(&self.config).unwrap_or_default());
        html.heading("Rounds");
        let rows: Vec<Vec<String>> = self
            .round_rows
            .iter()
            .map(|r| {
                vec![
                    r.round.to_string(),
                    r.start.to_string(),
                    r.acked.to_string(),
                    r.kill_after_ms.to_string(),
                    r.acked_checked.to_string(),
                    r.lost.to_string(),
                    r.torn_tail_cut.clone().unwrap_or_default(),
                    r.corrupt.join("; "),
                ]
            })
            .collect();
        html.table(
            &[
                "round",
                "first record",
                "acked",
                "kill after ms",
                "acked checked",
                "lost",
                "torn tail cut",
                "corrupt",
            ],
            &rows,
        );
        Ok(html.write(&out.join("report.html"))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_output_is_read() {
        let clean = CheckOutcome::parse(
            [
                "checked 3 segments, 10 log records, 5 lower-tier keys",
                "ok",
            ],
            true,
        );
        assert_eq!(clean, CheckOutcome::default());
        let torn = CheckOutcome::parse(
            [
                "checked 3 segments, 10 log records, 5 lower-tier keys",
                "torn tail (cut on the next open; not damage): /d/log/1.seg at offset 4096: batch cut short",
                "ok",
            ],
            true,
        );
        assert_eq!(
            torn.torn_tail.as_deref(),
            Some("/d/log/1.seg at offset 4096: batch cut short")
        );
        assert!(torn.damage.is_empty());
        let damaged =
            CheckOutcome::parse(["checked 1 segments", "DAMAGE: bad record at 8192"], false);
        assert_eq!(damaged.damage, vec!["bad record at 8192".to_string()]);
        let failed = CheckOutcome::parse(["roamkv: locked"], false);
        assert_eq!(failed.damage.len(), 1, "{failed:?}");
    }
}
