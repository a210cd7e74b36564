//! The result model and its three renderings: a table on the terminal, results.json + results.csv,
//! and report.html with SVG charts like paper 002's Fig. 7 (ops/s vs threads) and Fig. 8 (device
//! write MiB/s vs threads), plus write amplification.

use std::path::Path;

use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, line_chart_svg};

use crate::error::{BenchError, Result};

/// One (engine, threads, durability, scenario) measurement: the median of its repeats by ops/s.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRecord {
    pub engine: String,
    pub threads: usize,
    pub durability: String,
    pub scenario: String,
    pub ops_per_sec: f64,
    pub ops_per_sec_repeats: Vec<f64>,
    pub puts: u64,
    pub queries: u64,
    pub departures: u64,
    pub put_p50_us: u64,
    pub put_p99_us: u64,
    pub put_p999_us: u64,
    pub query_p99_us: u64,
    pub user_bytes: u64,
    pub device_bytes_written: u64,
    pub device_writes: u64,
    pub device_flushes: u64,
    pub write_amplification: f64,
    pub user_bytes_per_sec: f64,
    pub device_write_bytes_per_sec: f64,
    /// User ingest as a fraction of the measured raw sequential write bandwidth.
    pub ingest_fraction_of_raw: f64,
    pub peak_rss_bytes: u64,
    pub cgroup_peak_bytes: u64,
    pub memory_capped: bool,
    pub space_bytes_end: u64,
    pub read_checks: u64,
    pub read_check_failures: u64,
    pub elapsed_s: f64,
    pub config: String,
}

/// Write amplification at the device: bytes the block device wrote / bytes the user handed in.
pub fn write_amplification(device_bytes_written: u64, user_bytes: u64) -> f64 {
    if user_bytes == 0 {
        0.0
    } else {
        device_bytes_written as f64 / user_bytes as f64
    }
}

pub fn terminal_table(runs: &[RunRecord]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "scenario",
        "durability",
        "engine",
        "threads",
        "ops/s",
        "put p99 µs",
        "user MB/s",
        "device MB/s",
        "WA",
        "% raw",
        "RSS MiB",
        "checks",
    ]);
    for r in runs {
        table.add_row([
            r.scenario.clone(),
            r.durability.clone(),
            r.engine.clone(),
            r.threads.to_string(),
            format!("{:.0}", r.ops_per_sec),
            r.put_p99_us.to_string(),
            format!("{:.1}", r.user_bytes_per_sec / 1e6),
            format!("{:.1}", r.device_write_bytes_per_sec / 1e6),
            format!("{:.2}", r.write_amplification),
            format!("{:.0}", r.ingest_fraction_of_raw * 100.0),
            format!("{:.0}", r.peak_rss_bytes as f64 / 1048576.0),
            if r.read_check_failures == 0 {
                format!("{} ok", r.read_checks)
            } else {
                format!("{} FAILED", r.read_check_failures)
            },
        ]);
    }
    table.to_string()
}

pub fn write_csv(path: &Path, runs: &[RunRecord]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| BenchError::io("creating", path, e))?;
    let mut writer = csv::Writer::from_writer(file);
    writer.write_record([
        "engine",
        "threads",
        "durability",
        "scenario",
        "ops_per_sec",
        "put_p50_us",
        "put_p99_us",
        "put_p999_us",
        "query_p99_us",
        "user_bytes",
        "device_bytes_written",
        "write_amplification",
        "device_write_bytes_per_sec",
        "ingest_fraction_of_raw",
        "peak_rss_bytes",
        "space_bytes_end",
        "read_check_failures",
    ])?;
    for r in runs {
        writer.write_record([
            r.engine.clone(),
            r.threads.to_string(),
            r.durability.clone(),
            r.scenario.clone(),
            format!("{:.1}", r.ops_per_sec),
            r.put_p50_us.to_string(),
            r.put_p99_us.to_string(),
            r.put_p999_us.to_string(),
            r.query_p99_us.to_string(),
            r.user_bytes.to_string(),
            r.device_bytes_written.to_string(),
            format!("{:.4}", r.write_amplification),
            format!("{:.0}", r.device_write_bytes_per_sec),
            format!("{:.4}", r.ingest_fraction_of_raw),
            r.peak_rss_bytes.to_string(),
            r.space_bytes_end.to_string(),
            r.read_check_failures.to_string(),
        ])?;
    }
    writer
        .flush()
        .map_err(|e| BenchError::io("writing", path, e))
}

fn groups(runs: &[RunRecord]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in runs {
        let g = (r.scenario.clone(), r.durability.clone());
        if !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

fn engines(runs: &[RunRecord]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in runs {
        if !out.contains(&r.engine) {
            out.push(r.engine.clone());
        }
    }
    out
}

fn series(
    runs: &[RunRecord],
    scenario: &str,
    durability: &str,
    y: impl Fn(&RunRecord) -> f64,
) -> Vec<(String, Vec<(f64, f64)>)> {
    engines(runs)
        .into_iter()
        .map(|engine| {
            let points = runs
                .iter()
                .filter(|r| {
                    r.engine == engine && r.scenario == scenario && r.durability == durability
                })
                .map(|r| (r.threads as f64, y(r)))
                .collect();
            (engine, points)
        })
        .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
        .collect()
}

pub fn write_html(
    path: &Path,
    header: &MachineHeader,
    summary: &[String],
    notes: &[String],
    runs: &[RunRecord],
) -> Result<()> {
    let mut html = Html::new("roamkv bench: TPCx-IoT mobility", header);
    html.heading("Summary");
    for line in summary {
        html.paragraph(line);
    }
    for (scenario, durability) in groups(runs) {
        html.heading(&format!("Scenario {scenario}, durability {durability}"));
        group_charts(&mut html, runs, &scenario, &durability);
    }
    html.heading("All runs");
    html.table(&RUN_COLUMNS, &runs.iter().map(run_row).collect::<Vec<_>>());
    html.heading("Configuration and method");
    for note in notes {
        html.paragraph(note);
    }
    Ok(html.write(path)?)
}

/// One scenario and durability's charts: throughput and device bandwidth by writer threads, and
/// each engine's write amplification at the most threads.
fn group_charts(html: &mut Html, runs: &[RunRecord], scenario: &str, durability: &str) {
    html.svg(&line_chart_svg(
        &format!("Throughput ({scenario}, {durability}) — cf. paper 002 Fig. 7"),
        "writer threads",
        "operations/s",
        &series(runs, scenario, durability, |r| r.ops_per_sec),
    ));
    html.svg(&line_chart_svg(
        &format!("Device write bandwidth ({scenario}, {durability}) — cf. Fig. 8"),
        "writer threads",
        "device MiB/s written",
        &series(runs, scenario, durability, |r| {
            r.device_write_bytes_per_sec / 1048576.0
        }),
    ));
    let max_threads = runs.iter().map(|r| r.threads).max().unwrap_or(1);
    let names = engines(runs);
    let wa: Vec<f64> = names
        .iter()
        .map(|e| {
            runs.iter()
                .find(|r| {
                    &r.engine == e
                        && r.scenario == scenario
                        && r.durability == durability
                        && r.threads == max_threads
                })
                .map_or(0.0, |r| r.write_amplification)
        })
        .collect();
    html.svg(&bar_chart_svg(
        &format!(
            "Device-level write amplification at {max_threads} threads ({scenario}, {durability})"
        ),
        "device bytes / user bytes",
        &names,
        &[("write amplification".to_string(), wa)],
    ));
}

/// The columns of the report's table of every run, one `run_row` each.
const RUN_COLUMNS: [&str; 12] = [
    "scenario",
    "durability",
    "engine",
    "threads",
    "ops/s",
    "put p50/p99/p99.9 µs",
    "query p99 µs",
    "WA",
    "device MB/s",
    "peak RSS MiB",
    "space MiB",
    "read checks",
];

fn run_row(r: &RunRecord) -> Vec<String> {
    vec![
        r.scenario.clone(),
        r.durability.clone(),
        r.engine.clone(),
        r.threads.to_string(),
        format!("{:.0}", r.ops_per_sec),
        format!("{}/{}/{}", r.put_p50_us, r.put_p99_us, r.put_p999_us),
        r.query_p99_us.to_string(),
        format!("{:.3}", r.write_amplification),
        format!("{:.1}", r.device_write_bytes_per_sec / 1e6),
        format!("{:.0}", r.peak_rss_bytes as f64 / 1048576.0),
        format!("{:.0}", r.space_bytes_end as f64 / 1048576.0),
        format!(
            "{}/{}",
            r.read_checks - r.read_check_failures,
            r.read_checks
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_amplification_is_device_bytes_over_user_bytes() {
        assert_eq!(write_amplification(2_200, 2_000), 1.1);
        assert_eq!(write_amplification(0, 0), 0.0);
        // A device that wrote less than the user gave (e.g. compression) is reported as such.
        assert_eq!(write_amplification(500, 1_000), 0.5);
    }
}
