//! The report of `roamkv lab trace`: the timeline and summary on the terminal, the per-operation
//! figures, and trace.json / trace.html (plus the optional --json and --svg copies).

use crate::LabError;
use crate::trace::{Trace, print_trace, summary_rows, timeline_text, trace_svg};
use roamkv_testbed::fixture::Fixture;
use roamkv_testbed::report::{Html, MachineHeader, write_json};
use std::path::{Path, PathBuf};

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
