//! `roamkv lab commit`: paper 003's redo-log experiment on real engines. 1-4 concurrent sessions,
//! each running single-row insert + commit transactions, against PostgreSQL, SQLite and roamkv,
//! with the log on a fast device and on a slow (HDD-like) one; total time, the share of session
//! time spent waiting for the commit, and how many transactions shared one log sync.
//!
//! Each engine's log sits on its own loop-device file system (the "log device"): PostgreSQL's
//! pg_wal (its data directory is on a second, never throttled, file system), SQLite's database
//! with its WAL (SQLite keeps the WAL beside the database; there is no separate log path), and
//! roamkv's data directory (its commit log is the only file written on the commit path).
//!
//! This file drives a run: the log devices, each one's calibration, every engine on each, the
//! report. The parts: `args` (the command line, checked into a `Plan`), `model` (the plan and the
//! rows), `runs` (one engine's runs on one log device), `postgres`, `sessions` (the embedded
//! engines' sessions), `throttle` (the slow device), `render` (the table and the report).
mod args;
pub mod model;
pub mod postgres;
pub mod render;
mod runs;
pub mod sessions;
pub mod throttle;

pub use args::{CommitArgs, THINK_MS_DEFAULT};
pub use model::{Device, DeviceReport, Engine, Plan, Row};

use crate::LabError;
use roamkv_testbed::fixture::{Fixture, interrupted};
use roamkv_testbed::prerequisite::require_root;
use runs::{run_engine, throttle_for};
use std::process::ExitCode;
use throttle::WriteThrottle;

/// Image sizes of the log device and PostgreSQL's data device.
const LOG_DEVICE_BYTES: u64 = 2 << 30;
const DATA_DEVICE_BYTES: u64 = 1 << 30;
/// 4 KiB write + fdatasync samples per device for its calibration.
const CALIBRATION_SAMPLES: usize = 30;

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
