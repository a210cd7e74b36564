//! The report of `roamkv lab fs`: the results table on the terminal, JSON, and an HTML page with
//! one chart per workload family and the traced request mix of the sync workloads.

use crate::LabError;
use crate::fs::workload::{Measurement, Plan, TracedPerOp};
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, number as fmt_num, write_json};
use std::path::{Path, PathBuf};

/// What one `lab fs` run measured, and where, for its report.
pub struct FsRun<'a> {
    pub title: &'a str,
    /// File name stem of the JSON and HTML files ("lab-fs").
    pub stem: &'a str,
    pub plan: &'a Plan,
    pub fs_names: &'a [String],
    pub fixtures_json: &'a [serde_json::Value],
    pub results: &'a [Measurement],
}

const COLUMNS: [&str; 12] = [
    "fs",
    "workload",
    "ops/s",
    "ops/s min..max",
    "MB/s",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "dev writes/op",
    "dev KiB written/op",
    "flushes/op",
    "traced writes/op data+journal+meta",
];

/// Prints the results table and writes `<stem>.json` and `<stem>.html` into `out`.
pub fn write(run: &FsRun<'_>, out: &Path) -> Result<(PathBuf, PathBuf), LabError> {
    let header = MachineHeader::collect();
    let rows = result_rows(run.results);
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&COLUMNS, &rows)
    );

    let json = serde_json::json!({
        "machine": header, "plan": run.plan, "fixtures": run.fixtures_json, "results": run.results,
    });
    let json_path = write_json(out, run.stem, &json)?;
    let mut html = Html::new(run.title, &header);
    html.paragraph(&format!(
        "Plan: {} repetitions, ops per repetition capped at {}, {} ops for the fsync workloads. \
         Reads drop the page cache first; paper-001 writes end with one fsync inside the timed region.",
        run.plan.repetitions, run.plan.ops_max, run.plan.sync_ops
    ));
    html.heading("File systems");
    let fixture_rows: Vec<Vec<String>> = run
        .fixtures_json
        .iter()
        .map(|f| {
            ["fs", "device", "mkfs", "mount_options"]
                .iter()
                .map(|k| f.get(*k).and_then(|v| v.as_str()).unwrap_or("").to_string())
                .collect()
        })
        .collect();
    html.table(&["fs", "device", "mkfs", "mount options"], &fixture_rows);
    family_charts(&mut html, run.fs_names, run.results);
    traced_charts(&mut html, run.fs_names, run.results);
    html.heading("All results");
    html.table(&COLUMNS, &rows);
    let html_path = out.join(format!("{}.html", run.stem));
    html.write(&html_path)?;
    Ok((json_path, html_path))
}

fn result_rows(results: &[Measurement]) -> Vec<Vec<String>> {
    results
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
                fmt_num(m.latency_us.p50),
                fmt_num(m.latency_us.p99),
                fmt_num(m.latency_us.p99_9),
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
        .collect()
}

/// Distinct values in first-seen order.
fn distinct<'a>(values: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in values {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

/// One chart per workload family: MB/s (ops/s for sync workloads) by file system, one bar per
/// variant; sync families also get block writes per operation.
fn family_charts(html: &mut Html, fs_names: &[String], results: &[Measurement]) {
    let fs_names = fs_names.to_vec();
    let family_names: Vec<String> = results.iter().map(|m| family_of(&m.workload)).collect();
    for family in &distinct(family_names.iter()) {
        let variants = distinct(
            results
                .iter()
                .filter(|m| &family_of(&m.workload) == family)
                .map(|m| &m.workload),
        );
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
}

/// One figure of a traced operation (data writes, journal writes, ...).
type PerOp = fn(&TracedPerOp) -> f64;

/// Paper 004 §5: what one write+sync costs, by request kind, from the traced repetition.
fn traced_charts(html: &mut Html, fs_names: &[String], results: &[Measurement]) {
    let traced: Vec<&Measurement> = results
        .iter()
        .filter(|m| m.traced_per_op.is_some())
        .collect();
    if traced.is_empty() {
        return;
    }
    html.heading("Block requests per 4 KiB write + sync (traced)");
    html.paragraph(
        "One extra, untimed repetition of each sync workload runs under `roamkv lab trace`'s tracer; every request \
         is named by LBA (file data, file-system journal/log, other metadata). The device counters in the table \
         below count one more write per flush on this kernel: the empty write bio that carries a preflush.",
    );
    let variants = distinct(traced.iter().map(|m| &m.workload));
    for v in variants
        .iter()
        .filter(|v| v.ends_with("buffered") || !variants.iter().any(|b| b.ends_with("buffered")))
    {
        let pick = |fs: &str, f: &dyn Fn(&TracedPerOp) -> f64| {
            traced
                .iter()
                .find(|m| m.fs == fs && &m.workload == v)
                .and_then(|m| m.traced_per_op.as_ref().map(f))
                .unwrap_or(f64::NAN)
        };
        let kinds: [(&str, PerOp); 4] = [
            ("data", |t| t.data_writes),
            ("fs journal", |t| t.journal_writes),
            ("metadata", |t| t.metadata_writes),
            ("flushes", |t| t.flushes),
        ];
        let series: Vec<(String, Vec<f64>)> = kinds
            .iter()
            .map(|(name, f)| {
                let values = fs_names.iter().map(|fs| pick(fs, f)).collect();
                (name.to_string(), values)
            })
            .collect();
        html.svg(&bar_chart_svg(
            &format!("{v}: requests per operation"),
            "requests / op",
            fs_names,
            &series,
        ));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(1.234), "1.23");
        assert_eq!(fmt_num(f64::NAN), "-");
    }
}
