//! `roamkv lab record` and `roamkv lab replay`: paper 004's Mobigen. Record an application's file
//! calls with strace into a portable trace (`format`), replay the trace on each lab file system
//! with the block tracer on, and report time, per-call latency percentiles and the block writes
//! by kind (data, file-system journal, metadata).
pub mod format;
pub mod player;
pub mod strace;

use crate::LabError;
use format::{FORMAT_NAME, FORMAT_VERSION, Header, SyscallTrace};
use player::{ReplayResult, Timing};
use roamkv_testbed::fixture::{Fixture, parse_fs_list, set_waited_child};
use roamkv_testbed::prerequisite::{require_root, require_tool};
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, write_json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// Where to write the trace (JSON Lines; the format is in docs/LAB.md).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "out/lab-record/trace.jsonl"
    )]
    pub out: PathBuf,
    /// The directory the command runs in; only calls on files under it are recorded.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The command to record.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// A trace written by `roamkv lab record`.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// Comma-separated lab file systems to replay on (loop devices, block tracer on), or "all".
    #[arg(long, value_name = "LIST", conflicts_with = "dir")]
    pub fs: Option<String>,
    /// Replay in this existing directory instead (no loop device, no tracer, no root needed).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// asap: each call right after the previous one; recorded: keep the recorded start times.
    #[arg(long, value_parser = ["asap", "recorded"], default_value = "asap")]
    pub timing: String,
    /// Directory for replay.json and replay.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-replay")]
    pub out: PathBuf,
    /// Size of each loop-device image in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub size_mib: u64,
}

pub fn run_record(args: &RecordArgs) -> ExitCode {
    report_exit("record", record(args))
}

pub fn run_replay(args: &ReplayArgs) -> ExitCode {
    report_exit("replay", replay(args))
}

fn report_exit(what: &str, result: Result<ExitCode, LabError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab {what}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command under strace and writes the portable trace.
pub fn record(args: &RecordArgs) -> Result<ExitCode, LabError> {
    let strace_bin = require_tool("strace", "strace")?;
    let Some(program) = args.command.first() else {
        return Err(LabError::Unsupported("no command given after --".into()));
    };
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().map_err(|e| LabError::io(".", e))?,
    };
    let root = dir.canonicalize().map_err(|e| LabError::io(&dir, e))?;
    let scratch = tempfile::Builder::new()
        .prefix("roamkv-lab-record-")
        .tempdir()
        .map_err(|e| LabError::io("temp dir", e))?;
    let raw_path = scratch.path().join("strace.txt");
    let mut command = std::process::Command::new(&strace_bin);
    command
        .args(["-f", "-ttt", "-T", "-y", "-s", "0", "-qq", "-o"])
        .arg(&raw_path)
        .args(["-e", &format!("trace={}", strace::TRACED_SYSCALLS), "--"])
        .args(&args.command)
        .current_dir(&root);
    eprintln!(
        "roamkv lab record: {} (in {})",
        args.command.join(" "),
        root.display()
    );
    let mut child = command.spawn().map_err(|e| LabError::io(&strace_bin, e))?;
    set_waited_child(child.id());
    let status = child.wait();
    set_waited_child(0);
    let status = status.map_err(|e| LabError::io(program, e))?;
    let text = std::fs::read_to_string(&raw_path).map_err(|e| LabError::io(&raw_path, e))?;
    let (calls, skipped) = strace::calls_from_strace(&text, &root.to_string_lossy());
    let trace = SyscallTrace {
        header: Header {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            command: args.command.join(" "),
            root: root.to_string_lossy().into_owned(),
            recorded_at: roamkv_testbed::report::now_utc(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            calls: calls.len() as u64,
            final_files: player::file_sizes(&root)?,
        },
        calls,
    };
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| LabError::io(parent, e))?;
    }
    trace.write_to(&args.out)?;
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for c in &trace.calls {
        *counts.entry(c.op.name()).or_default() += 1;
    }
    println!(
        "recorded {} file calls under {} ({} strace lines were not file calls under it): {}",
        trace.calls.len(),
        root.display(),
        skipped,
        counts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("wrote {}", args.out.display());
    if !status.success() {
        eprintln!("roamkv lab record: the command failed ({status}); the trace holds what it did");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One file system's replay, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FsReplay {
    pub fs: String,
    pub mkfs: String,
    pub mount_options: String,
    pub result: Option<ReplayResult>,
    /// Block requests by kind (the tracer's summary), including the final syncfs.
    pub block: Option<serde_json::Value>,
    pub error: Option<String>,
}

pub fn replay(args: &ReplayArgs) -> Result<ExitCode, LabError> {
    let trace = SyscallTrace::read_from(&args.trace)?;
    let timing = if args.timing == "recorded" {
        Timing::Recorded
    } else {
        Timing::Asap
    };
    let mut replays = Vec::new();
    if let Some(dir) = &args.dir {
        let result = player::play(&trace, dir, timing)?;
        replays.push(FsReplay {
            fs: format!("directory {}", dir.display()),
            mkfs: String::new(),
            mount_options: String::new(),
            result: Some(result),
            block: None,
            error: None,
        });
    } else {
        let specs = parse_fs_list(args.fs.as_deref().unwrap_or("ext4,xfs,btrfs"))?;
        require_root()?;
        for spec in specs {
            eprintln!(
                "roamkv lab replay: {} calls on {}",
                trace.calls.len(),
                spec.name()
            );
            let fixture = Fixture::create(spec, args.size_mib << 20)?;
            let outcome = replay_on(&fixture, &trace, timing);
            let (result, block, error) = match outcome {
                Ok((r, b)) => (Some(r), Some(b), None),
                Err(LabError::Interrupted) => return Err(LabError::Interrupted),
                Err(e) => (None, None, Some(e.to_string())),
            };
            replays.push(FsReplay {
                fs: spec.name().to_string(),
                mkfs: fixture.mkfs_command().to_string(),
                mount_options: fixture.mount_options().to_string(),
                result,
                block,
                error,
            });
        }
    }
    print_replays(&trace, &replays);
    let (json, html) = write_replay_report(&args.out, &args.trace, &trace, &replays)?;
    println!("wrote {} and {}", json.display(), html.display());
    let clean = replays.iter().all(|r| {
        r.error.is_none()
            && r.result
                .as_ref()
                .is_some_and(|x| x.failed_calls == 0 && x.size_mismatches.is_empty())
    });
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Replays on a fresh file system with the block tracer on (when tracefs is there).
fn replay_on(
    fixture: &Fixture,
    trace: &SyscallTrace,
    timing: Timing,
) -> Result<(ReplayResult, serde_json::Value), LabError> {
    fixture.quiesce()?;
    let tracer = if crate::trace::tracefs_available() {
        Some(crate::trace::Tracer::start(fixture)?)
    } else {
        None
    };
    let result = player::play(trace, fixture.mount_dir(), timing)?;
    // Delayed writeback counts: what the replay left dirty is written inside the trace window.
    sync_fs(fixture.mount_dir())?;
    let block = match tracer {
        Some(t) => {
            let traced = t.stop(fixture)?;
            let s = &traced.summary;
            serde_json::json!({
                "data_writes": s.by_kind.data.writes, "data_bytes": s.by_kind.data.bytes,
                "fs_journal_writes": s.by_kind.fs_journal.writes, "fs_journal_bytes": s.by_kind.fs_journal.bytes,
                "metadata_writes": s.by_kind.metadata.writes, "metadata_bytes": s.by_kind.metadata.bytes,
                "flushes": s.flushes, "reads": s.reads.writes,
            })
        }
        None => serde_json::json!({"error": "tracefs unavailable: no block trace"}),
    };
    Ok((result, block))
}

fn sync_fs(dir: &Path) -> Result<(), LabError> {
    use std::os::fd::AsRawFd;
    let handle = std::fs::File::open(dir).map_err(|e| LabError::io(dir, e))?;
    // SAFETY: the fd is open for the duration of the call.
    if unsafe { libc::syncfs(handle.as_raw_fd()) } != 0 {
        return Err(LabError::io(dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

const SUMMARY_OPS: [&str; 5] = ["pwrite", "write", "fdatasync", "fsync", "pread"];

fn replay_rows(replays: &[FsReplay]) -> Vec<Vec<String>> {
    replays
        .iter()
        .map(|r| {
            let mut row = vec![r.fs.clone()];
            match (&r.result, &r.error) {
                (Some(x), _) => {
                    row.push(format!("{:.3}", x.seconds));
                    row.push(format!("{} ({} failed)", x.calls, x.failed_calls));
                    for op in SUMMARY_OPS {
                        row.push(x.by_op.get(op).map_or("-".into(), |l| {
                            format!("{} x {:.0}/{:.0}", l.calls, l.p50_us, l.p99_us)
                        }));
                    }
                    let b = |k: &str| {
                        r.block
                            .as_ref()
                            .and_then(|b| b.get(k))
                            .and_then(serde_json::Value::as_u64)
                            .map_or("-".into(), |v| v.to_string())
                    };
                    row.push(format!(
                        "{}+{}+{} ({} flushes)",
                        b("data_writes"),
                        b("fs_journal_writes"),
                        b("metadata_writes"),
                        b("flushes")
                    ));
                    row.push(if x.size_mismatches.is_empty() {
                        format!("{} files match", x.files_checked)
                    } else {
                        format!("{} differ", x.size_mismatches.len())
                    });
                }
                (None, e) => row.push(format!("error: {}", e.clone().unwrap_or_default())),
            }
            row
        })
        .collect()
}

const REPLAY_COLUMNS: [&str; 10] = [
    "file system",
    "seconds",
    "calls",
    "pwrite n x p50/p99 us",
    "write",
    "fdatasync",
    "fsync",
    "pread",
    "block writes data+journal+meta",
    "final sizes",
];

fn print_replays(trace: &SyscallTrace, replays: &[FsReplay]) {
    println!(
        "trace: {} ({} calls, recorded {})",
        trace.header.command,
        trace.calls.len(),
        trace.header.recorded_at
    );
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(REPLAY_COLUMNS.to_vec());
    for row in replay_rows(replays) {
        table.add_row(row);
    }
    println!("{table}");
    for r in replays {
        if let Some(x) = &r.result {
            for f in x.failures.iter().chain(&x.size_mismatches) {
                eprintln!("  {}: {f}", r.fs);
            }
        }
    }
}

fn write_replay_report(
    out: &Path,
    trace_path: &Path,
    trace: &SyscallTrace,
    replays: &[FsReplay],
) -> Result<(PathBuf, PathBuf), LabError> {
    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "trace": trace_path.display().to_string(),
        "trace_header": trace.header, "replays": replays,
    });
    let json_path = write_json(out, "replay", &json)?;
    let mut html = Html::new(
        &format!("roamkv lab replay: {}", trace.header.command),
        &header,
    );
    html.paragraph(&format!(
        "{} file calls recorded {} on kernel {}, replayed on one thread in recorded order with a \
         fixed data pattern. Latencies: calls x p50/p99 microseconds. Block writes come from the \
         lab's block tracer and include a final syncfs (delayed writeback).",
        trace.calls.len(),
        trace.header.recorded_at,
        trace.header.kernel
    ));
    let names: Vec<String> = replays.iter().map(|r| r.fs.clone()).collect();
    let pick = |key: &str| -> Vec<f64> {
        replays
            .iter()
            .map(|r| {
                r.block
                    .as_ref()
                    .and_then(|b| b.get(key))
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(f64::NAN)
            })
            .collect()
    };
    html.svg(&bar_chart_svg(
        "Block writes by kind during the replay",
        "requests",
        &names,
        &[
            ("data".into(), pick("data_writes")),
            ("fs journal".into(), pick("fs_journal_writes")),
            ("metadata".into(), pick("metadata_writes")),
            ("flushes".into(), pick("flushes")),
        ],
    ));
    html.table(&REPLAY_COLUMNS, &replay_rows(replays));
    let html_path = out.join("replay.html");
    html.write(&html_path)?;
    Ok((json_path, html_path))
}

/// The traces the lab ships (made with `roamkv lab record`; see docs/LAB.md for the commands).
pub fn shipped_traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/traces")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shipped trace parses, replays without a failed call in a plain directory, and
    /// leaves every file at the size the recording ended with.
    #[test]
    fn shipped_traces_round_trip() {
        let dir = shipped_traces_dir();
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("traces dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .collect();
        names.sort();
        assert!(
            names.len() >= 2,
            "expected two shipped traces in {}",
            dir.display()
        );
        for path in names {
            let trace = SyscallTrace::read_from(&path).expect("valid trace");
            assert!(!trace.calls.is_empty());
            let syncs = trace
                .calls
                .iter()
                .filter(|c| matches!(c.op, format::Op::Fsync | format::Op::Fdatasync))
                .count();
            assert!(syncs > 0, "{}: no sync call recorded", path.display());
            // Written back out, it reads back identical.
            let scratch = tempfile::tempdir().expect("temp dir");
            let copy = scratch.path().join("copy.jsonl");
            trace.write_to(&copy).expect("write");
            assert_eq!(SyscallTrace::read_from(&copy).expect("reread"), trace);
            let root = scratch.path().join("root");
            std::fs::create_dir(&root).expect("root");
            let result = player::play(&trace, &root, Timing::Asap).expect("replay");
            assert_eq!(
                result.failed_calls,
                0,
                "{}: {:?}",
                path.display(),
                result.failures
            );
            assert!(
                result.size_mismatches.is_empty(),
                "{}: {:?}",
                path.display(),
                result.size_mismatches
            );
            assert!(result.files_checked > 0);
        }
    }

    /// Records a real command under strace (needs the strace binary) and replays it.
    #[test]
    fn record_then_replay_a_shell_command() {
        let strace = require_tool("strace", "strace");
        if !roamkv_testbed::prerequisite::met("record_then_replay_a_shell_command", strace) {
            return;
        }
        let scratch = tempfile::tempdir().expect("temp dir");
        let work = scratch.path().join("work");
        std::fs::create_dir(&work).expect("work");
        let out = scratch.path().join("t.jsonl");
        let args = RecordArgs {
            out: out.clone(),
            dir: Some(work.clone()),
            command: vec![
                "sh".into(),
                "-c".into(),
                "mkdir d && head -c 10000 /dev/zero > d/a && dd if=d/a of=b bs=4096 conv=fdatasync 2>/dev/null && mv b c && rm d/a".into(),
            ],
        };
        let code = record(&args).expect("record");
        assert_eq!(code, ExitCode::SUCCESS);
        let trace = SyscallTrace::read_from(&out).expect("trace");
        let ops: Vec<&str> = trace.calls.iter().map(|c| c.op.name()).collect();
        for op in ["mkdir", "write", "fdatasync", "rename", "unlink"] {
            assert!(ops.contains(&op), "{op} missing from {ops:?}");
        }
        assert_eq!(trace.header.final_files.get("c"), Some(&10000));
        let root = scratch.path().join("replay");
        std::fs::create_dir(&root).expect("root");
        let result = player::play(&trace, &root, Timing::Asap).expect("replay");
        assert_eq!(result.failed_calls, 0, "{:?}", result.failures);
        assert!(
            result.size_mismatches.is_empty(),
            "{:?}",
            result.size_mismatches
        );
        assert!(!root.join("d/a").exists() && root.join("c").is_file());
    }
}
