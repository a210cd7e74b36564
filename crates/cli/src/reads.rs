//! The commands that read — get, scan, latest, devices, stats — and depart: on a data directory
//! no server runs on (`--data DIR`), or through a running `roamkv serve` (`--server URL`, whose
//! LOCK keeps the directory from a second process). Both print the same lines: readings as
//! JSON lines (`crate::json`), devices and statistics as a table or, with `--json`, in the form
//! of `roamkv_wire::report`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use roamkv_engine::limits::INTERNAL_DEVICE_PREFIX;
use roamkv_engine::{Clock, Durability, Engine, Options, Reading};
use roamkv_wire::edgex::event_index::is_deleted;
use roamkv_wire::report;
use roamkv_wire::time_arg;
use serde_json::Value;

use crate::json::{InputLine, OutputLine};
use crate::remote::{Remote, RemoteArgs, refused};
use crate::stats_table::stats_table;

/// A data directory, or a running server.
#[derive(Args, Debug, Clone)]
pub struct SourceArgs {
    /// The data directory (never created by these commands; while `roamkv serve` runs on it,
    /// ask the server with --server instead).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "server",
        conflicts_with = "server"
    )]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

pub(crate) enum Source {
    Local(Engine),
    Remote(Remote),
}

/// What a command does to a data directory: only read it (the directory is opened read-only:
/// nothing in it is created, changed or removed, whoever runs the command), or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

impl SourceArgs {
    pub(crate) fn open(&self, access: Access) -> Result<Source, String> {
        if let Some(remote) = Remote::from_args(&self.remote)? {
            return Ok(Source::Remote(remote));
        }
        let data = self
            .data
            .as_deref()
            .ok_or("give --data DIR or --server URL")?;
        open_existing(data, access).map(Source::Local)
    }
}

/// Opens a data directory that must exist: a mistyped path never becomes a new, empty one. The
/// directory keeps its own lower tier and segments; nothing runs in the background. `Read`
/// opens it read-only (`Options::read_only`): the commands that read leave every file as it
/// was, so that one run as root leaves no root-owned file in a service's directory.
pub(crate) fn open_existing(data: &Path, access: Access) -> Result<Engine, String> {
    if !roamkv_engine::is_data_dir(data) {
        return Err(format!(
            "{} is not a roamkv data directory (this command never creates one; \
             `roamkv load` or `roamkv serve` makes one)",
            data.display()
        ));
    }
    let options = |read_only| Options {
        durability: Durability::Sync,
        background_maintenance: false,
        read_only,
        ..Options::default()
    };
    let opened = match Engine::open(data, options(access == Access::Read)) {
        // LevelDB has no read-only open (its open writes a new log, MANIFEST and LOG): a LevelDB
        // directory is opened for writing, by its owner only (the files it makes are theirs).
        Err(roamkv_engine::Error::ReadOnly(why)) if owned_by_caller(data) => {
            eprintln!(
                "roamkv: {why}: opening {} for writing, as its owner",
                data.display()
            );
            Engine::open(data, options(false))
        }
        Err(roamkv_engine::Error::ReadOnly(why)) => {
            return Err(format!(
                "{why}: run this as the owner of {}, or through the server (--server URL)",
                data.display()
            ));
        }
        opened => opened,
    };
    opened.map_err(|e| match e {
        roamkv_engine::Error::Locked { .. } => {
            format!("{e}: if `roamkv serve` runs on it, ask the server instead (--server URL)")
        }
        e => e.to_string(),
    })
}

/// Whether this process's effective user owns `path`.
fn owned_by_caller(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    std::fs::metadata(path).is_ok_and(|m| m.uid() == euid)
}

/// `/devices/{device}{rest}`, the name escaped for a path segment (an id may hold any byte but
/// NUL).
fn device_path(device: &str, rest: &str) -> String {
    let escaped = percent_encoding::utf8_percent_encode(device, percent_encoding::NON_ALPHANUMERIC);
    format!("/devices/{escaped}{rest}")
}

fn print_reading(r: &Reading) -> Result<(), String> {
    print_json(&OutputLine::new(&r.device, &r.sensor, r.ts_ns, &r.value))
}

fn print_json(line: &impl serde::Serialize) -> Result<(), String> {
    let text = serde_json::to_string(line).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| format!("stdout: {e}"))
}

/// A reading of the native API's answers (`value`, or `value_b64` for binary values).
/// A reading of the server's answer: the same JSON-lines form `load` takes (crates/cli/src/json.rs).
fn reading_from_api(value: &Value) -> Result<Reading, String> {
    let line: InputLine = serde_json::from_value(value.clone())
        .map_err(|e| format!("the server's reading {value}: {e}"))?;
    Ok(Reading {
        ts_ns: line.ts_ns()?,
        value: line.value_bytes()?,
        device: line.device,
        sensor: line.sensor,
    })
}

fn readings_from_api(answer: &Value) -> Result<Vec<Reading>, String> {
    answer["readings"]
        .as_array()
        .ok_or_else(|| format!("the server's answer has no readings: {answer}"))?
        .iter()
        .map(reading_from_api)
        .collect()
}

#[derive(Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub source: SourceArgs,
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
    let found = match args.source.open(Access::Read)? {
        Source::Local(engine) => engine
            .get(&args.device, &args.sensor, ts_ns)
            .map_err(|e| e.to_string())?
            .map(|value| Reading {
                device: args.device.clone(),
                sensor: args.sensor.clone(),
                ts_ns,
                value,
            }),
        Source::Remote(remote) => {
            // The one-nanosecond window [ts, ts + 1) of a paged scan.
            let to_ns = ts_ns
                .checked_add(1)
                .ok_or("a server scan cannot reach the last nanosecond (i64::MAX)")?;
            let query = [
                ("sensor", args.sensor.clone()),
                ("from_ns", ts_ns.to_string()),
                ("to_ns", to_ns.to_string()),
                ("limit", "1".to_string()),
            ];
            let answer = remote.get(&device_path(&args.device, "/readings"), &query)?;
            readings_from_api(&answer)?.into_iter().next()
        }
    };
    match found {
        Some(reading) => print_reading(&reading),
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
    pub source: SourceArgs,
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

/// Readings one page of a scan through a server asks for (the server's largest page).
const SCAN_PAGE_READINGS: usize = 10_000;

pub fn scan(args: &ScanArgs) -> Result<(), String> {
    let from = args.from.unwrap_or(i64::MIN);
    let to = args.to.unwrap_or(i64::MAX);
    match args.source.open(Access::Read)? {
        Source::Local(engine) => {
            let readings = engine
                .scan(&args.device, args.sensor.as_deref(), from, to)
                .map_err(|e| e.to_string())?;
            readings
                .iter()
                .filter(|r| !is_deleted(&r.value))
                .try_for_each(print_reading)
        }
        // Page by page, each printed as it comes: memory stays one page whatever the range.
        Source::Remote(remote) => {
            let path = device_path(&args.device, "/readings");
            let mut after: Option<String> = None;
            loop {
                let mut query = vec![
                    ("from_ns", from.to_string()),
                    ("to_ns", to.to_string()),
                    ("limit", SCAN_PAGE_READINGS.to_string()),
                ];
                if let Some(sensor) = &args.sensor {
                    query.push(("sensor", sensor.clone()));
                }
                if let Some(token) = after.take() {
                    query.push(("after", token));
                }
                let page = remote.get(&path, &query)?;
                readings_from_api(&page)?
                    .iter()
                    .try_for_each(print_reading)?;
                match page["next"].as_str() {
                    Some(token) => after = Some(token.to_string()),
                    None => return Ok(()),
                }
            }
        }
    }
}

#[derive(Args, Debug)]
pub struct LatestArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long)]
    pub device: String,
    /// Only this sensor (default: the newest reading of every sensor).
    #[arg(long)]
    pub sensor: Option<String>,
}

pub fn latest(args: &LatestArgs) -> Result<(), String> {
    let readings = match args.source.open(Access::Read)? {
        Source::Local(engine) => {
            let mut readings = engine
                .latest(&args.device, args.sensor.as_deref())
                .map_err(|e| e.to_string())?;
            readings.retain(|r| !is_deleted(&r.value));
            readings
        }
        Source::Remote(remote) => {
            let query: Vec<(&str, String)> =
                args.sensor.iter().map(|s| ("sensor", s.clone())).collect();
            readings_from_api(&remote.get(&device_path(&args.device, "/latest"), &query)?)?
        }
    };
    readings.iter().try_for_each(print_reading)
}

#[derive(Args, Debug)]
pub struct DevicesArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// One JSON line per device instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn devices(args: &DevicesArgs) -> Result<(), String> {
    let devices: Vec<Value> = match args.source.open(Access::Read)? {
        Source::Local(engine) => {
            // The engine's wall clock: the clock `registered_at_ms` is on.
            let now = roamkv_engine::SystemClock.now_ms();
            // The server's own devices (its index of event ids) are not the user's.
            engine
                .devices()
                .iter()
                .filter(|d| !d.name.starts_with(INTERNAL_DEVICE_PREFIX))
                .map(|d| report::device_to_json(d, now))
                .collect()
        }
        Source::Remote(remote) => remote.get("/devices", &[])?["devices"]
            .as_array()
            .cloned()
            .ok_or("the server's answer has no devices")?,
    };
    if args.json {
        return devices.iter().try_for_each(print_json);
    }
    let mut out = format!(
        "{:<24} {:<6} {:>12} {:>13} {:>11}\n",
        "device", "tier", "age s", "log readings", "lower runs"
    );
    for d in &devices {
        out.push_str(&format!(
            "{:<24} {:<6} {:>12.1} {:>13} {:>11}\n",
            d["device"].as_str().unwrap_or("?"),
            d["tier"].as_str().unwrap_or("?"),
            d["age_ms"].as_f64().unwrap_or(0.0) / 1000.0,
            d["log_readings"].as_u64().unwrap_or(0),
            d["lower_runs"].as_u64().unwrap_or(0)
        ));
    }
    out.push_str(&format!("{} devices\n", devices.len()));
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(|e| format!("stdout: {e}"))
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn stats(args: &StatsArgs) -> Result<(), String> {
    let stats = match args.source.open(Access::Read)? {
        Source::Local(engine) => engine.stats(),
        Source::Remote(remote) => report::stats_from_json(remote.get("/stats", &[])?)?,
    };
    if args.json {
        println!("{}", report::stats_to_json(&stats));
    } else {
        print!("{}", stats_table(&stats));
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct DepartArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long)]
    pub device: String,
}

/// Departs a device that is here; one that is not is an error (a mistyped name must not look
/// like a departure that happened).
pub fn depart(args: &DepartArgs) -> Result<(), String> {
    match args.source.open(Access::Write)? {
        Source::Local(engine) => {
            if !engine.devices().iter().any(|d| d.name == args.device) {
                return Err(format!(
                    "no device {:?} in {}: nothing departed",
                    args.device,
                    args.source
                        .data
                        .as_deref()
                        .unwrap_or(Path::new("?"))
                        .display()
                ));
            }
            engine.depart(&args.device).map_err(|e| e.to_string())?;
            engine.close().map_err(|e| e.to_string())
        }
        Source::Remote(remote) => {
            let path = device_path(&args.device, "");
            let (status, body) = remote.call(reqwest::Method::DELETE, &path, &[], None)?;
            match status {
                200 => Ok(()),
                // Under `--on-depart cloud`: fenced, departs once the sink has its readings.
                202 => {
                    println!("{}", body["message"].as_str().unwrap_or("departing"));
                    Ok(())
                }
                404 => Err(format!(
                    "no device {:?} at {}: nothing departed",
                    args.device, remote.base
                )),
                _ => Err(refused(
                    &format!("departing {}", args.device),
                    status,
                    &body,
                )),
            }
        }
    }
}
