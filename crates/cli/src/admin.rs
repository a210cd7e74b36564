//! The operator's commands on a data directory: load, get, scan, depart, stats, check.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use roamkv_engine::{Durability, Engine, LowerTierKind, Options, Record, Stats};
use roamkv_wire::time_arg;

use crate::json::{InputLine, OutputLine};

/// How to open a data directory (shared by every command).
#[derive(Args, Debug, Clone)]
pub struct OpenArgs {
    /// The data directory (`load` creates it if missing or empty; the other commands need an
    /// existing one).
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
    /// Opens a data directory that must exist: the commands that only read (or depart a device)
    /// never make a new, empty one at a mistyped path.
    fn open_existing(&self) -> Result<Engine, String> {
        if !roamkv_engine::is_data_dir(&self.data) {
            return Err(format!(
                "{} is not a roamkv data directory (this command never creates one; \
                 `roamkv load` or `roamkv serve` makes one)",
                self.data.display()
            ));
        }
        self.open(Durability::Sync, false)
    }

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
pub struct GetArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    #[arg(long)]
    pub device: String,
    #[arg(long)]
    pub sensor: String,
    /// The reading's time: RFC 3339 (with any fraction), or milliseconds since the epoch.
    #[arg(long, allow_hyphen_values = true, value_parser = time_arg::parse_time, conflicts_with = "ts_ns", required_unless_present = "ts_ns")]
    pub ts: Option<i64>,
    /// The reading's time in nanoseconds since the epoch.
    #[arg(long, allow_hyphen_values = true)]
    pub ts_ns: Option<i64>,
}

pub fn get(args: &GetArgs) -> Result<(), String> {
    let ts_ns = args.ts_ns.or(args.ts).ok_or("give --ts or --ts-ns")?;
    let engine = args.open.open_existing()?;
    match engine
        .get(&args.device, &args.sensor, ts_ns)
        .map_err(|e| e.to_string())?
    {
        Some(value) => print_line(&OutputLine::new(&args.device, &args.sensor, ts_ns, &value)),
        None => Err(format!(
            "no reading of {}/{} at {} (ts_ns {ts_ns})",
            args.device,
            args.sensor,
            time_arg::format_time(ts_ns).unwrap_or_else(|| "a time before 1970".into())
        )),
    }
}

#[derive(Args, Debug)]
pub struct ScanArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    #[arg(long)]
    pub device: String,
    #[arg(long)]
    pub sensor: Option<String>,
    /// First time (inclusive): RFC 3339 (with any fraction), relative (-1h), or epoch
    /// milliseconds.
    #[arg(long, allow_hyphen_values = true, value_parser = time_arg::parse_time)]
    pub from: Option<i64>,
    /// End time (exclusive), in the same forms.
    #[arg(long, allow_hyphen_values = true, value_parser = time_arg::parse_time)]
    pub to: Option<i64>,
}

pub fn scan(args: &ScanArgs) -> Result<(), String> {
    let engine = args.open.open_existing()?;
    let readings = engine
        .scan(
            &args.device,
            args.sensor.as_deref(),
            args.from.unwrap_or(i64::MIN),
            args.to.unwrap_or(i64::MAX),
        )
        .map_err(|e| e.to_string())?;
    for r in &readings {
        print_line(&OutputLine::new(&r.device, &r.sensor, r.ts_ns, &r.value))?;
    }
    Ok(())
}

fn print_line(line: &OutputLine<'_>) -> Result<(), String> {
    let text = serde_json::to_string(line).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| format!("stdout: {e}"))
}

#[derive(Args, Debug)]
pub struct DepartArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    #[arg(long)]
    pub device: String,
}

/// Departs a device that is here; one that is not is an error (a mistyped name must not look
/// like a departure that happened).
pub fn depart(args: &DepartArgs) -> Result<(), String> {
    let engine = args.open.open_existing()?;
    if !engine.devices().iter().any(|d| d.name == args.device) {
        return Err(format!(
            "no device {:?} in {}: nothing departed",
            args.device,
            args.open.data.display()
        ));
    }
    engine.depart(&args.device).map_err(|e| e.to_string())?;
    engine.close().map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn stats(args: &StatsArgs) -> Result<(), String> {
    let engine = args.open.open_existing()?;
    let stats = engine.stats();
    if args.json {
        println!("{}", stats_json(&stats));
    } else {
        print!("{}", stats_table(&stats));
    }
    Ok(())
}

pub fn stats_json(s: &Stats) -> serde_json::Value {
    serde_json::json!({
        "user_bytes": s.user_bytes,
        "user_records": s.user_records,
        "log_bytes_written": s.log_bytes_written,
        "log_preallocated_bytes": s.log_preallocated_bytes,
        "lower_bytes_written": s.lower_bytes_written,
        "reclaimed_bytes_without_write": s.reclaimed_bytes_without_write,
        "write_amplification": s.write_amplification(),
        "upper": {"devices": s.upper.devices, "records": s.upper.records, "bytes": s.upper.bytes},
        "lower": {"devices": s.lower.devices, "records_estimate": s.lower.records, "bytes": s.lower.bytes},
        "index_bytes": s.index_bytes,
        "index_bytes_max": s.index_bytes_max,
        "segments_aged": s.segments_aged,
        "aged_records": s.aged_records,
        "moved_bytes": s.moved_bytes,
        "windows": s.windows,
        "window_file_bytes": s.window_file_bytes,
        "window_live_bytes": s.window_live_bytes,
        "consolidations": s.consolidations,
        "consolidated_bytes": s.consolidated_bytes,
        "windows_dropped": s.windows_dropped,
        "departures": s.departures,
        "group_commits": s.group_commits,
        "fdatasyncs": s.fdatasyncs,
        "live_segments": s.live_segments,
        "segments_recycled": s.segments_recycled,
        "segments_retired": s.segments_retired,
        "limits": {
            "log_bytes": s.log_bytes, "log_bytes_max": s.log_bytes_max,
            "spare_segments_bytes": s.spare_segments_bytes,
            "index_bytes": s.index_bytes, "index_bytes_max": s.index_bytes_max,
            "devices": s.devices, "devices_max": s.devices_max,
            "pending_bytes": s.pending_bytes, "pending_bytes_max": s.pending_bytes_max,
            "window_bytes_max": s.window_bytes_max,
            "windows_per_device_max": s.windows_per_device_max,
            "window_space_amplification_percent": s.window_space_amplification_percent,
            "window_space_amplification_percent_max": s.window_space_amplification_percent_max,
            "log_dirty_bytes_max": s.log_dirty_bytes_max,
            "recovery_buffer_bytes_max": s.recovery_buffer_bytes_max,
        },
        "early_passes": s.early_passes,
        "pass_failures": s.pass_failures,
        "overdue_segments": s.overdue_segments,
        "overdue_bytes": s.overdue_bytes,
        "write_stalls": s.write_stalls,
        "write_stall_ms": s.write_stall_ms,
        "no_space_errors": s.no_space_errors,
        "recovery_ms": s.recovery_ms,
        "recovered_records": s.recovered_records,
        "recovery_cut": s.recovery_cut,
        "last_maintenance_error": s.last_maintenance_error,
    })
}

/// The human-readable form of `stats`: what each tier holds, the engine's bounds, and what this
/// session did.
pub fn stats_table(s: &Stats) -> String {
    let mut out = tiers_table(s);
    out.push_str(&bounds_lines(s));
    out.push_str(&activity_lines(s));
    out
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// Devices, records and bytes of each tier.
fn tiers_table(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12}\n",
        "tier", "devices", "records", "MiB"
    ));
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12.2}\n",
        "upper",
        s.upper.devices,
        s.upper.records,
        mib(s.upper.bytes)
    ));
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12.2}   (records and MiB: the LSM's estimates)\n",
        "lower",
        s.lower.devices,
        s.lower.records,
        mib(s.lower.bytes)
    ));
    out
}

/// Index memory, log files, devices and queued bytes, each against its bound.
fn bounds_lines(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "index memory {:.2} MiB of {:.0} MiB cap ({:.1} bytes/record)\n",
        mib(s.index_bytes),
        mib(s.index_bytes_max),
        if s.upper.records > 0 {
            s.index_bytes as f64 / s.upper.records as f64
        } else {
            0.0
        }
    ));
    out.push_str(&format!(
        "log files {:.2} MiB of {:.0} MiB budget ({:.2} MiB spares); devices {} of {} max; queued {:.2} of {:.0} MiB\n",
        mib(s.log_bytes),
        mib(s.log_bytes_max),
        mib(s.spare_segments_bytes),
        s.devices,
        s.devices_max,
        mib(s.pending_bytes),
        mib(s.pending_bytes_max)
    ));
    out
}

/// Maintenance, bytes written and write amplification, commits and recovery.
fn activity_lines(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "maintenance: {} segments overdue ({:.2} MiB); {} segments left the log ({} early, {} failed passes); {} windows ({:.2} MiB, {:.2} MiB live), {} dropped, {} consolidations; {} write stalls ({} ms), {} refused for space\n",
        s.overdue_segments,
        mib(s.overdue_bytes),
        s.segments_aged,
        s.early_passes,
        s.pass_failures,
        s.windows,
        mib(s.window_file_bytes),
        mib(s.window_live_bytes),
        s.windows_dropped,
        s.consolidations,
        s.write_stalls,
        s.write_stall_ms,
        s.no_space_errors
    ));
    out.push_str(&format!(
        "this session: user {:.2} MiB in {} records; log {:.2} MiB + segment prep {:.2} MiB; lower tier {:.2} MiB\n",
        mib(s.user_bytes),
        s.user_records,
        mib(s.log_bytes_written),
        mib(s.log_preallocated_bytes),
        mib(s.lower_bytes_written)
    ));
    let without_preparation = if s.user_bytes > 0 {
        (s.log_bytes_written + s.lower_bytes_written) as f64 / s.user_bytes as f64
    } else {
        0.0
    };
    out.push_str(&format!(
        "engine write amplification {:.3} ({:.3} without the one-time zero-fill of new segments); reclaimed without a write {:.2} MiB; {} readings moved out of the log, {} departures\n",
        s.write_amplification(),
        without_preparation,
        mib(s.reclaimed_bytes_without_write),
        s.aged_records,
        s.departures
    ));
    out.push_str(&format!(
        "{} group commits, {} fdatasyncs; {} live segments, {} recycled; recovery {} ms over {} records{}\n",
        s.group_commits,
        s.fdatasyncs,
        s.live_segments,
        s.segments_recycled,
        s.recovery_ms,
        s.recovered_records,
        s.recovery_cut.as_deref().map(|c| format!(", cut torn tail at {c}")).unwrap_or_default()
    ));
    out
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
