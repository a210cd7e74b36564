//! `roamkv lab trace`: run a command on a fresh file system with the block tracer on, and report
//! every request it caused: the timeline and summary on the terminal, the per-operation figures,
//! and trace.json / trace.html (plus the optional --json and --svg copies).

use crate::LabError;
use crate::trace::{Trace, Tracer, print_trace, summary_rows, timeline_text, trace_svg};
use roamkv_testbed::fixture::{Fixture, FsSpec};
use roamkv_testbed::prerequisite::require_root;
use roamkv_testbed::report::{Html, MachineHeader, write_json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    let (json_path, html_path) = write(
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

/// The HTML page lists at most this many requests; the JSON always has all of them.
const HTML_TIMELINE_LINES_MAX: usize = 5_000;

/// One traced command, for its report.
pub struct TraceRun<'a> {
    pub fixture: &'a Fixture,
    pub fs_name: &'a str,
    /// The untraced setup command, if any.
    pub setup: Option<&'a str>,
    pub command_line: &'a str,
    pub command_status: Option<i32>,
    pub trace: &'a Trace,
    /// Operations the command performed (figures are also given per operation).
    pub ops: u64,
    /// Timeline lines to print (0 = none).
    pub lines: usize,
}

/// Where the files go: `out` gets trace.json and trace.html; `json` and `svg` are extra copies.
pub struct TraceOutputs<'a> {
    pub out: &'a Path,
    pub json: Option<&'a Path>,
    pub svg: Option<&'a Path>,
}

/// Prints the trace and writes its files; returns the paths of trace.json and trace.html.
pub fn write(run: &TraceRun<'_>, to: &TraceOutputs<'_>) -> Result<(PathBuf, PathBuf), LabError> {
    let trace = run.trace;
    print_trace(trace, run.lines);
    let per_op = per_operation(trace, run.ops);
    let header = MachineHeader::collect();
    let fixture = run.fixture;
    let json = serde_json::json!({
        "machine": header, "fs": run.fs_name, "device": fixture.device().display().to_string(),
        "mkfs": fixture.mkfs_command(), "mount_options": fixture.mount_options(),
        "setup": run.setup, "command": run.command_line, "command_status": run.command_status,
        "requests": trace.requests, "summary": trace.summary, "per_op": per_op,
    });
    let json_path = write_json(to.out, "trace", &json)?;
    if let Some(path) = to.json {
        let text = serde_json::to_string_pretty(&json).map_err(|e| LabError::Parse {
            what: "json".into(),
            detail: e.to_string(),
        })?;
        std::fs::write(path, text + "\n").map_err(|e| LabError::io(path, e))?;
    }
    let svg = trace_svg(trace, &format!("{} on {}", run.command_line, run.fs_name));
    if let Some(path) = to.svg {
        std::fs::write(path, &svg).map_err(|e| LabError::io(path, e))?;
    }
    let mut html = Html::new(&format!("roamkv lab trace: {}", run.command_line), &header);
    html.table(
        &["", ""],
        &[
            vec!["file system".into(), run.fs_name.into()],
            vec!["mkfs".into(), fixture.mkfs_command().into()],
            vec!["mount options".into(), fixture.mount_options().into()],
            vec![
                "setup (untraced)".into(),
                run.setup.unwrap_or_default().to_string(),
            ],
            vec!["command".into(), run.command_line.to_string()],
        ],
    );
    html.svg(&svg);
    html.heading("Summary");
    html.table(&["kind", "writes", "bytes"], &summary_rows(trace));
    html.heading("Timeline");
    html.preformatted(&timeline_text(trace, HTML_TIMELINE_LINES_MAX));
    let html_path = to.out.join("trace.html");
    html.write(&html_path)?;
    Ok((json_path, html_path))
}

/// Writes, bytes and flushes per operation (as JSON), printed when there is more than one.
fn per_operation(trace: &Trace, ops: u64) -> serde_json::Value {
    let ops = ops.max(1);
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
    per_op
}
