//! The operator's commands that write or verify a data directory: load and check (the commands
//! that read, and depart, are in `crate::reads`).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::json::InputLine;
use clap::Args;
use roamkv_engine::{Durability, Engine, LowerTierKind, Options, Record};

/// How to open (or make) a data directory for `load`.
#[derive(Args, Debug, Clone)]
pub struct OpenArgs {
    /// The data directory (created if missing or empty).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Lower tier for a new data directory: rocksdb or leveldb (an existing one keeps its own).
    #[arg(long, default_value = "rocksdb", value_parser = parse_lower)]
    pub lower: LowerTierKind,
    /// Size of each preallocated commit-log segment, in MiB.
    #[arg(long, default_value_t = 64)]
    pub segment_mib: u64,
    /// How long a reading stays in the log (and a new device in the upper tier) before it moves to
    /// the lower tier, if its device is still here, in ms.
    #[arg(long, default_value_t = 60_000)]
    pub management_time_ms: u64,
}

fn parse_lower(text: &str) -> Result<LowerTierKind, String> {
    LowerTierKind::from_name(text)
        .ok_or_else(|| format!("unknown lower tier {text:?}; valid: rocksdb, leveldb"))
}

fn parse_durability(text: &str) -> Result<Durability, String> {
    Durability::parse(text).ok_or_else(|| {
        format!("unknown durability {text:?}; valid: sync, periodic, periodic:MS, none")
    })
}

impl OpenArgs {
    fn open(&self, durability: Durability, background_maintenance: bool) -> Result<Engine, String> {
        let options = Options {
            durability,
            lower_tier: self.lower,
            segment_bytes: self.segment_mib * 1024 * 1024,
            management_time_ms: self.management_time_ms,
            background_maintenance,
            ..Options::default()
        };
        Engine::open(&self.data, options).map_err(|e| e.to_string())
    }
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    /// sync (ack after fdatasync), periodic[:MS] (fdatasync every MS), or none.
    #[arg(long, default_value = "sync", value_parser = parse_durability)]
    pub durability: Durability,
    /// Print "acked N" (records acknowledged so far) after every committed batch.
    #[arg(long)]
    pub ack: bool,
    /// Records per batch at most; a batch is also cut whenever stdin has nothing more ready.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
}

/// One parsed input line, owning its strings until the batch is written.
struct Owned {
    device: String,
    sensor: String,
    ts_ns: i64,
    value: Vec<u8>,
}

pub fn load(args: &LoadArgs) -> Result<(), String> {
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    let engine = args.open.open(args.durability, true)?;
    let mut batches = Batches {
        engine: &engine,
        acks: args.ack.then(|| std::io::stdout().lock()),
        pending: Vec::with_capacity(args.batch),
        pending_bytes: 0,
        acked: 0,
    };
    let failure = read_and_commit(args, &mut batches);
    // Everything before a bad line stays committed.
    batches.commit()?;
    let acked = batches.acked;
    engine.close().map_err(|e| e.to_string())?;
    match failure {
        Some(message) => Err(format!(
            "{message} (the {acked} records before it are committed)"
        )),
        None => {
            eprintln!("roamkv: loaded {acked} records");
            Ok(())
        }
    }
}

/// The readings of `load` on their way into the engine, one batch at a time.
struct Batches<'a, W: Write> {
    engine: &'a Engine,
    /// Where "acked N" goes after every committed batch (with --ack).
    acks: Option<W>,
    pending: Vec<Owned>,
    /// Worst-case log bytes of `pending`.
    pending_bytes: u64,
    /// Records committed so far.
    acked: u64,
}

impl<W: Write> Batches<'_, W> {
    fn push(&mut self, owned: Owned) {
        self.pending_bytes += worst_case_log_bytes(&owned);
        self.pending.push(owned);
    }

    /// Writes the pending readings as one batch and acknowledges them.
    fn commit(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let records: Vec<Record<'_>> = self
            .pending
            .iter()
            .map(|o| Record {
                device: &o.device,
                sensor: &o.sensor,
                ts_ns: o.ts_ns,
                value: &o.value,
            })
            .collect();
        self.engine
            .put_batch(&records)
            .map_err(|e| format!("writing a batch: {e}"))?;
        self.acked += self.pending.len() as u64;
        self.pending.clear();
        self.pending_bytes = 0;
        if let Some(out) = &mut self.acks {
            writeln!(out, "acked {}", self.acked)
                .and_then(|_| out.flush())
                .map_err(|e| format!("stdout: {e}"))?;
        }
        Ok(())
    }
}

/// Reads stdin to its end or to the first bad line, committing as it goes; returns what stopped
/// it early, if anything (the readings read before it are still pending).
fn read_and_commit<W: Write>(args: &LoadArgs, batches: &mut Batches<'_, W>) -> Option<String> {
    let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    // A quarter of a segment: far inside what one batch may take (`BatchTooLarge` otherwise).
    let batch_bytes_max = (args.open.segment_mib << 20) / 4;
    let mut line_number = 0u64;
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(format!("reading stdin after line {line_number}: {e}")),
        }
        line_number += 1;
        if !line.trim().is_empty() {
            match parse_line(&line) {
                Ok(owned) => batches.push(owned),
                Err(message) => return Some(format!("line {line_number}: {message}")),
            }
        }
        // Commit when the batch is full (in records, or in bytes: a batch must fit in a
        // segment), or when stdin has nothing more ready (so that a slow producer gets its acks
        // without waiting for a full batch).
        let commit_now = batches.pending.len() >= args.batch
            || batches.pending_bytes >= batch_bytes_max
            || input.buffer().is_empty();
        if commit_now && let Err(e) = batches.commit() {
            return Some(e);
        }
    }
}

/// What one reading may take in the log in the worst case: its record and a REGISTER record
/// for its device.
fn worst_case_log_bytes(o: &Owned) -> u64 {
    const RECORD_OVERHEAD_BYTES: u64 = 64;
    (2 * o.device.len() + o.sensor.len() + o.value.len()) as u64 + 2 * RECORD_OVERHEAD_BYTES
}

fn parse_line(line: &str) -> Result<Owned, String> {
    let parsed: InputLine =
        serde_json::from_str(line).map_err(|e| format!("not a reading: {e}"))?;
    let value = parsed.value_bytes()?;
    let ts_ns = parsed.ts_ns()?;
    let owned = Owned {
        device: parsed.device,
        sensor: parsed.sensor,
        ts_ns,
        value,
    };
    roamkv_engine::validate_record(&Record {
        device: &owned.device,
        sensor: &owned.sensor,
        ts_ns: owned.ts_ns,
        value: &owned.value,
    })
    .map_err(|e| e.to_string())?;
    Ok(owned)
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The data directory to verify.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
}

pub fn check(args: &CheckArgs) -> ExitCode {
    match roamkv_engine::check(&args.data) {
        Ok(report) => {
            println!(
                "checked {} segments, {} log records, {} lower-tier keys",
                report.segments, report.records, report.lower_keys
            );
            if let Some(torn) = &report.torn_tail {
                println!("torn tail (cut on the next open; not damage): {torn}");
            }
            for problem in &report.problems {
                println!("DAMAGE: {problem}");
            }
            if report.problems.is_empty() {
                println!("ok");
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("roamkv: {e}");
            ExitCode::FAILURE
        }
    }
}
