//! `roamkv lab stack --vm`: the steps that need no second device, inside the qemu guest on F2FS
//! with ext4 as the control (paper 004 ends on F2FS); the guest's half (`lab guest-stack`), and
//! the host's run of it and its report (stack-vm.json, stack-vm.html). As `sqlite/guest.rs`
//! and `queries/guest.rs` are for their commands.
use super::args::{StackArgs, inserts_per_step};
use super::render::fmt;
use super::steps::{PAPER_F2FS_ALL, PAPER_STOCK, insert_spec};
use crate::LabError;
use crate::fs::workload::MountedDevice;
use crate::sqlite::config::{JournalMode, SyncCall};
use crate::sqlite::measure::run_on;
use crate::vm::{self, InitWords};
use roamkv_testbed::prerequisite::require_root;
use roamkv_testbed::report::{Html, MachineHeader, write_json};
use std::process::ExitCode;

/// The steps a guest disk can take: the stock stack and the fixes that need no second device.
/// (On F2FS, "WAL + fdatasync" is the paper's last row less polled I/O, which virtio-blk cannot
/// do either.)
const GUEST_STEPS: [(&str, JournalMode, SyncCall); 4] = [
    (
        "stock: TRUNCATE, fsync",
        JournalMode::Truncate,
        SyncCall::Fsync,
    ),
    ("+ fdatasync", JournalMode::Truncate, SyncCall::Fdatasync),
    ("+ WAL", JournalMode::Wal, SyncCall::Fsync),
    ("WAL + fdatasync", JournalMode::Wal, SyncCall::Fdatasync),
];

/// Guest file systems of `lab stack --vm` by default.
const GUEST_DEFAULT_FS: &str = "ext4,f2fs";

/// Inside the guest (hidden): `GUEST_STEPS` on one mounted file system.
#[derive(clap::Args, Debug)]
pub struct GuestStackArgs {
    #[arg(long)]
    pub inserts: usize,
    /// The words the guest's /init appends (see `vm::InitWords`).
    #[arg(last = true)]
    pub init_words: Vec<String>,
}

/// One step in the guest, as it comes back to the host.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GuestStep {
    pub fs: String,
    pub step: String,
    pub journal_mode: String,
    pub sync_call: String,
    pub inserts_per_s: f64,
    pub inserts_per_s_at_p50: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_p99_9: f64,
    pub block_writes_per_insert: f64,
    pub block_writes_per_insert_after_syncfs: f64,
    pub flushes_per_insert: f64,
}

pub fn run_guest_stack(args: &GuestStackArgs) -> ExitCode {
    let outcome = InitWords::parse(&args.init_words).and_then(|init| {
        let mut steps = Vec::new();
        for (name, journal_mode, sync_call) in GUEST_STEPS {
            eprintln!("guest: {} {name} ({} inserts)", init.fs_name, args.inserts);
            let r = run_on(
                &MountedDevice::from(&init),
                &insert_spec(journal_mode, sync_call, args.inserts),
            )?;
            steps.push(GuestStep {
                fs: init.fs_name.clone(),
                step: name.to_string(),
                journal_mode: journal_mode.name().to_string(),
                sync_call: sync_call.name().to_string(),
                inserts_per_s: r.tx_per_sec,
                inserts_per_s_at_p50: r.tx_per_sec_at_p50,
                latency_us_p50: r.latency_us.p50,
                latency_us_p99: r.latency_us.p99,
                latency_us_p99_9: r.latency_us.p99_9,
                block_writes_per_insert: r.block_writes_per_tx,
                block_writes_per_insert_after_syncfs: r.block_writes_per_tx_after_syncfs,
                flushes_per_insert: r.flushes_per_tx,
            });
        }
        init.write_results(&steps)
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("guest-stack: error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(super) fn run_steps_in_guest(args: &StackArgs) -> Result<ExitCode, LabError> {
    let inserts = inserts_per_step(args)?;
    let names = vm::parse_guest_fs_list(args.fs.as_deref().unwrap_or(GUEST_DEFAULT_FS))?;
    require_root()?;
    let mut prefix = vm::command_prefix("stack");
    prefix.extend([
        "guest-stack".to_string(),
        "--inserts".into(),
        inserts.to_string(),
        "--".into(),
    ]);
    let guest = vm::run_guest(&prefix, &names, &vm::plain_options(args.vm_memory_mib))?;
    let mut steps: Vec<GuestStep> = Vec::new();
    let mut errors = Vec::new();
    for fs in &guest.file_systems {
        if let Some(e) = &fs.error {
            errors.push(format!("{}: {e}", fs.fs));
        }
        for m in &fs.measurements {
            match serde_json::from_value::<GuestStep>(m.clone()) {
                Ok(step) => steps.push(step),
                Err(e) => errors.push(format!("{}: unreadable step ({e}): {m}", fs.fs)),
            }
        }
    }
    render_guest(args, inserts, &guest.kernel, &steps, &errors)?;
    Ok(
        if errors.is_empty() && steps.len() == names.len() * GUEST_STEPS.len() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

/// The columns of the guest's table, one `guest_row` each.
const GUEST_COLUMNS: [&str; 11] = [
    "fs",
    "step",
    "inserts/s",
    "at p50",
    "x guest ext4 stock",
    "paper inserts/s",
    "paper x stock",
    "p99 us",
    "p99.9 us",
    "writes/insert",
    "incl. writeback",
];

/// Paper 004's figure for a guest step, where it gives one: ext4's stock stack and fdatasync,
/// and F2FS with every fix.
fn paper_figure(fs: &str, step: &str) -> Option<f64> {
    match (fs, step) {
        ("ext4", "stock: TRUNCATE, fsync") => Some(PAPER_STOCK),
        ("ext4", "+ fdatasync") => Some(PAPER_STOCK * 1.17),
        ("f2fs", "WAL + fdatasync") => Some(PAPER_F2FS_ALL),
        _ => None,
    }
}

fn guest_row(step: &GuestStep, stock: f64) -> Vec<String> {
    let paper = paper_figure(&step.fs, &step.step);
    vec![
        format!("{} (guest)", step.fs),
        step.step.clone(),
        fmt(step.inserts_per_s),
        fmt(step.inserts_per_s_at_p50),
        format!("{:.2}", step.inserts_per_s / stock),
        paper.map_or("-".into(), fmt),
        paper.map_or("-".into(), |p| format!("{:.2}", p / PAPER_STOCK)),
        fmt(step.latency_us_p99),
        fmt(step.latency_us_p99_9),
        fmt(step.block_writes_per_insert),
        fmt(step.block_writes_per_insert_after_syncfs),
    ]
}

fn render_guest(
    args: &StackArgs,
    inserts: usize,
    kernel: &str,
    steps: &[GuestStep],
    errors: &[String],
) -> Result<(), LabError> {
    // The guest's ext4 stock stack is the baseline, as the paper's stock stack is its own.
    let stock = steps
        .iter()
        .find(|s| s.fs == "ext4" && s.step == GUEST_STEPS[0].0)
        .map_or(f64::NAN, |s| s.inserts_per_s);
    let rows: Vec<Vec<String>> = steps.iter().map(|s| guest_row(s, stock)).collect();
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&GUEST_COLUMNS, &rows)
    );
    for e in errors {
        eprintln!("guest: {e}");
    }
    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "guest_kernel": kernel, "inserts_per_step": inserts,
        "record_bytes": 100, "steps": steps, "paper_f2fs_all_inserts_per_s": PAPER_F2FS_ALL,
        "counted_by": "the guest's /sys/block/vda/stat (untraced)", "errors": errors,
    });
    let json_path = write_json(&args.out, "stack-vm", &json)?;
    let mut html = Html::new(
        &format!(
            "roamkv lab stack --vm (guest kernel {kernel}, software emulation: compare guest rows with each other only)"
        ),
        &header,
    );
    html.paragraph(&format!(
        "{inserts} single-row SQLite inserts (100 B, synchronous FULL) per step inside a qemu          guest (one virtio disk, cache=none), each step on the same freshly made file system;          'x guest ext4 stock' is relative to the guest's own ext4 stock stack. Block writes are          the virtual disk's own counters. Errors: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("; ")
        }
    ));
    html.table(&GUEST_COLUMNS, &rows);
    let html_path = args.out.join("stack-vm.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_steps_and_the_paper_figures_line_up() {
        assert_eq!(paper_figure("ext4", GUEST_STEPS[0].0), Some(PAPER_STOCK));
        assert_eq!(paper_figure("f2fs", GUEST_STEPS[3].0), Some(PAPER_F2FS_ALL));
        assert_eq!(paper_figure("vfat", GUEST_STEPS[3].0), None);
        let step = GuestStep {
            fs: "f2fs".into(),
            step: GUEST_STEPS[3].0.into(),
            journal_mode: "wal".into(),
            sync_call: "fdatasync".into(),
            inserts_per_s: 80.0,
            inserts_per_s_at_p50: 90.0,
            latency_us_p50: 1.0,
            latency_us_p99: 2.0,
            latency_us_p99_9: 3.0,
            block_writes_per_insert: 2.0,
            block_writes_per_insert_after_syncfs: 2.5,
            flushes_per_insert: 1.0,
        };
        let row = guest_row(&step, 20.0);
        assert_eq!(row[4], "4.00");
        assert_eq!(row[5], "157.0");
    }
}
