//! `roamkv bench crash`: kill -9 soak rounds. Each round starts a real `roamkv load --ack`
//! process, feeds it the record stream (survival.rs), SIGKILLs it at a random moment, then runs
//! `roamkv check` on what it left and reopens the directory: every record acknowledged in this
//! and every earlier round must be there with its exact value.
//!
//! A kill -9 loses the process, not the page cache: this proves the engine's own crash
//! consistency (torn batches, half-made segments, interrupted passes), not durability
//! against power loss (that is `bench powercut`).

use std::io::{BufRead, BufReader};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{BenchError, Result};
use crate::faults::report::{CheckOutcome, FaultResults, RoundRow};
use crate::faults::survival::{self, Ledger};

/// Record numbers skipped between rounds, so a round never reuses a number an earlier loader was
/// sent (sent but unacknowledged records may or may not have survived).
const ROUND_GAP: u64 = 1000;
/// results.json is rewritten every this many rounds while a soak runs.
const PARTIAL_RESULTS_EVERY_ROUNDS: u64 = 50;
/// The loader's settings: small segments and a short management time, so that rounds switch and
/// recycle segments and move readings to the lower tier often.
pub const LOADER_ARGS: [&str; 7] = [
    "--ack",
    "--segment-mib",
    "1",
    "--management-time-ms",
    "300",
    "--batch",
    "64",
];

#[derive(Args, Debug)]
pub struct CrashArgs {
    /// Kill rounds to run.
    #[arg(long, default_value_t = 100)]
    pub rounds: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory: results.json, report.html, and the data directory (DIR/data, deleted
    /// after a passing run unless --keep-data).
    #[arg(long, default_value = "out/crash")]
    pub out: PathBuf,
    /// Most rounds kill the loader while it acknowledges: this many ms at most (uniformly from
    /// 0) after its first acknowledgement of the round, once recovery is over and commits flow.
    #[arg(long, default_value_t = 300)]
    pub kill_after_ack_ms_max: u64,
    /// The other rounds (this percentage) kill it at a fixed moment after it starts, which may
    /// fall in its recovery or before its first commit: recovery must survive a kill too.
    #[arg(long, default_value_t = 10)]
    pub recovery_kill_percent: u32,
    /// Earliest kill of those rounds, in ms after the loader starts.
    #[arg(long, default_value_t = 40)]
    pub kill_after_ms_min: u64,
    /// Latest kill of those rounds, in ms after the loader starts.
    #[arg(long, default_value_t = 400)]
    pub kill_after_ms_max: u64,
    /// Records fed to the loader per second. Every round re-reads everything acknowledged so
    /// far, so this bounds how long a 1000-round run takes.
    #[arg(long, default_value_t = 4000)]
    pub records_per_second: u64,
    /// Keep DIR/data after a passing run.
    #[arg(long)]
    pub keep_data: bool,
}

/// How long a round waits for the loader's first acknowledgement before killing it anyway.
const FIRST_ACK_WAIT: Duration = Duration::from_secs(30);

/// When a round's kill comes.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// This many ms after the loader started (in its recovery, or before its first commit).
    AfterStart(u64),
    /// This many ms after its first acknowledgement of the round.
    AfterFirstAck(u64),
}

/// A child process that is killed and reaped however the round ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a killed round's loader did.
struct Killed {
    acked: u64,
    /// Records fully sent to it.
    sent: u64,
    /// When the kill came, in ms after the start.
    after_ms: u64,
    /// It had acknowledged records of this round when it was killed.
    after_first_ack: bool,
}

/// The state of a soak between rounds: where the data is, what was acknowledged, what comes next.
pub struct CrashSoak {
    roamkv: PathBuf,
    data: PathBuf,
    rng: StdRng,
    kill_window_ms: Range<u64>,
    /// Set by `killing_after_first_ack`: (window after the first ack, percent of rounds killed
    /// after start instead).
    after_ack: Option<(Range<u64>, u32)>,
    records_per_second: u64,
    next: u64,
    round: u64,
    ledger: Ledger,
}

impl CrashSoak {
    /// `roamkv`: the binary to run as the loader and the checker.
    pub fn new(
        roamkv: &Path,
        data: &Path,
        seed: u64,
        kill_window_ms: Range<u64>,
        records_per_second: u64,
    ) -> CrashSoak {
        CrashSoak {
            roamkv: roamkv.to_path_buf(),
            data: data.to_path_buf(),
            rng: StdRng::seed_from_u64(seed),
            kill_window_ms,
            after_ack: None,
            records_per_second: records_per_second.max(1),
            next: 0,
            round: 0,
            ledger: Ledger::default(),
        }
    }

    /// Kills most rounds `after_ack_ms` after the loader's first acknowledgement (acks flowing)
    /// and `recovery_percent` of them in `kill_window_ms` after it starts. Without this, every
    /// round is killed in `kill_window_ms` after the start.
    pub fn killing_after_first_ack(
        mut self,
        after_ack_ms: Range<u64>,
        recovery_percent: u32,
    ) -> CrashSoak {
        self.after_ack = Some((after_ack_ms, recovery_percent.min(100)));
        self
    }

    fn next_kill(&mut self) -> Kill {
        match &self.after_ack {
            Some((window, recovery_percent))
                if self.rng.random_range(0..100) >= *recovery_percent =>
            {
                let window = window.clone();
                Kill::AfterFirstAck(self.rng.random_range(window))
            }
            _ => Kill::AfterStart(self.rng.random_range(self.kill_window_ms.clone())),
        }
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// One round: load and kill, check, reopen and verify everything acknowledged so far.
    pub fn round(&mut self) -> Result<RoundRow> {
        let start = self.next;
        let kill = self.next_kill();
        let killed = self.load_and_kill(start, kill)?;
        let (acked, sent) = (killed.acked, killed.sent);
        if acked > sent {
            return Err(BenchError::Check(format!(
                "round {}: the loader acknowledged {acked} records but was sent {sent}",
                self.round
            )));
        }
        self.ledger.record_round(start, acked);
        self.next = start + sent + ROUND_GAP;
        let check = self.check()?;
        let mut row = RoundRow {
            round: self.round,
            start,
            acked,
            kill_after_ms: killed.after_ms,
            killed_after_first_ack: killed.after_first_ack,
            ..RoundRow::default()
        };
        match survival::reopen_and_survey(&self.data) {
            Ok(survey) => row.judge(&self.ledger, &check, Ok(&survey)),
            Err(e) => row.judge(&self.ledger, &check, Err(&e.to_string())),
        }
        self.round += 1;
        Ok(row)
    }

    /// Runs `roamkv load --ack`, feeds it records from `start` at the configured rate and
    /// SIGKILLs it when `kill` says.
    fn load_and_kill(&mut self, start: u64, kill: Kill) -> Result<Killed> {
        let mut child = ChildGuard(
            Command::new(&self.roamkv)
                .args(["load", "--data"])
                .arg(&self.data)
                .args(LOADER_ARGS)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| {
                    BenchError::os(format!("starting {} load", self.roamkv.display()), e)
                })?,
        );
        let started = Instant::now();
        let missing = |stream: &str| BenchError::Run(format!("the loader has no {stream}"));
        let stdin = child.0.stdin.take().ok_or_else(|| missing("stdin"))?;
        let stdout = child.0.stdout.take().ok_or_else(|| missing("stdout"))?;
        let stderr = child.0.stderr.take().ok_or_else(|| missing("stderr"))?;
        let acked = Arc::new(AtomicU64::new(0));
        let reader = {
            let acked = acked.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(n) = line.strip_prefix("acked ").and_then(|n| n.parse().ok()) {
                        acked.store(n, Ordering::SeqCst);
                    }
                }
            })
        };
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut text);
            text
        });
        let rate = self.records_per_second;
        let writer = std::thread::spawn(move || survival::feed(stdin, start, rate, started));
        let kill_at = match kill {
            Kill::AfterStart(ms) => Duration::from_millis(ms),
            Kill::AfterFirstAck(ms) => {
                while acked.load(Ordering::SeqCst) == 0
                    && started.elapsed() < FIRST_ACK_WAIT
                    && matches!(child.0.try_wait(), Ok(None))
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                started.elapsed() + Duration::from_millis(ms)
            }
        };
        std::thread::sleep(kill_at.saturating_sub(started.elapsed()));
        let exited_early = child.0.try_wait().ok().flatten();
        let after_first_ack = acked.load(Ordering::SeqCst) > 0;
        let after_ms = started.elapsed().as_millis() as u64;
        let _ = child.0.kill();
        let _ = child.0.wait();
        let sent = writer
            .join()
            .map_err(|_| BenchError::Run("the feeding thread panicked".into()))?;
        let _ = reader.join();
        let stderr_text = errors.join().unwrap_or_default();
        if let Some(status) = exited_early {
            return Err(BenchError::Run(format!(
                "the loader exited by itself ({status}) before the kill: {}",
                stderr_text.trim()
            )));
        }
        Ok(Killed {
            acked: acked.load(Ordering::SeqCst),
            sent,
            after_ms,
            after_first_ack,
        })
    }

    fn check(&self) -> Result<CheckOutcome> {
        let out = Command::new(&self.roamkv)
            .args(["check", "--data"])
            .arg(&self.data)
            .output()
            .map_err(|e| BenchError::os("running roamkv check", e))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        Ok(CheckOutcome::parse(text.lines(), out.status.success()))
    }
}

/// The soak as `args` describe it, and its empty results.
fn begin(args: &CrashArgs, roamkv: &Path, data: &Path) -> (CrashSoak, FaultResults) {
    let soak = CrashSoak::new(
        roamkv,
        data,
        args.seed,
        args.kill_after_ms_min..args.kill_after_ms_max,
        args.records_per_second,
    )
    .killing_after_first_ack(
        0..args.kill_after_ack_ms_max.max(1),
        args.recovery_kill_percent,
    );
    let results = FaultResults::new(
        "crash",
        args.seed,
        args.rounds,
        serde_json::json!({
            "loader": format!("roamkv load --data {} {}", data.display(), LOADER_ARGS.join(" ")),
            "kill_after_first_ack_ms": [0, args.kill_after_ack_ms_max],
            "recovery_kill_percent": args.recovery_kill_percent,
            "kill_after_start_ms": [args.kill_after_ms_min, args.kill_after_ms_max],
            "records_per_second": args.records_per_second,
            "kill": "SIGKILL of the loader process",
        }),
    );
    (soak, results)
}

pub fn run(args: &CrashArgs) -> ExitCode {
    match soak(args) {
        Ok(results) if results.passed() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("roamkv bench crash: {e}");
            ExitCode::FAILURE
        }
    }
}

fn soak(args: &CrashArgs) -> Result<FaultResults> {
    if args.kill_after_ms_min >= args.kill_after_ms_max {
        return Err(BenchError::Usage(
            "--kill-after-ms-min must be below --kill-after-ms-max".into(),
        ));
    }
    let roamkv =
        std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
    let data = args.out.join("data");
    if data.exists() {
        return Err(BenchError::Usage(format!(
            "{} exists (from an earlier run): remove it or choose another --out",
            data.display()
        )));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let (mut soak, mut results) = begin(args, &roamkv, &data);
    let bar = indicatif::ProgressBar::new(args.rounds);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} rounds, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .map_err(|e| BenchError::Run(e.to_string()))?,
    );
    let started = Instant::now();
    for _ in 0..args.rounds {
        let row = soak.round()?;
        let failed = row.lost > 0 || !row.corrupt.is_empty() || row.wrong > 0;
        results.add(row, soak.ledger());
        if results.rounds.is_multiple_of(PARTIAL_RESULTS_EVERY_ROUNDS) {
            // A long soak stopped early (Ctrl-C) still leaves what it had verified.
            results.elapsed_s = started.elapsed().as_secs_f64();
            results.write(&args.out)?;
        }
        bar.inc(1);
        bar.set_message(format!(
            "{} acked, lost {}, corrupt {}, torn tails cut {}",
            results.acked_records, results.lost, results.corrupt, results.torn_tails_cut
        ));
        if failed {
            roamkv_testbed::report::say(
                &bar,
                format!(
                    "round {}: acknowledged data lost or damaged; stopping (the directory stays in {})",
                    results.rounds - 1,
                    data.display()
                ),
            );
            break;
        }
    }
    bar.finish_and_clear();
    results.elapsed_s = started.elapsed().as_secs_f64();
    println!("{}", results.terminal_table());
    results.write(&args.out)?;
    println!("wrote {}", args.out.join("results.json").display());
    if results.passed() && !args.keep_data {
        std::fs::remove_dir_all(&data).map_err(|e| BenchError::io("removing", &data, e))?;
    }
    Ok(results)
}
