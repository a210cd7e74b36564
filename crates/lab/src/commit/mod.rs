//! `roamkv lab commit`: paper 003's redo-log experiment on real engines. 1-4 concurrent sessions,
//! each running single-row insert + commit transactions, against PostgreSQL, SQLite and roamkv,
//! with the log on a fast device and on a slow (HDD-like) one; total time, the share of session
//! time spent waiting for the commit, and how many transactions shared one log sync.
//!
//! Each engine's log sits on its own loop-device file system (the "log device"): PostgreSQL's
//! pg_wal (its data directory is on a second, never throttled, file system), SQLite's database
//! with its WAL (SQLite keeps the WAL beside the database; there is no separate log path), and
//! roamkv's data directory (its commit log is the only file written on the commit path).
pub mod model;
pub mod postgres;
pub mod render;
pub mod sessions;
pub mod throttle;

pub use model::{Device, DeviceReport, Engine, Plan, Row};

use crate::LabError;
use postgres::{Cluster, WalSettings};
use roamkv_testbed::fixture::{Fixture, interrupted};
use roamkv_testbed::prerequisite::require_root;
use std::path::PathBuf;
use std::process::ExitCode;
use throttle::WriteThrottle;

#[derive(clap::Args, Debug)]
pub struct CommitArgs {
    /// A few minutes: 1, 2 and 4 sessions of 200 transactions (1 B and 512 B rows).
    #[arg(long)]
    pub quick: bool,
    /// Directory for results.json and report.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-commit")]
    pub out: PathBuf,
    /// Comma-separated engines: postgresql, sqlite, roamkv.
    #[arg(long, value_name = "LIST", default_value = "postgresql,sqlite,roamkv")]
    pub engines: String,
    /// Comma-separated log devices: fast (the loop device as it is), slow (write-throttled).
    #[arg(long, value_name = "LIST", default_value = "fast,slow")]
    pub devices: String,
    /// Comma-separated session counts (default 1,2,3,4; --quick 1,2,4).
    #[arg(long, value_name = "LIST")]
    pub sessions: Option<String>,
    /// Comma-separated transactions per session; with --row-bytes, every pair is run
    /// (default: the paper's 10000,20000,40000 x 1 B and 20000 x 512 B; --quick 200 x 1 B and 512 B).
    #[arg(long, value_name = "LIST")]
    pub transactions: Option<String>,
    /// Comma-separated row sizes in bytes (see --transactions).
    #[arg(long, value_name = "LIST")]
    pub row_bytes: Option<String>,
    /// The file system of the log device (and of PostgreSQL's data directory).
    #[arg(long, value_name = "FS", default_value = "ext4")]
    pub fs: String,
    /// Write requests per second of the slow device (about 2/N s per write + fdatasync).
    #[arg(long, value_name = "N", default_value_t = throttle::SLOW_WRITE_IOPS_DEFAULT)]
    pub slow_write_iops: u32,
    /// PostgreSQL wal_sync_method: fdatasync, open_datasync or fsync.
    #[arg(long, value_name = "METHOD", default_value = "fdatasync")]
    pub wal_sync_method: String,
    /// PostgreSQL commit_delay in microseconds (0 = off).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub commit_delay_us: u32,
    /// PostgreSQL commit_siblings (commit_delay applies only with this many other open transactions).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub commit_siblings: u32,
    /// Work outside the commit, per transaction, in ms: each session sleeps this long before
    /// each transaction, as paper 003's sessions spent most of a transaction elsewhere (0: the
    /// sessions only commit). Default: paper 003's fast-device run, (1501 s - 97 s) / 80,000
    /// transactions = 17.6 ms outside the commit per transaction (its Table 3), rounded down.
    #[arg(long, value_name = "MS", default_value_t = THINK_MS_DEFAULT)]
    pub think_ms: u64,
}

/// See `CommitArgs::think_ms`.
pub const THINK_MS_DEFAULT: u64 = 17;
/// A think time longer than this is a typo (a 40k-transaction session would take days).
const THINK_MS_MAX: u64 = 10_000;

/// Paper 003's runs: 10k/20k/40k single-row transactions of 1 B per session, and 20k of 512 B.
const PAPER_WORKLOADS: [(u64, usize); 4] = [(10_000, 1), (20_000, 1), (40_000, 1), (20_000, 512)];
const QUICK_WORKLOADS: [(u64, usize); 2] = [(200, 1), (200, 512)];
/// The lab's bound on rows per session and row size (keeps a mistyped list from filling the disk).
const TRANSACTIONS_MAX: u64 = 1_000_000;
const ROW_BYTES_MAX: usize = 64 * 1024;
const SESSIONS_MAX: u32 = 64;
/// Image sizes of the log device and PostgreSQL's data device.
const LOG_DEVICE_BYTES: u64 = 2 << 30;
const DATA_DEVICE_BYTES: u64 = 1 << 30;
/// 4 KiB write + fdatasync samples per device for its calibration.
const CALIBRATION_SAMPLES: usize = 30;

fn parse_number_list<T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display>(
    what: &str,
    text: &str,
    min: T,
    max: T,
) -> Result<Vec<T>, LabError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let value: T = part.parse().map_err(|_| LabError::Parse {
            what: what.into(),
            detail: format!("{part:?} is not a number"),
        })?;
        if value < min || value > max {
            return Err(LabError::Parse {
                what: what.into(),
                detail: format!("{value} is outside {min}..={max}"),
            });
        }
        if !out.contains(&value) {
            out.push(value);
        }
    }
    if out.is_empty() {
        return Err(LabError::Parse {
            what: what.into(),
            detail: "empty list".into(),
        });
    }
    Ok(out)
}

fn parse_named<T: Copy + PartialEq>(
    what: &str,
    text: &str,
    names: &[(&str, T)],
) -> Result<Vec<T>, LabError> {
    let valid = names.iter().map(|n| n.0).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let value = names
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(part))
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                LabError::Unsupported(format!("unknown {what} {part:?}; valid: {valid}"))
            })?;
        if !out.contains(&value) {
            out.push(value);
        }
    }
    if out.is_empty() {
        return Err(LabError::Unsupported(format!(
            "no {what} given; valid: {valid}"
        )));
    }
    Ok(out)
}

impl CommitArgs {
    /// Checks every option before anything is made (bad input changes nothing).
    pub fn plan(&self) -> Result<Plan, LabError> {
        let engines = parse_named(
            "engine",
            &self.engines,
            &[
                ("postgresql", Engine::Postgresql),
                ("sqlite", Engine::Sqlite),
                ("roamkv", Engine::Roamkv),
            ],
        )?;
        let devices = parse_named(
            "device",
            &self.devices,
            &[("fast", Device::Fast), ("slow", Device::Slow)],
        )?;
        let sessions = match &self.sessions {
            Some(list) => parse_number_list("--sessions", list, 1, SESSIONS_MAX)?,
            None if self.quick => vec![1, 2, 4],
            None => vec![1, 2, 3, 4],
        };
        let workloads = match (&self.transactions, &self.row_bytes) {
            (None, None) if self.quick => QUICK_WORKLOADS.to_vec(),
            (None, None) => PAPER_WORKLOADS.to_vec(),
            (tx, bytes) => {
                let tx = match tx {
                    Some(list) => parse_number_list("--transactions", list, 1, TRANSACTIONS_MAX)?,
                    None if self.quick => vec![QUICK_WORKLOADS[0].0],
                    None => vec![20_000],
                };
                let bytes = match bytes {
                    Some(list) => parse_number_list("--row-bytes", list, 1, ROW_BYTES_MAX)?,
                    None => vec![1],
                };
                tx.iter()
                    .flat_map(|t| bytes.iter().map(move |b| (*t, *b)))
                    .collect()
            }
        };
        if !postgres::WAL_SYNC_METHODS.contains(&self.wal_sync_method.as_str()) {
            return Err(LabError::Unsupported(format!(
                "unknown --wal-sync-method {:?}; valid: {}",
                self.wal_sync_method,
                postgres::WAL_SYNC_METHODS.join(", ")
            )));
        }
        if self.think_ms > THINK_MS_MAX {
            return Err(LabError::Unsupported(format!(
                "--think-ms must be at most {THINK_MS_MAX}"
            )));
        }
        if self.slow_write_iops == 0 {
            return Err(LabError::Unsupported(
                "--slow-write-iops must be at least 1".into(),
            ));
        }
        Ok(Plan {
            engines,
            devices,
            sessions,
            workloads,
            fs: self.fs.parse()?,
            slow_write_iops: self.slow_write_iops,
            think_ms: self.think_ms,
            postgres: WalSettings {
                sync_method: self.wal_sync_method.clone(),
                commit_delay_us: self.commit_delay_us,
                commit_siblings: self.commit_siblings,
            },
        })
    }
}

pub fn run(args: &CommitArgs) -> ExitCode {
    match run_plan(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab commit: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_plan(args: &CommitArgs) -> Result<ExitCode, LabError> {
    let plan = args.plan()?;
    require_root()?;
    if plan.engines.contains(&Engine::Roamkv) && !sessions::ROAMKV_AVAILABLE {
        return Err(LabError::Unsupported(
            "this build has no roamkv engine; use the roamkv binary (or --engines postgresql,sqlite)"
                .into(),
        ));
    }
    let bar = progress_bar(&plan);
    let mut rows = Vec::new();
    let mut devices = Vec::new();
    // PostgreSQL's data directory: its own file system, never throttled (only the log is slow).
    let data_fixture = if plan.engines.contains(&Engine::Postgresql) {
        Some(Fixture::create(plan.fs, DATA_DEVICE_BYTES)?)
    } else {
        None
    };
    for &device in &plan.devices {
        let log_fixture = Fixture::create(plan.fs, LOG_DEVICE_BYTES)?;
        let report = describe_device(&log_fixture, device, &plan)?;
        roamkv_testbed::report::say(&bar, device_line(device, &report));
        devices.push(report);
        for &engine in &plan.engines {
            let result = run_engine(
                &plan,
                engine,
                device,
                &log_fixture,
                data_fixture.as_ref(),
                &bar,
                &mut rows,
            );
            if let Err(e) = result {
                if matches!(e, LabError::Interrupted) || interrupted() {
                    return Err(LabError::Interrupted);
                }
                roamkv_testbed::report::say(
                    &bar,
                    format!("{} on {}: {e}", engine.name(), device.name()),
                );
                add_failed_rows(&plan, engine, device, &e, &mut rows, &bar);
            }
            log_fixture.clear()?;
        }
    }
    drop(data_fixture);
    bar.finish_and_clear();
    render::print_table(&rows);
    let (json, html) = render::write_report(&args.out, &plan, &devices, &rows)?;
    println!("wrote {} and {}", json.display(), html.display());
    Ok(if rows.iter().any(|r| r.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn progress_bar(plan: &Plan) -> indicatif::ProgressBar {
    let runs =
        (plan.engines.len() * plan.devices.len() * plan.workloads.len() * plan.sessions.len())
            as u64;
    let bar = indicatif::ProgressBar::new(runs);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// One line on what a log device costs per synchronous write.
fn device_line(device: Device, report: &DeviceReport) -> String {
    format!(
        "{} log device {}: 4 KiB write + fdatasync mean {:.2} ms, median {:.2} ms{}",
        device.name(),
        report.block_device,
        report.sync_write_ms_mean,
        report.sync_write_ms_median,
        report
            .throttle
            .as_deref()
            .map_or(String::new(), |t| format!(" ({t})"))
    )
}

/// After `engine` failed on `device`: every run of the two that has no row yet gets one with the
/// error.
fn add_failed_rows(
    plan: &Plan,
    engine: Engine,
    device: Device,
    error: &LabError,
    rows: &mut Vec<Row>,
    bar: &indicatif::ProgressBar,
) {
    for &workload in &plan.workloads {
        for &sessions in &plan.sessions {
            let has_row = rows.iter().any(|r: &Row| {
                r.engine == engine.name()
                    && r.device == device.name()
                    && r.sessions == sessions
                    && (r.transactions, r.row_bytes) == workload
            });
            if !has_row {
                rows.push(Row::failed(
                    engine,
                    device,
                    sessions,
                    workload,
                    error.to_string(),
                ));
                bar.inc(1);
            }
        }
    }
}

/// The slow device's throttle, when `device` is the slow one.
fn throttle_for(
    fixture: &Fixture,
    device: Device,
    plan: &Plan,
) -> Result<Option<WriteThrottle>, LabError> {
    match device {
        Device::Fast => Ok(None),
        Device::Slow => WriteThrottle::apply(fixture.device(), plan.slow_write_iops).map(Some),
    }
}

fn describe_device(
    fixture: &Fixture,
    device: Device,
    plan: &Plan,
) -> Result<DeviceReport, LabError> {
    fixture.quiesce()?;
    let throttle = throttle_for(fixture, device, plan)?;
    // Past blk-throttle's first-slice burst (about write_iops / 10 requests at full speed).
    let warmup = match device {
        Device::Fast => 5,
        Device::Slow => plan.slow_write_iops as usize / 5 + 10,
    };
    let cost = sessions::sync_write_cost(fixture.mount_dir(), warmup, CALIBRATION_SAMPLES)?;
    Ok(DeviceReport {
        device: device.name(),
        fs: plan.fs.name().to_string(),
        block_device: fixture.device().display().to_string(),
        mkfs: fixture.mkfs_command().to_string(),
        mount_options: fixture.mount_options().to_string(),
        throttle: throttle.as_ref().map(WriteThrottle::describe),
        sync_write_ms_median: cost.median_ms,
        sync_write_ms_mean: cost.mean_ms,
    })
}

/// Runs every workload x session count of one engine on one log device, pushing a row per run.
/// PostgreSQL keeps one cluster for all of them; SQLite and roamkv start from an empty directory.
fn run_engine(
    plan: &Plan,
    engine: Engine,
    device: Device,
    log_fixture: &Fixture,
    data_fixture: Option<&Fixture>,
    bar: &indicatif::ProgressBar,
    rows: &mut Vec<Row>,
) -> Result<(), LabError> {
    bar.set_message(format!(
        "{} on the {} device: setting up",
        engine.name(),
        device.name()
    ));
    let cluster = match engine {
        Engine::Postgresql => {
            let data = data_fixture
                .ok_or_else(|| LabError::Unsupported("no data device for PostgreSQL".into()))?;
            Some(Cluster::create(
                data.mount_dir(),
                log_fixture.mount_dir(),
                &plan.postgres,
            )?)
        }
        _ => None,
    };
    for &workload in &plan.workloads {
        for &sessions in &plan.sessions {
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            bar.set_message(format!(
                "{} on the {} device: {sessions} sessions x {} tx x {} B",
                engine.name(),
                device.name(),
                workload.0,
                workload.1
            ));
            let row = match &cluster {
                Some(c) => run_postgres(c, plan, device, log_fixture, sessions, workload),
                None => run_embedded(plan, engine, device, log_fixture, sessions, workload),
            };
            let row = match row {
                Ok(row) => row,
                Err(LabError::Interrupted) => return Err(LabError::Interrupted),
                Err(e) => {
                    roamkv_testbed::report::say(
                        bar,
                        format!(
                            "{} {} {sessions} sessions: {e}",
                            engine.name(),
                            device.name()
                        ),
                    );
                    Row::failed(engine, device, sessions, workload, e.to_string())
                }
            };
            rows.push(row);
            bar.inc(1);
        }
    }
    drop(cluster);
    Ok(())
}

fn run_postgres(
    cluster: &Cluster,
    plan: &Plan,
    device: Device,
    log_fixture: &Fixture,
    sessions: u32,
    (transactions, row_bytes): (u64, usize),
) -> Result<Row, LabError> {
    cluster.prepare_run()?;
    log_fixture.quiesce()?;
    let before = cluster.wal_stats()?;
    let script_dir = tempfile::Builder::new()
        .prefix("roamkv-lab-pgbench-")
        .tempdir()
        .map_err(|e| LabError::io("temp dir", e))?;
    let throttle = throttle_for(log_fixture, device, plan)?;
    let run = cluster.run_sessions(
        script_dir.path(),
        sessions,
        transactions,
        row_bytes,
        plan.think_ms,
    )?;
    drop(throttle);
    let after = cluster.wal_stats()?;
    let syncs = after.wal_sync.saturating_sub(before.wal_sync);
    let sync_ms = after.wal_sync_time_ms - before.wal_sync_time_ms;
    let write_ms = after.wal_write_time_ms - before.wal_write_time_ms;
    let total_tx = u64::from(sessions) * transactions;
    // pgbench's tps excludes connection set-up, as the sessions' own clocks do for the others.
    let total_seconds = total_tx as f64 / run.report.tps;
    let commit_ms = run.report.commit_latency_ms().unwrap_or(f64::NAN);
    Ok(Row {
        engine: Engine::Postgresql.name(),
        device: device.name(),
        sessions,
        transactions,
        row_bytes,
        total_seconds,
        commit_wait_share: run.samples.share(),
        commit_wait_source: "pg_stat_activity: client backends in wait event WALWrite or WALSync, sampled every 10 ms",
        commit_wait_share_client: commit_ms * transactions as f64 / 1000.0 / total_seconds,
        mean_group_size: ratio(total_tx, syncs),
        log_syncs: syncs,
        transactions_per_second: run.report.tps,
        commit_latency_ms_mean: commit_ms,
        log_sync_ms_mean: (syncs > 0).then(|| sync_ms / syncs as f64),
        lock_wait_share: None,
        detail: serde_json::json!({
            "pg_stat_wal_delta": {
                "wal_records": after.wal_records.saturating_sub(before.wal_records),
                "wal_bytes": after.wal_bytes.saturating_sub(before.wal_bytes),
                "wal_write": after.wal_write.saturating_sub(before.wal_write),
                "wal_sync": syncs,
                "wal_write_time_ms": write_ms,
                "wal_sync_time_ms": sync_ms,
            },
            "wal_io_share_of_wall_time": (write_ms + sync_ms) / 1000.0 / total_seconds,
            "pgbench": run.report,
            "wait_samples": run.samples,
            "wall_seconds_incl_connect": run.wall_seconds,
            "settings": plan.postgres,
        }),
        error: None,
    })
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

fn run_embedded(
    plan: &Plan,
    engine: Engine,
    device: Device,
    log_fixture: &Fixture,
    sessions: u32,
    (transactions, row_bytes): (u64, usize),
) -> Result<Row, LabError> {
    let dir = log_fixture.mount_dir().join(format!(
        "{}-{sessions}-{transactions}-{row_bytes}",
        engine.name()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| LabError::io(&dir, e))?;
    let total_tx = u64::from(sessions) * transactions;
    let throttle = || throttle_for(log_fixture, device, plan);
    let think = std::time::Duration::from_millis(plan.think_ms);
    let (totals, syncs, source, detail) = match engine {
        Engine::Sqlite => sqlite_run(
            &dir,
            log_fixture,
            &throttle,
            sessions,
            transactions,
            row_bytes,
            think,
        )?,
        Engine::Roamkv => roamkv_run(
            &dir,
            log_fixture,
            &throttle,
            sessions,
            transactions,
            row_bytes,
            think,
        )?,
        Engine::Postgresql => {
            return Err(LabError::Unsupported(
                "PostgreSQL runs through its cluster".into(),
            ));
        }
    };
    let client_share = totals.commit_seconds_sum / totals.session_seconds_sum;
    Ok(Row {
        engine: engine.name(),
        device: device.name(),
        sessions,
        transactions,
        row_bytes,
        total_seconds: totals.total_seconds,
        commit_wait_share: client_share,
        commit_wait_source: source,
        commit_wait_share_client: client_share,
        mean_group_size: ratio(total_tx, syncs),
        log_syncs: syncs,
        transactions_per_second: total_tx as f64 / totals.total_seconds,
        commit_latency_ms_mean: totals.commit_latency_ms_mean,
        log_sync_ms_mean: None,
        lock_wait_share: (engine == Engine::Sqlite)
            .then(|| totals.lock_wait_seconds_sum / totals.session_seconds_sum),
        detail,
        error: None,
    })
}

/// What one embedded engine's sessions measured: their totals, the log syncs they made, where
/// the commit-wait share comes from, and the engine's own detail.
type EmbeddedRun = (
    sessions::SessionTotals,
    u64,
    &'static str,
    serde_json::Value,
);

/// The log device's throttle (none on the fast device), held while it exists.
type ThrottleOn<'a> = dyn Fn() -> Result<Option<WriteThrottle>, LabError> + 'a;

/// SQLite's sessions in WAL mode, synchronous=full, throttled while they run.
fn sqlite_run(
    dir: &std::path::Path,
    log_fixture: &Fixture,
    throttle: &ThrottleOn<'_>,
    sessions: u32,
    transactions: u64,
    row_bytes: usize,
    think: std::time::Duration,
) -> Result<EmbeddedRun, LabError> {
    let path = sessions::sqlite_prepare(dir)?;
    log_fixture.quiesce()?;
    let before = crate::sqlite::vfs::SyncCounts::read();
    let throttle = throttle()?;
    let totals = sessions::sqlite_sessions(&path, sessions, transactions, row_bytes, think)?;
    drop(throttle);
    let syncs = crate::sqlite::vfs::SyncCounts::read().delta(&before);
    let count = syncs.delegated_syncs + syncs.fsync_calls;
    Ok((
        totals,
        count,
        "client: time inside COMMIT (WAL append + fdatasync) / session time",
        serde_json::json!({"sync_calls": syncs, "journal_mode": "wal", "synchronous": "full"}),
    ))
}

/// roamkv's sessions at sync durability; Engine::open (segment preallocation) happens before the
/// throttle goes on.
fn roamkv_run(
    dir: &std::path::Path,
    log_fixture: &Fixture,
    throttle: &ThrottleOn<'_>,
    sessions: u32,
    transactions: u64,
    row_bytes: usize,
    think: std::time::Duration,
) -> Result<EmbeddedRun, LabError> {
    log_fixture.quiesce()?;
    let throttle_slot = std::cell::RefCell::new(None);
    let shape = sessions::SessionShape {
        sessions,
        transactions,
        row_bytes,
        think,
    };
    let result = sessions::roamkv_sessions_with(dir, &shape, &|| {
        *throttle_slot.borrow_mut() = throttle()?;
        Ok(())
    });
    drop(throttle_slot);
    let (totals, counters) = result?;
    Ok((
        totals,
        counters.group_commits,
        "client: time inside put_batch (append + group fdatasync) / session time",
        serde_json::json!({"engine_stats_delta": counters, "durability": "sync"}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        commit: CommitArgs,
    }

    fn args(extra: &[&str]) -> Result<Plan, String> {
        let mut all = vec!["x"];
        all.extend_from_slice(extra);
        let w = Wrapper::try_parse_from(all).map_err(|e| e.to_string())?;
        w.commit.plan().map_err(|e| e.to_string())
    }

    #[test]
    fn default_plan_is_the_papers() {
        let plan = args(&[]).expect("valid");
        assert_eq!(plan.workloads, PAPER_WORKLOADS.to_vec());
        assert_eq!(plan.sessions, vec![1, 2, 3, 4]);
        assert_eq!(plan.devices, vec![Device::Fast, Device::Slow]);
        assert_eq!(plan.engines.len(), 3);
        let quick = args(&["--quick"]).expect("valid");
        assert_eq!(quick.workloads, QUICK_WORKLOADS.to_vec());
    }

    #[test]
    fn explicit_lists_make_every_pair() {
        let plan = args(&[
            "--transactions",
            "10,20",
            "--row-bytes",
            "1,512",
            "--sessions",
            "2",
        ])
        .expect("valid");
        assert_eq!(plan.workloads, vec![(10, 1), (10, 512), (20, 1), (20, 512)]);
        assert_eq!(plan.sessions, vec![2]);
    }

    #[test]
    fn bad_options_are_refused_with_the_valid_names() {
        let e = args(&["--engines", "oracle"]).err().unwrap_or_default();
        assert!(e.contains("oracle") && e.contains("postgresql"), "{e}");
        let e = args(&["--devices", "ssd"]).err().unwrap_or_default();
        assert!(e.contains("fast, slow"), "{e}");
        let e = args(&["--sessions", "0"]).err().unwrap_or_default();
        assert!(e.contains("outside"), "{e}");
        let e = args(&["--transactions", "ten"]).err().unwrap_or_default();
        assert!(e.contains("not a number"), "{e}");
        let e = args(&["--wal-sync-method", "o_direct"])
            .err()
            .unwrap_or_default();
        assert!(e.contains("open_datasync"), "{e}");
        let e = args(&["--fs", "zfs"]).err().unwrap_or_default();
        assert!(e.contains("zfs"), "{e}");
        assert!(args(&["--slow-write-iops", "0"]).is_err());
    }
}
