//! `roamkv bench backup`: what an online backup costs a gateway that keeps ingesting
//! (docs/SERVER.md, "Backup and restore").
//!
//! A real `roamkv serve` on its own ext4 (a loop device), a backup set on a second one (a
//! gateway backs up to another disk). `--fill-mib` of readings first, a management time of
//! `--management-time-ms` so that part of it is in the lower tier; then, with the page cache
//! dropped:
//! - **the ceiling**: the data disk's sequential read rate (O_DIRECT, 1 MiB reads of the loop
//!   device), what a backup's read side can reach;
//! - **ingest alone**: `--clients` closed-loop clients posting native batches for `--seconds`;
//! - **ingest during backups**: the same load while `roamkv backup --server` runs back to back
//!   (the first one full, the rest incremental); the ingest rate during the full backup as a
//!   share of ingest alone, and the backup's rate as a share of the read ceiling;
//! - **restore**: the newest backup restored (`roamkv restore`), then opened and checked
//!   (`roamkv check`), each timed.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Args;
use roamkv_testbed::fixture::{Fixture, FsSpec, drop_caches};
use roamkv_testbed::report::{Html, MachineHeader, terminal_table};

use crate::edge_rig::{Edge, Load, LoadSpec, acknowledged_chart, roamkv_exe, sample};
use crate::error::{BenchError, Result};

#[derive(Args, Debug)]
pub struct BackupBenchArgs {
    #[arg(long, default_value = "out/bench-backup")]
    pub out: PathBuf,
    /// Readings written before the measured phases, in MiB of values.
    #[arg(long, default_value_t = 1024)]
    pub fill_mib: u64,
    /// Seconds of each measured phase.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Closed-loop clients posting batches.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Readings per batch, and bytes per value.
    #[arg(long, default_value_t = 200)]
    pub batch_readings: usize,
    #[arg(long, default_value_t = 1000)]
    pub value_bytes: usize,
    /// The server's management time: readings leave the log for the lower tier after it.
    #[arg(long, default_value_t = 20_000)]
    pub management_time_ms: u64,
    /// The server's log budget (`--log-budget-mib`). A backup holds the log's segments while
    /// it copies them, and its hold goes when the log passes 95 % of this: under full ingest the
    /// server's default (1024) leaves a copy of the log a few seconds.
    #[arg(long, default_value_t = 4096)]
    pub log_budget_mib: u64,
    /// Small sizes and short phases: a functional check of the bench, not a measurement.
    #[arg(long)]
    pub quick: bool,
}

/// One backup run during the load.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BackupRun {
    pub backup: u64,
    pub started_s: f64,
    pub seconds: f64,
    pub bytes: u64,
    pub bytes_copied: u64,
    pub mib_per_sec: f64,
    /// Why it failed (the server released its hold), if it did.
    pub failed: Option<String>,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct BackupResults {
    pub data_bytes: u64,
    pub disk_read_mib_per_sec: f64,
    /// Readings/s acknowledged each second, alone and during backups.
    pub alone: Vec<u64>,
    pub during: Vec<u64>,
    pub backups: Vec<BackupRun>,
    pub ingest_alone_per_sec: f64,
    /// Ingest during the full backup (the first), and its share of ingest alone.
    pub ingest_during_full_per_sec: f64,
    pub ingest_share_during_full: f64,
    pub full_backup_share_of_disk_read: f64,
    /// A full backup with ingest stopped: the copy path's own rate.
    pub idle_backup_mib_per_sec: f64,
    /// Ingest over the whole phase of back-to-back backups, as a share of ingest alone.
    pub ingest_share_during_phase: f64,
    pub restore_seconds: f64,
    pub restored_bytes: u64,
    pub open_seconds: f64,
    pub check_seconds: f64,
}

/// Runs `roamkv backup --server` back to back until `seconds` have passed since `started`.
fn back_to_back(
    url: String,
    set: PathBuf,
    seconds: u64,
    runs: Arc<std::sync::Mutex<Vec<BackupRun>>>,
) -> std::thread::JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        let phase = Instant::now();
        while phase.elapsed() < Duration::from_secs(seconds) {
            let at = phase.elapsed().as_secs_f64();
            let started = Instant::now();
            let out = match roamkv_json(&[
                "backup",
                "--server",
                &url,
                "--to",
                &set.to_string_lossy(),
                "--json",
            ]) {
                Ok(out) => out,
                Err(e) => {
                    // Counted, not hidden: the hold was released (serve.log says why).
                    let mut runs = runs
                        .lock()
                        .map_err(|_| BenchError::Run("a poisoned lock".into()))?;
                    runs.push(BackupRun {
                        failed: Some(e.to_string()),
                        started_s: at,
                        seconds: started.elapsed().as_secs_f64(),
                        ..BackupRun::default()
                    });
                    continue;
                }
            };
            let seconds = started.elapsed().as_secs_f64();
            let copied = out["bytes_copied"].as_u64().unwrap_or(0);
            runs.lock()
                .map_err(|_| BenchError::Run("a poisoned lock".into()))?
                .push(BackupRun {
                    backup: out["backup"].as_u64().unwrap_or(0),
                    started_s: at,
                    seconds,
                    bytes: out["bytes"].as_u64().unwrap_or(0),
                    bytes_copied: copied,
                    mib_per_sec: copied as f64 / 1_048_576.0 / seconds.max(1e-9),
                    failed: None,
                });
        }
        Ok(())
    })
}

/// The data disk's sequential read rate: O_DIRECT 1 MiB reads of the loop device, up to
/// `bytes`.
fn disk_read_mib_per_sec(device: &Path, bytes: u64) -> Result<f64> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(device)
        .map_err(|e| BenchError::io("opening", device, e))?;
    // O_DIRECT wants an aligned buffer: a 1 MiB read into a 4 KiB-aligned part of 2 MiB.
    let mut raw = vec![0u8; 2 << 20];
    let offset = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[offset..offset + (1 << 20)];
    let started = Instant::now();
    let mut read = 0u64;
    while read < bytes {
        let n = file
            .read(buf)
            .map_err(|e| BenchError::io("reading", device, e))?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    Ok(read as f64 / 1_048_576.0 / started.elapsed().as_secs_f64().max(1e-9))
}

fn du_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => du_bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.blocks() * 512),
            })
            .sum()
    })
}

/// Runs `roamkv ARGS`; its stdout as JSON.
fn roamkv_json(args: &[&str]) -> Result<serde_json::Value> {
    let output = Command::new(roamkv_exe()?)
        .args(args)
        .output()
        .map_err(|e| BenchError::os("running roamkv", e))?;
    if !output.status.success() {
        return Err(BenchError::Run(format!(
            "roamkv {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| BenchError::Run(format!("roamkv {}: not JSON: {e}", args.join(" "))))
}

fn load_spec(args: &BackupBenchArgs) -> LoadSpec {
    LoadSpec {
        clients: args.clients,
        batch_readings: args.batch_readings,
        value_bytes: args.value_bytes,
    }
}

pub fn run(args: &BackupBenchArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv bench backup: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &BackupBenchArgs) -> Result<()> {
    roamkv_testbed::prerequisite::require_root()?;
    let args = &BackupBenchArgs {
        fill_mib: if args.quick {
            args.fill_mib.min(64)
        } else {
            args.fill_mib
        },
        seconds: if args.quick {
            args.seconds.min(8)
        } else {
            args.seconds
        },
        out: args.out.clone(),
        ..*args
    };
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    let edge = Edge::start(args.management_time_ms, args.log_budget_mib, &args.out)?;
    // Back-to-back backups of a set that keeps every one: room for tens of GiB.
    let target = Fixture::create(FsSpec::Ext4, 48 << 30)?;
    println!(
        "roamkv bench backup: roamkv serve (log budget {} MiB) on an ext4 of its own, the backup set on another; {} MiB first, then {} s of {} clients alone and {} s during backups",
        args.log_budget_mib, args.fill_mib, args.seconds, args.clients, args.seconds
    );
    let mut r = BackupResults::default();
    fill(&edge, args)?;
    let data = edge.fixture().mount_dir().join("data");
    r.data_bytes = du_bytes(&data);
    drop_caches()?;
    r.disk_read_mib_per_sec =
        disk_read_mib_per_sec(edge.fixture().device(), r.data_bytes.max(256 << 20))?;
    println!(
        "data directory {:.0} MiB; the disk reads {:.0} MiB/s sequentially",
        r.data_bytes as f64 / 1_048_576.0,
        r.disk_read_mib_per_sec
    );

    let load = Load::start(edge.addr, &load_spec(args), 1 << 40, true);
    r.alone = sample(&load, args.seconds, None);
    load.stop()?;
    drop_caches()?;
    let set = target.mount_dir().join("set");
    let load = Load::start(edge.addr, &load_spec(args), 1 << 41, true);
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let backups = back_to_back(
        format!("http://{}", edge.addr),
        set.clone(),
        args.seconds,
        Arc::clone(&runs),
    );
    r.during = sample(&load, args.seconds, Some(&backups));
    load.stop()?;
    backups
        .join()
        .map_err(|_| BenchError::Run("the backup thread panicked".into()))??;
    r.backups = runs
        .lock()
        .map_err(|_| BenchError::Run("a poisoned lock".into()))?
        .clone();
    // The copy's own ceiling: a full backup with ingest stopped, cache dropped.
    drop_caches()?;
    let started = Instant::now();
    let idle_set = target.mount_dir().join("set-idle");
    let out = roamkv_json(&[
        "backup",
        "--server",
        &format!("http://{}", edge.addr),
        "--to",
        &idle_set.to_string_lossy(),
        "--json",
    ])?;
    r.idle_backup_mib_per_sec = out["bytes_copied"].as_u64().unwrap_or(0) as f64
        / 1_048_576.0
        / started.elapsed().as_secs_f64().max(1e-9);
    restore(&target, &set, &mut r)?;
    summarize(&mut r);
    report(args, &header, &r)
}

/// Writes `--fill-mib` of readings and waits a management time, so that part of them is in
/// the lower tier when the backups run.
fn fill(edge: &Edge, args: &BackupBenchArgs) -> Result<()> {
    let load = Load::start(edge.addr, &load_spec(args), 0, false);
    let want = (args.fill_mib << 20) / args.value_bytes as u64;
    let started = Instant::now();
    while load.acked.load(Ordering::Relaxed) < want && !load.ended() {
        std::thread::sleep(Duration::from_millis(100));
    }
    load.stop()?;
    println!(
        "filled {want} readings in {:.0} s; waiting a management time",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_millis(args.management_time_ms * 3 / 2));
    Ok(())
}

fn restore(target: &Fixture, set: &Path, r: &mut BackupResults) -> Result<()> {
    let restored = target.mount_dir().join("restored");
    drop_caches()?;
    let started = Instant::now();
    let out = roamkv_json(&[
        "restore",
        "--from",
        &set.to_string_lossy(),
        "--to",
        &restored.to_string_lossy(),
        "--json",
    ])?;
    r.restore_seconds = started.elapsed().as_secs_f64();
    r.restored_bytes = out["bytes"].as_u64().unwrap_or(0);
    let started = Instant::now();
    roamkv_json(&["stats", "--data", &restored.to_string_lossy(), "--json"])?;
    r.open_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let output = Command::new(roamkv_exe()?)
        .args(["check", "--data"])
        .arg(&restored)
        .output()
        .map_err(|e| BenchError::os("running roamkv check", e))?;
    if !output.status.success() {
        return Err(BenchError::Check(format!(
            "the restored directory fails roamkv check: {}",
            String::from_utf8_lossy(&output.stdout)
        )));
    }
    r.check_seconds = started.elapsed().as_secs_f64();
    Ok(())
}

fn summarize(r: &mut BackupResults) {
    let mean = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len().max(1) as f64;
    r.ingest_alone_per_sec = mean(&r.alone);
    if let Some(full) = r.backups.iter().find(|b| b.failed.is_none()) {
        let from = full.started_s.floor() as usize;
        let to = ((full.started_s + full.seconds).ceil() as usize).min(r.during.len());
        r.ingest_during_full_per_sec = mean(&r.during[from.min(to)..to]);
        r.full_backup_share_of_disk_read = full.mib_per_sec / r.disk_read_mib_per_sec.max(1e-9);
    }
    r.ingest_share_during_full = r.ingest_during_full_per_sec / r.ingest_alone_per_sec.max(1e-9);
    r.ingest_share_during_phase = mean(&r.during) / r.ingest_alone_per_sec.max(1e-9);
}

/// The run in one line: the terminal's last, the report's first.
fn summary_line(r: &BackupResults) -> String {
    format!(
        "{} of {} backups completed (the rest lost their hold: serve.log); ingest alone {:.0} readings/s; during the first complete backup {:.0} ({:.0} %); over the whole phase of back-to-back backups {:.0} %; the full backup copied at {:.0} MiB/s, {:.0} % of the disk's sequential read ({:.0} MiB/s), with ingest stopped {:.0} MiB/s; restore of {:.0} MiB {:.1} s, open {:.1} s, check {:.1} s",
        r.backups.iter().filter(|b| b.failed.is_none()).count(),
        r.backups.len(),
        r.ingest_alone_per_sec,
        r.ingest_during_full_per_sec,
        r.ingest_share_during_full * 100.0,
        r.ingest_share_during_phase * 100.0,
        r.backups
            .iter()
            .find(|b| b.failed.is_none())
            .map_or(0.0, |b| b.mib_per_sec),
        r.full_backup_share_of_disk_read * 100.0,
        r.disk_read_mib_per_sec,
        r.idle_backup_mib_per_sec,
        r.restored_bytes as f64 / 1_048_576.0,
        r.restore_seconds,
        r.open_seconds,
        r.check_seconds
    )
}

fn report(args: &BackupBenchArgs, header: &MachineHeader, r: &BackupResults) -> Result<()> {
    let mut rows: Vec<Vec<String>> = r
        .backups
        .iter()
        .map(|b| {
            vec![
                b.backup.to_string(),
                format!("{:.1}", b.started_s),
                format!("{:.2}", b.seconds),
                format!("{:.0}", b.bytes as f64 / 1_048_576.0),
                format!("{:.0}", b.bytes_copied as f64 / 1_048_576.0),
                match &b.failed {
                    None => format!("{:.0}", b.mib_per_sec),
                    Some(_) => "failed: hold released".into(),
                },
            ]
        })
        .collect();
    rows.truncate(20);
    let columns = [
        "backup",
        "at s",
        "seconds",
        "MiB",
        "MiB copied",
        "MiB/s copied",
    ];
    println!("{}", terminal_table(&columns, &rows));
    let summary = summary_line(r);
    println!("{summary}");
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "args": format!("{args:?}"),
        "results": r,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    let mut html = Html::new(
        "roamkv bench backup: an online backup while ingest goes on",
        header,
    );
    html.paragraph(&summary);
    html.svg(&acknowledged_chart(&r.alone, &r.during, "during backups"));
    html.table(&columns, &rows);
    html.write(&args.out.join("report.html"))?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}
