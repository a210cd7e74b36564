//! `roamkv lab ...`: the command line of the I/O lab.
use crate::LabError;
use crate::fixture::{Fixture, FsSpec, parse_fs_list, require_root};
use crate::report::{Html, MachineHeader, bar_chart_svg, scatter_chart_svg, write_json};
use crate::trace::{Kind, Trace, Tracer};
use crate::workload::{IoMode, Measurement, Plan, Workload, measure};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    /// SQLite on the lab's file systems (issue 5).
    Sqlite(crate::sqlite::SqliteArgs),
    /// Queries lab (issue 5).
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

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "-".to_string()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
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
    write_fs_report(
        args,
        &title,
        "lab-fs-vm",
        &plan,
        &fs_names,
        &fixtures_json,
        &results,
    )
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
                crate::report::now_utc()
            );
        }
        let fixture = match &args.device {
            Some(dev) => Fixture::create_on_device(*spec, dev, args.i_mean_it)?,
            None => Fixture::create(*spec, plan.image_bytes())?,
        };
        fixtures_json.push(serde_json::json!({
            "fs": spec.name(), "device": fixture.device().display().to_string(),
            "journal_device": fixture.journal_device().map(|p| p.display().to_string()),
            "mkfs": fixture.mkfs_command(), "mount_options": fixture.mount_options(),
            "image_bytes": fixture.image_bytes(), "loop_direct_io": args.device.is_none(),
        }));
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
    write_fs_report(
        args,
        "roamkv lab fs",
        "lab-fs",
        &plan,
        &fs_names,
        &fixtures_json,
        &results,
    )
}

fn write_fs_report(
    args: &FsArgs,
    title: &str,
    stem: &str,
    plan: &Plan,
    fs_names: &[String],
    fixtures_json: &[serde_json::Value],
    results: &[Measurement],
) -> Result<ExitCode, LabError> {
    let header = MachineHeader::collect();

    let columns = [
        "fs",
        "workload",
        "ops/s",
        "ops/s min..max",
        "MB/s",
        "dev writes/op",
        "dev KiB written/op",
        "flushes/op",
        "traced writes/op data+journal+meta",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|m| {
            vec![
                m.fs.clone(),
                m.workload.clone(),
                fmt_num(m.ops_per_s_median),
                match &m.error {
                    Some(_) => "error".to_string(),
                    None => format!("{}..{}", fmt_num(m.ops_per_s_min), fmt_num(m.ops_per_s_max)),
                },
                fmt_num(m.mb_per_s_median),
                fmt_num(m.device_writes_per_op),
                fmt_num(m.device_bytes_written_per_op / 1024.0),
                fmt_num(m.device_flushes_per_op),
                m.traced_per_op.map_or(String::new(), |t| {
                    format!(
                        "{}+{}+{} ({} flushes)",
                        fmt_num(t.data_writes),
                        fmt_num(t.journal_writes),
                        fmt_num(t.metadata_writes),
                        fmt_num(t.flushes)
                    )
                }),
            ]
        })
        .collect();
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(columns.to_vec());
    for row in &rows {
        table.add_row(row.clone());
    }
    println!("{table}");

    let json = serde_json::json!({
        "machine": header, "plan": plan, "fixtures": fixtures_json, "results": results,
    });
    let json_path = write_json(&args.out, stem, &json)?;
    let mut html = Html::new(title, &header);
    html.paragraph(&format!(
        "Plan: {} repetitions, ops per repetition capped at {}, {} ops for the fsync workloads. \
         Reads drop the page cache first; paper-001 writes end with one fsync inside the timed region.",
        plan.repetitions, plan.ops_max, plan.sync_ops
    ));
    html.heading("File systems");
    let fixture_rows: Vec<Vec<String>> = fixtures_json
        .iter()
        .map(|f| {
            ["fs", "device", "mkfs", "mount_options"]
                .iter()
                .map(|k| f.get(*k).and_then(|v| v.as_str()).unwrap_or("").to_string())
                .collect()
        })
        .collect();
    html.table(&["fs", "device", "mkfs", "mount options"], &fixture_rows);
    // One chart per workload family: MB/s by file system, one bar per variant.
    let fs_names = fs_names.to_vec();
    let mut families: Vec<String> = Vec::new();
    for m in results {
        let family = family_of(&m.workload);
        if !families.contains(&family) {
            families.push(family);
        }
    }
    for family in &families {
        let mut variants: Vec<String> = Vec::new();
        for m in results.iter().filter(|m| &family_of(&m.workload) == family) {
            if !variants.contains(&m.workload) {
                variants.push(m.workload.clone());
            }
        }
        let is_sync = family.starts_with("4KiB+");
        // One bar per (variant, file system): the value `pick` reads off that measurement.
        let series_by = |pick: &dyn Fn(&Measurement) -> f64| -> Vec<(String, Vec<f64>)> {
            variants
                .iter()
                .map(|v| {
                    let values = fs_names
                        .iter()
                        .map(|fs| {
                            results
                                .iter()
                                .find(|m| &m.fs == fs && &m.workload == v)
                                .map_or(f64::NAN, pick)
                        })
                        .collect();
                    (v.clone(), values)
                })
                .collect()
        };
        let series = series_by(&|m| {
            if is_sync {
                m.ops_per_s_median
            } else {
                m.mb_per_s_median
            }
        });
        html.heading(family);
        html.svg(&bar_chart_svg(
            family,
            if is_sync {
                "ops/s (median)"
            } else {
                "MB/s (median)"
            },
            &fs_names,
            &series,
        ));
        if is_sync {
            let writes = series_by(&|m| m.device_writes_per_op);
            html.svg(&bar_chart_svg(
                &format!("{family}: block writes per operation"),
                "device writes / op",
                &fs_names,
                &writes,
            ));
        }
    }
    // Paper 004 §5: what one write+sync costs, by request kind, from the traced repetition.
    let traced: Vec<&Measurement> = results
        .iter()
        .filter(|m| m.traced_per_op.is_some())
        .collect();
    if !traced.is_empty() {
        html.heading("Block requests per 4 KiB write + sync (traced)");
        html.paragraph(
            "One extra, untimed repetition of each sync workload runs under `roamkv lab trace`'s tracer; every request \
             is named by LBA (file data, file-system journal/log, other metadata). The device counters in the table \
             below count one more write per flush on this kernel: the empty write bio that carries a preflush.",
        );
        let mut variants: Vec<String> = Vec::new();
        for m in &traced {
            if !variants.contains(&m.workload) {
                variants.push(m.workload.clone());
            }
        }
        for v in variants.iter().filter(|v| {
            v.ends_with("buffered") || !variants.iter().any(|b| b.ends_with("buffered"))
        }) {
            let pick = |fs: &str, f: &dyn Fn(&crate::workload::TracedPerOp) -> f64| {
                traced
                    .iter()
                    .find(|m| m.fs == fs && &m.workload == v)
                    .and_then(|m| m.traced_per_op.as_ref().map(f))
                    .unwrap_or(f64::NAN)
            };
            let series: Vec<(String, Vec<f64>)> = vec![
                (
                    "data".to_string(),
                    fs_names
                        .iter()
                        .map(|f| pick(f, &|t| t.data_writes))
                        .collect(),
                ),
                (
                    "fs journal".to_string(),
                    fs_names
                        .iter()
                        .map(|f| pick(f, &|t| t.journal_writes))
                        .collect(),
                ),
                (
                    "metadata".to_string(),
                    fs_names
                        .iter()
                        .map(|f| pick(f, &|t| t.metadata_writes))
                        .collect(),
                ),
                (
                    "flushes".to_string(),
                    fs_names.iter().map(|f| pick(f, &|t| t.flushes)).collect(),
                ),
            ];
            html.svg(&bar_chart_svg(
                &format!("{v}: requests per operation"),
                "requests / op",
                &fs_names,
                &series,
            ));
        }
    }
    html.heading("All results");
    html.table(&columns, &rows);
    let html_path = args.out.join(format!("{stem}.html"));
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(ExitCode::SUCCESS)
}

/// Groups workload names for charts: "seq-read 4KiB 10MB buffered" -> "seq-read 10MB buffered";
/// "4KiB+fsync seq overwrite direct" -> "4KiB+sync direct".
fn family_of(workload: &str) -> String {
    let words: Vec<&str> = workload.split_whitespace().collect();
    if workload.starts_with("4KiB+") {
        format!("4KiB+sync {}", words.last().unwrap_or(&""))
    } else {
        words
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, w)| *w)
            .collect::<Vec<_>>()
            .join(" ")
    }
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
            crate::fixture::set_waited_child(child.id());
            let status = child.wait();
            crate::fixture::set_waited_child(0);
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
    print_trace(&trace, args.lines);
    let ops = args.ops.max(1);
    let k = &trace.summary.by_kind;
    let per_op = serde_json::json!({
        "ops": ops,
        "data_writes": k.data.writes as f64 / ops as f64, "data_bytes": k.data.bytes as f64 / ops as f64,
        "fs_journal_writes": k.fs_journal.writes as f64 / ops as f64, "fs_journal_bytes": k.fs_journal.bytes as f64 / ops as f64,
        "metadata_writes": k.metadata.writes as f64 / ops as f64, "metadata_bytes": k.metadata.bytes as f64 / ops as f64,
        "flushes": trace.summary.flushes as f64 / ops as f64,
    });
    if ops > 1 {
        println!(
            "per operation ({ops}): data {:.2} writes, fs journal {:.2}, metadata {:.2}, flushes {:.2}",
            k.data.writes as f64 / ops as f64,
            k.fs_journal.writes as f64 / ops as f64,
            k.metadata.writes as f64 / ops as f64,
            trace.summary.flushes as f64 / ops as f64
        );
    }

    let header = MachineHeader::collect();
    let command_line = args.command.join(" ");
    let json = serde_json::json!({
        "machine": header, "fs": spec.name(), "device": fixture.device().display().to_string(),
        "mkfs": fixture.mkfs_command(), "mount_options": fixture.mount_options(),
        "setup": args.setup, "command": command_line, "command_status": status.code(),
        "requests": trace.requests, "summary": trace.summary, "per_op": per_op,
    });
    let json_path = write_json(&args.out, "trace", &json)?;
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&json).map_err(|e| LabError::Parse {
            what: "json".into(),
            detail: e.to_string(),
        })?;
        std::fs::write(path, text + "\n").map_err(|e| LabError::io(path, e))?;
    }
    let svg = trace_svg(&trace, &format!("{} on {}", command_line, spec.name()));
    if let Some(path) = &args.svg {
        std::fs::write(path, &svg).map_err(|e| LabError::io(path, e))?;
    }
    let mut html = Html::new(&format!("roamkv lab trace: {command_line}"), &header);
    html.table(
        &["", ""],
        &[
            vec!["file system".into(), spec.name().into()],
            vec!["mkfs".into(), fixture.mkfs_command().into()],
            vec!["mount options".into(), fixture.mount_options().into()],
            vec![
                "setup (untraced)".into(),
                args.setup.clone().unwrap_or_default(),
            ],
            vec!["command".into(), command_line.clone()],
        ],
    );
    html.svg(&svg);
    html.heading("Summary");
    html.table(&["kind", "writes", "bytes"], &summary_rows(&trace));
    html.heading("Timeline");
    html.preformatted(&timeline_text(&trace, HTML_TIMELINE_LINES_MAX));
    let html_path = args.out.join("trace.html");
    html.write(&html_path)?;
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

pub fn summary_rows(trace: &Trace) -> Vec<Vec<String>> {
    let s = &trace.summary;
    let mut rows = vec![
        vec![
            "data".to_string(),
            s.by_kind.data.writes.to_string(),
            s.by_kind.data.bytes.to_string(),
        ],
        vec![
            "fs_journal".to_string(),
            s.by_kind.fs_journal.writes.to_string(),
            s.by_kind.fs_journal.bytes.to_string(),
        ],
        vec![
            "metadata".to_string(),
            s.by_kind.metadata.writes.to_string(),
            s.by_kind.metadata.bytes.to_string(),
        ],
        vec![
            "flushes".to_string(),
            s.flushes.to_string(),
            "-".to_string(),
        ],
        vec![
            "reads".to_string(),
            s.reads.writes.to_string(),
            s.reads.bytes.to_string(),
        ],
    ];
    for (file, count) in &s.by_file {
        rows.push(vec![
            format!("  data: {file}"),
            count.writes.to_string(),
            count.bytes.to_string(),
        ]);
    }
    rows
}

pub fn timeline_text(trace: &Trace, max_lines: usize) -> String {
    let mut out = format!(
        "{:>10} {:>7} {:<5} {:>12} {:>8} {:<10} {:<16} {}\n",
        "time_us", "device", "rwbs", "lba", "bytes", "kind", "task", "file"
    );
    for r in trace.requests.iter().take(max_lines) {
        out.push_str(&format!(
            "{:>10} {:>7} {:<5} {:>12} {:>8} {:<10} {:<16} {}\n",
            r.time_us,
            r.device,
            r.rwbs,
            r.lba,
            r.bytes,
            r.kind.label(),
            r.comm,
            r.file.as_deref().unwrap_or("")
        ));
    }
    if trace.requests.len() > max_lines {
        out.push_str(&format!(
            "... {} more requests\n",
            trace.requests.len() - max_lines
        ));
    }
    out
}

fn print_trace(trace: &Trace, lines: usize) {
    if lines > 0 {
        print!("{}", timeline_text(trace, lines));
    }
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(vec!["kind", "writes", "bytes"]);
    for row in summary_rows(trace) {
        table.add_row(row);
    }
    println!("{table}");
    println!(
        "{} requests in {:.3} s",
        trace.requests.len(),
        trace.summary.duration_us as f64 / 1e6
    );
}

const SVG_POINTS_PER_KIND_MAX: usize = 20_000;
/// The HTML page lists at most this many requests; the JSON always has all of them.
const HTML_TIMELINE_LINES_MAX: usize = 5_000;

/// Paper 004 Fig. 3/4 style: time on x, LBA on y, one colour per request kind.
pub fn trace_svg(trace: &Trace, title: &str) -> String {
    let kinds = [
        Kind::Data,
        Kind::FsJournal,
        Kind::Metadata,
        Kind::Flush,
        Kind::Read,
    ];
    let series: Vec<(String, Vec<(f64, f64)>)> = kinds
        .iter()
        .map(|k| {
            let of_kind: Vec<&crate::trace::Request> =
                trace.requests.iter().filter(|r| r.kind == *k).collect();
            // Keep the picture a reasonable size for long traces: every n-th request of a kind.
            let step = of_kind.len().div_ceil(SVG_POINTS_PER_KIND_MAX).max(1);
            let points = of_kind
                .iter()
                .step_by(step)
                .map(|r| (r.time_us as f64 / 1000.0, r.lba as f64))
                .collect();
            let label = if step > 1 {
                format!("{} (every {step}th)", k.label())
            } else {
                k.label().to_string()
            };
            (label, points)
        })
        .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    scatter_chart_svg(title, "time (ms)", "LBA (512-byte sector)", &series)
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

    #[test]
    fn families_group_block_sizes() {
        assert_eq!(
            family_of("seq-read 4KiB 10MB buffered"),
            "seq-read 10MB buffered"
        );
        assert_eq!(
            family_of("4KiB+fsync seq overwrite direct"),
            "4KiB+sync direct"
        );
    }
}
