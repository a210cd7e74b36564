//! `roamkv lab ...`: the command line of the I/O lab. Each subcommand's dispatch lives here; what
//! it prints and writes lives in the report modules (`report::fs_workloads`,
//! `report::trace_command`, `trace::render`).
use crate::LabError;
use crate::report::fs_workloads::{self, FsRun};
use crate::report::trace_command::{self, TraceOutputs, TraceRun};
use crate::trace::Tracer;
use crate::workload::{IoMode, Measurement, Plan, Workload, measure};
use roamkv_testbed::fixture::{Fixture, FsSpec, parse_fs_list};
use roamkv_testbed::prerequisite::require_root;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Kept at their old paths: the trace renderers now live in `trace::render`.
pub use crate::trace::{summary_rows, timeline_text, trace_svg};

#[derive(clap::Args, Debug)]
pub struct LabArgs {
    #[command(subcommand)]
    pub command: LabCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum LabCommand {
    /// File workloads of papers 001 and 004 on file systems made on loop devices.
    Fs(FsArgs),
    /// Run a command on a fresh file system and name every block request it causes.
    Trace(TraceArgs),
    /// SQLite transactions per journal mode and sync call on the lab's file systems, every block
    /// write traced and named (paper 004).
    Sqlite(crate::sqlite::SqliteArgs),
    /// SQLite search queries per file system, warm and cold cache (paper 000), and the same
    /// questions on sensor data asked of roamkv and SQLite; `--vm` runs them in the guest
    /// (FAT, exFAT, F2FS).
    Queries(crate::guest_queries::QueriesCommand),
    /// Paper 003's redo-log experiment: concurrent insert+commit sessions on PostgreSQL, SQLite
    /// and roamkv, log on a fast and on a slow (HDD-like) device.
    Commit(crate::commit::CommitArgs),
    /// Run a command under strace and write a portable trace of its file calls.
    Record(crate::replay::RecordArgs),
    /// Replay a recorded trace on lab file systems, block tracer on.
    Replay(crate::replay::ReplayArgs),
    /// Paper 004's I/O stack table: SQLite inserts/s from the stock stack through each fix.
    Stack(crate::stack::StackArgs),
    /// Internal: runs the queries lab inside the --vm guest.
    #[command(hide = true)]
    GuestQueries(crate::guest_queries::GuestQueriesArgs),
    /// Internal: runs inside the --vm guest.
    #[command(hide = true)]
    GuestFs(crate::vm::GuestFsArgs),
}

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

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// The file system to make (one name; see `roamkv lab fs --help` for the list).
    #[arg(long, value_name = "FS")]
    pub fs: String,
    /// Shell command run untraced first (cwd = the mounted file system).
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,
    /// Write the trace (requests + summary) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the time/LBA picture to this file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Directory for trace.json and trace.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-trace")]
    pub out: PathBuf,
    /// Print at most this many timeline lines (0 = none, the summary is always printed).
    #[arg(long, value_name = "N", default_value_t = 60)]
    pub lines: usize,
    /// Size of the loop-device image in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub size_mib: u64,
    /// The command performs this many operations: the summary is also given per operation.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub ops: u64,
    /// Also trace a final sync after the command, to include its delayed writeback.
    #[arg(long)]
    pub sync_after: bool,
    /// Also save the raw tracefs lines and the layout as JSON (replayable; used for test fixtures).
    #[arg(long, value_name = "FILE", hide = true)]
    pub capture: Option<PathBuf>,
    /// The command to trace (cwd = the mounted file system; $ROAMKV_LAB_MOUNT names it too).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(args: &LabArgs) -> ExitCode {
    let result = match &args.command {
        LabCommand::Fs(a) => run_fs(a),
        LabCommand::Trace(a) => run_trace(a),
        LabCommand::Sqlite(a) => return crate::sqlite::run(a),
        LabCommand::Queries(a) => return crate::guest_queries::run_queries(a),
        LabCommand::Commit(a) => return crate::commit::run(a),
        LabCommand::Record(a) => return crate::replay::run_record(a),
        LabCommand::Replay(a) => return crate::replay::run_replay(a),
        LabCommand::Stack(a) => return crate::stack::run(a),
        LabCommand::GuestQueries(a) => return crate::guest_queries::run_guest_queries(a),
        LabCommand::GuestFs(a) => crate::vm::run_guest_fs(a).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The words between the program name and "fs" in this process's command line ("lab" for
/// `roamkv lab fs`), so the guest can call the same binary the same way.
fn subcommand_prefix() -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let end = args.iter().position(|a| a == "fs").unwrap_or(0);
    args[..end].to_vec()
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
    let guest = crate::vm::run_guest(&subcommand_prefix(), &names, &options)?;
    let results = crate::vm::measurements(&guest);
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
    let (json_path, html_path) = fs_workloads::write(&run, &args.out)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(ExitCode::SUCCESS)
}

fn run_shell(command: &str, dir: &Path) -> Result<(), LabError> {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("ROAMKV_LAB_MOUNT", dir)
        .status()
        .map_err(|e| LabError::io("sh", e))?;
    if !status.success() {
        return Err(LabError::CommandFailed {
            command: command.to_string(),
            status: format!("{status}"),
            stderr: String::new(),
        });
    }
    Ok(())
}

pub fn run_trace(args: &TraceArgs) -> Result<ExitCode, LabError> {
    let spec: FsSpec = args.fs.parse()?;
    require_root()?;
    let Some(program) = args.command.first() else {
        return Err(LabError::Unsupported("no command given after --".into()));
    };
    let fixture = Fixture::create(spec, args.size_mib << 20)?;
    let mount = fixture.mount_dir().to_path_buf();
    eprintln!(
        "roamkv lab trace: {} on {} at {}",
        spec.name(),
        fixture.device().display(),
        mount.display()
    );
    eprintln!(
        "  mkfs: {}\n  mount options: {}",
        fixture.mkfs_command(),
        fixture.mount_options()
    );
    if let Some(setup) = &args.setup {
        run_shell(setup, &mount)?;
    }
    fixture.quiesce()?;
    let tracer = Tracer::start(&fixture)?;
    let status = std::process::Command::new(program)
        .args(&args.command[1..])
        .current_dir(&mount)
        .env("ROAMKV_LAB_MOUNT", &mount)
        .spawn()
        .and_then(|mut child| {
            roamkv_testbed::fixture::set_waited_child(child.id());
            let status = child.wait();
            roamkv_testbed::fixture::set_waited_child(0);
            status
        });
    if args.sync_after {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
    }
    let (trace, capture) = tracer.stop_with_capture(&fixture)?;
    if let Some(path) = &args.capture {
        let text = serde_json::to_string_pretty(&capture).map_err(|e| LabError::Parse {
            what: "capture".into(),
            detail: e.to_string(),
        })?;
        std::fs::write(path, text + "\n").map_err(|e| LabError::io(path, e))?;
    }
    let status = status.map_err(|e| LabError::io(program, e))?;
    let command_line = args.command.join(" ");
    let (json_path, html_path) = trace_command::write(
        &TraceRun {
            fixture: &fixture,
            fs_name: spec.name(),
            setup: args.setup.as_deref(),
            command_line: &command_line,
            command_status: status.code(),
            trace: &trace,
            ops: args.ops,
            lines: args.lines,
        },
        &TraceOutputs {
            out: &args.out,
            json: args.json.as_deref(),
            svg: args.svg.as_deref(),
        },
    )?;
    drop(fixture);
    eprintln!("wrote {} and {}", json_path.display(), html_path.display());
    if !status.success() {
        eprintln!(
            "roamkv lab trace: the traced command failed ({status}); the trace above is still complete"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        lab: LabArgs,
    }

    #[test]
    fn parses_trace_with_trailing_command() {
        let w = Wrapper::try_parse_from([
            "x",
            "trace",
            "--fs",
            "xfs",
            "--setup",
            "touch a",
            "--",
            "dd",
            "if=/dev/zero",
            "of=a",
            "--weird",
        ]);
        let w = w.expect("valid command line");
        match w.lab.command {
            LabCommand::Trace(t) => {
                assert_eq!(t.fs, "xfs");
                assert_eq!(t.setup.as_deref(), Some("touch a"));
                assert_eq!(t.command, vec!["dd", "if=/dev/zero", "of=a", "--weird"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn trace_needs_a_command() {
        assert!(Wrapper::try_parse_from(["x", "trace", "--fs", "ext4"]).is_err());
    }

    #[test]
    fn parses_fs_options() {
        let w =
            Wrapper::try_parse_from(["x", "fs", "--quick", "--fs", "ext4,xfs", "--out", "/tmp/o"])
                .expect("valid");
        match w.lab.command {
            LabCommand::Fs(f) => {
                assert!(f.quick);
                assert_eq!(f.fs.as_deref(), Some("ext4,xfs"));
                assert_eq!(f.out, PathBuf::from("/tmp/o"));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Wrapper::try_parse_from(["x", "fs", "--io", "mmap"]).is_err());
    }

    #[test]
    fn unknown_fs_in_fs_command_is_an_error_listing_names() {
        let args = FsArgs {
            quick: true,
            fs: Some("ext4,reiserfs".into()),
            out: PathBuf::from("/nonexistent"),
            repetitions: None,
            only: None,
            io: None,
            device: None,
            no_trace: true,
            vm: false,
            vm_memory_mib: 1024,
            i_mean_it: false,
        };
        let err = run_fs(&args)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("reiserfs") && err.contains("ext4-writeback"),
            "{err}"
        );
    }
}
