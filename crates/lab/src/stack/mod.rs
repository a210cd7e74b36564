//! `roamkv lab stack`: paper 004's step-by-step table. SQLite single-row inserts per second and
//! block writes per insert, from Android's stock stack (ext4 ordered, TRUNCATE journal, fsync)
//! through each fix alone (fdatasync, external journal, WAL) to the fixes combined, with the
//! paper's figures beside ours; and polled vs interrupt-driven I/O (its section 6.4) where the
//! device can poll.
//!
//! Polling: io_uring's IORING_SETUP_IOPOLL completes requests by polling the device's poll
//! queues; a device without them (loop devices, virtio-blk without poll queues) cannot do it.
//! The lab asks the device (/sys/block/DEV/queue/io_poll) and tries one polled O_DIRECT write;
//! where either says no, the report says "not supported by this device" and gives no number.
//!
//! The parts: `args` (the settings), `steps` (the paper's steps and figures), `polling` (can the
//! device poll), `render` (table, JSON, HTML), `guest` (the `--vm` route). This file runs the
//! steps on the host's loop devices.
mod args;
mod guest;
mod polling;
mod render;
mod steps;

use crate::LabError;
use crate::sqlite::measure::run_one;
use args::inserts_per_step;
use guest::run_steps_in_guest;
use polling::{PollingReport, block_devices_io_poll, polling_report};
use render::render;
use roamkv_testbed::fixture::{Fixture, interrupted};
use roamkv_testbed::prerequisite::require_root;
use std::process::ExitCode;
use steps::{StepResult, insert_spec, steps};

pub use args::StackArgs;
pub use guest::{GuestStackArgs, run_guest_stack};

pub fn run(args: &StackArgs) -> ExitCode {
    let result = if args.vm {
        run_steps_in_guest(args)
    } else {
        run_steps(args)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab stack: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_steps(args: &StackArgs) -> Result<ExitCode, LabError> {
    let inserts = inserts_per_step(args)?;
    require_root()?;
    let mut results = Vec::new();
    let mut polling = None;
    for step in steps() {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        eprintln!("roamkv lab stack: {} ({inserts} inserts)", step.name);
        let outcome = Fixture::create(step.fs, 512 << 20).and_then(|fx| {
            if polling.is_none() {
                polling = Some(polling_report(&fx));
            }
            run_one(
                &fx,
                &insert_spec(step.journal_mode, step.sync_call, inserts),
            )
        });
        results.push(match outcome {
            Ok(r) => StepResult {
                step,
                inserts_per_s: r.tx_per_sec,
                inserts_per_s_at_p50: r.tx_per_sec_at_p50,
                block_writes_per_insert: r.block_writes_per_tx,
                block_writes_per_insert_after_syncfs: r.block_writes_per_tx_after_syncfs,
                flushes_per_insert: r.flushes_per_tx,
                error: None,
            },
            Err(LabError::Interrupted) => return Err(LabError::Interrupted),
            Err(e) => StepResult {
                step,
                inserts_per_s: f64::NAN,
                inserts_per_s_at_p50: f64::NAN,
                block_writes_per_insert: f64::NAN,
                block_writes_per_insert_after_syncfs: f64::NAN,
                flushes_per_insert: f64::NAN,
                error: Some(e.to_string()),
            },
        });
    }
    let polling = polling.unwrap_or_else(|| PollingReport {
        device: "-".into(),
        queue_io_poll: None,
        iopoll_write: "not tried: no lab file system was made".into(),
        supported: false,
        devices: block_devices_io_poll(),
    });
    render(args, inserts, &results, &polling)?;
    Ok(if results.iter().any(|r| r.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
