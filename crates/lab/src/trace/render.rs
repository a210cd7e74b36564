//! Rendering a trace for people: the summary table, the request timeline, and the LBA-over-time
//! chart (paper 004, Fig. 3/4).

use super::classify::Trace;
use super::request::{Kind, Request};
use roamkv_testbed::report::scatter_chart_svg;

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

pub fn print_trace(trace: &Trace, lines: usize) {
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

/// A chart draws at most this many requests of one kind (every n-th beyond that).
const SVG_POINTS_PER_KIND_MAX: usize = 20_000;

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
            let of_kind: Vec<&Request> = trace.requests.iter().filter(|r| r.kind == *k).collect();
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
