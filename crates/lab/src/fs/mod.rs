//! `roamkv lab fs`: the file workloads of papers 001 and 004 (`workload`) on file systems made on
//! loop devices, or in the qemu guest with `--vm` (`guest`: the guest's half and the host's
//! reading of it); what it reports (`report`).
pub mod guest;
pub mod report;
pub mod workload;

use crate::LabError;
use report::FsRun;
use roamkv_testbed::fixture::{Fixture, FsSpec, parse_fs_list};
use roamkv_testbed::prerequisite::require_root;
use std::path::PathBuf;
use std::process::ExitCode;
use workload::{IoMode, Measurement, Plan, Workload, measure};

#[derive(clap::Args, Debug)]
pub struct FsArgs {
    /// A few minutes: 4 and 64 KiB blocks, 10 MB file, fewer operations.
    #[arg(long)]
    pub quick: bool,
    /// Comma-separated file systems, or "all". Default: ext4,xfs,btrfs with --quick, else all.
    #[arg(long, value_name = "LIST")]
    pub fs: Option<String>,
    /// Directory for lab-fs.json and lab-fs.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-fs")]
    pub out: PathBuf,
    /// Repetitions per workload (median and min..max are reported).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Only run workloads whose name contains this text (e.g. "fsync", "rand-read", "direct").
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// Buffered or direct only (default both).
    #[arg(long, value_parser = ["buffered", "direct"])]
    pub io: Option<String>,
    /// Use this real, unmounted block device instead of a loop device (destroys its contents).
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
    /// Do not trace the extra repetition of the fsync workloads (no tracefs needed).
    #[arg(long)]
    pub no_trace: bool,
    /// Run in a qemu guest with Debian's stock kernel instead (for vfat, f2fs, nilfs2, exfat; ext4
    /// in the same guest is the control). --fs then names guest file systems (default: all).
    #[arg(long)]
    pub vm: bool,
    /// Guest memory for --vm.
    #[arg(long, default_value_t = 1024)]
    pub vm_memory_mib: u32,
    /// Confirms that --device may be overwritten.
    #[arg(long)]
    pub i_mean_it: bool,
}

fn run_fs_vm(args: &FsArgs) -> Result<ExitCode, LabError> {
    let names = crate::vm::parse_guest_fs_list(args.fs.as_deref().unwrap_or("all"))?;
    require_root()?;
    let options = crate::vm::GuestOptions {
        quick: args.quick,
        repetitions: args.repetitions,
        only: args.only.as_deref(),
        io: args.io.as_deref(),
        memory_mib: args.vm_memory_mib,
    };
    let guest = crate::vm::run_guest(&crate::vm::command_prefix("fs"), &names, &options)?;
    let results = guest::measurements(&guest);
    let fs_names: Vec<String> = guest
        .file_systems
        .iter()
        .map(|f| format!("{} (guest)", f.fs))
        .collect();
    let fixtures_json: Vec<serde_json::Value> = guest
        .file_systems
        .iter()
        .map(|f| serde_json::json!({"fs": format!("{} (guest)", f.fs), "device": "virtio /dev/vda (qemu TCG, cache=none)", "mkfs": f.mkfs, "mount_options": "defaults", "error": f.error, "guest_kernel": guest.kernel}))
        .collect();
    for f in &guest.file_systems {
        if let Some(e) = &f.error {
            eprintln!("guest: {}: {e}", f.fs);
        }
    }
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    plan.trace_sync = false; // no tracer in the guest
    if let Some(r) = args.repetitions {
        plan.repetitions = r.max(1);
    }
    let title = format!(
        "roamkv lab fs --vm (guest kernel {}, software emulation: compare guest rows with each other only)",
        guest.kernel
    );
    report_fs(
        args,
        FsRun {
            title: &title,
            stem: "lab-fs-vm",
            plan: &plan,
            fs_names: &fs_names,
            fixtures_json: &fixtures_json,
            results: &results,
        },
    )
}
/// The plan of a `lab fs` run: quick or full, with the command line's overrides.
fn fs_plan(args: &FsArgs) -> Plan {
    let mut plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    if let Some(r) = args.repetitions {
        plan.repetitions = r.max(1);
    }
    if args.no_trace || !crate::trace::tracefs_available() {
        plan.trace_sync = false;
    }
    if let Some(io) = &args.io {
        plan.io_modes = vec![if io == "direct" {
            IoMode::Direct
        } else {
            IoMode::Buffered
        }];
    }
    plan
}

pub fn run_fs(args: &FsArgs) -> Result<ExitCode, LabError> {
    if args.vm {
        return run_fs_vm(args);
    }
    let specs = parse_fs_list(args.fs.as_deref().unwrap_or(if args.quick {
        "ext4,xfs,btrfs"
    } else {
        "all"
    }))?;
    require_root()?;
    let plan = fs_plan(args);
    let workloads = chosen_workloads(args, &plan)?;
    let bar = indicatif::ProgressBar::new((specs.len() * workloads.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results: Vec<Measurement> = Vec::new();
    let mut fixtures_json = Vec::new();
    for spec in &specs {
        bar.set_message(format!("{}: mkfs", spec.name()));
        if bar.is_hidden() {
            // No terminal (e.g. output to a log): one line per file system instead of a bar.
            eprintln!(
                "roamkv lab fs: {} ({} workloads) at {}",
                spec.name(),
                workloads.len(),
                roamkv_testbed::report::now_utc()
            );
        }
        let fixture = match &args.device {
            Some(dev) => Fixture::create_on_device(*spec, dev, args.i_mean_it)?,
            None => Fixture::create(*spec, plan.image_bytes())?,
        };
        fixtures_json.push(fixture_json(*spec, &fixture, args.device.is_none()));
        for workload in &workloads {
            bar.set_message(format!("{}: {}", spec.name(), workload.name()));
            let m = measure(&fixture, workload, &plan)?;
            if let Some(e) = &m.error {
                bar.println(format!("{}: {}: {e}", spec.name(), workload.name()));
            }
            results.push(m);
            bar.inc(1);
        }
        drop(fixture);
    }
    bar.finish_and_clear();
    let fs_names: Vec<String> = specs.iter().map(|s| s.name().to_string()).collect();
    report_fs(
        args,
        FsRun {
            title: "roamkv lab fs",
            stem: "lab-fs",
            plan: &plan,
            fs_names: &fs_names,
            fixtures_json: &fixtures_json,
            results: &results,
        },
    )
}

/// The plan's workloads whose names contain `--only` (all without it); an error when none does.
fn chosen_workloads(args: &FsArgs, plan: &Plan) -> Result<Vec<Workload>, LabError> {
    let workloads: Vec<Workload> = plan
        .workloads()
        .into_iter()
        .filter(|w| {
            args.only
                .as_ref()
                .is_none_or(|o| w.name().contains(o.as_str()))
        })
        .collect();
    if workloads.is_empty() {
        return Err(LabError::Unsupported(format!(
            "no workload name contains {:?}",
            args.only.clone().unwrap_or_default()
        )));
    }
    Ok(workloads)
}

/// How a file system was made and mounted, for the report.
fn fixture_json(spec: FsSpec, fixture: &Fixture, loop_direct_io: bool) -> serde_json::Value {
    serde_json::json!({
        "fs": spec.name(), "device": fixture.device().display().to_string(),
        "journal_device": fixture.journal_device().map(|p| p.display().to_string()),
        "mkfs": fixture.mkfs_command(), "mount_options": fixture.mount_options(),
        "image_bytes": fixture.image_bytes(), "loop_direct_io": loop_direct_io,
    })
}

fn report_fs(args: &FsArgs, run: FsRun<'_>) -> Result<ExitCode, LabError> {
    let (json_path, html_path) = report::write(&run, &args.out)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(ExitCode::SUCCESS)
}
