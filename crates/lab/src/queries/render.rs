//! What a run shows: the measurements and ratios as tables on the terminal, and the HTML report
//! (a chart per cache state, every measurement, the ratios, the sensor comparison).
use super::args::QueriesConfig;
use super::measure::{QueryRun, Ratio};
use super::{roamkv_store, schema, sensor};
use crate::LabError;
use std::path::Path;

const ROAMKV_MISSING: &str = "roamkv was not measured: this build of roamkv-lab lacks the feature `engine` \
(cargo build --release -p roamkv-lab --features engine, or the roamkv CLI built with it).";

fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

fn run_rows(runs: &[QueryRun]) -> Vec<Vec<String>> {
    runs.iter()
        .map(|r| {
            vec![
                r.fs.clone(),
                r.cache.name().to_string(),
                r.query.clone(),
                format!("{:.0}", r.result_rows_mean),
                fmt_us(r.timing_us.mean),
                fmt_us(r.timing_us.median),
                fmt_us(r.timing_us.p95),
                r.timing_us.repetitions.to_string(),
            ]
        })
        .collect()
}

const RUN_COLUMNS: [&str; 8] = [
    "fs", "cache", "query", "rows", "mean", "median", "p95", "reps",
];

pub(super) fn print_tables(
    runs: &[QueryRun],
    ratio_list: &[Ratio],
    sensor_runs: &[sensor::SensorRun],
) {
    let mut t = comfy_table::Table::new();
    t.set_header(RUN_COLUMNS.to_vec());
    for row in run_rows(runs) {
        t.add_row(row);
    }
    println!("{t}");
    if !ratio_list.is_empty() {
        let mut t = comfy_table::Table::new();
        t.set_header(vec!["cache", "query", "a:b", "ratio (1:x)"]);
        for r in ratio_list {
            t.add_row(vec![
                r.cache.name().to_string(),
                r.query.clone(),
                format!("{}:{}", r.fs_a, r.fs_b),
                format!("1:{:.3}", r.ratio),
            ]);
        }
        println!("{t}");
    }
    if !sensor_runs.is_empty() {
        let mut t = comfy_table::Table::new();
        t.set_header(sensor::RUN_COLUMNS.to_vec());
        for row in sensor::run_rows(sensor_runs) {
            t.add_row(row);
        }
        println!("{t}");
    }
    if !sensor_runs.is_empty() && !roamkv_store::AVAILABLE {
        println!("{ROAMKV_MISSING}");
    }
}

pub(super) fn write_html(
    path: &Path,
    header: &roamkv_testbed::report::MachineHeader,
    command: &str,
    config: &QueriesConfig,
    runs: &[QueryRun],
    ratio_list: &[Ratio],
    sensor_runs: &[sensor::SensorRun],
) -> Result<(), LabError> {
    use roamkv_testbed::report::{Html, bar_chart_svg};
    let mut html = Html::new(
        "roamkv lab queries — SQLite search queries per file system (paper 000)",
        header,
    );
    html.paragraph(&format!(
        "Command: {command}. Tables: items (10 fields, {} B declared) and owners (8 fields, {} B), {} rows each, \
         non-key duplicates {:.0} % (paper 000: at most 20 %). Warm: one connection, one untimed run first, {} \
         repetitions. Cold: caches dropped and SQLite reopened before each of {} repetitions.",
        schema::ITEMS.record_bytes(),
        schema::OWNERS.record_bytes(),
        config.rows,
        config.duplicate_fraction * 100.0,
        config.warm_repetitions,
        config.cold_repetitions
    ));
    cache_charts(&mut html, config, runs);
    html.heading("All measurements");
    html.table(&RUN_COLUMNS, &run_rows(runs));
    if !ratio_list.is_empty() {
        html.heading(
            "Ratios between file systems (paper 000: indexed XFS:FAT = 1:1.04, full scan 1.004:1)",
        );
        let rows: Vec<Vec<String>> = ratio_list
            .iter()
            .map(|r| {
                vec![
                    r.cache.name().to_string(),
                    r.query.clone(),
                    format!("{}:{}", r.fs_a, r.fs_b),
                    format!("1:{:.3}", r.ratio),
                ]
            })
            .collect();
        html.table(&["cache", "query", "a:b", "ratio"], &rows);
    }
    if !sensor_runs.is_empty() {
        html.heading("Sensor data: the same questions asked of roamkv and SQLite");
        html.paragraph(sensor::DESCRIPTION);
        if !roamkv_store::AVAILABLE {
            html.paragraph(ROAMKV_MISSING);
        }
        html.table(&sensor::RUN_COLUMNS, &sensor::run_rows(sensor_runs));
        let (cats, series) = sensor::chart_series(sensor_runs);
        html.svg(&bar_chart_svg(
            "Sensor queries (warm), median",
            "us (median)",
            &cats,
            &series,
        ));
    }
    html.write(path)
}

/// One chart per cache state: mean time per query, one bar per file system.
fn cache_charts(
    html: &mut roamkv_testbed::report::Html,
    config: &QueriesConfig,
    runs: &[QueryRun],
) {
    use roamkv_testbed::report::bar_chart_svg;
    let fs_names: Vec<String> = config.fs.iter().map(|f| f.name().to_string()).collect();
    for &cache in &config.caches {
        let queries: Vec<String> = runs
            .iter()
            .filter(|r| r.cache == cache && r.fs == fs_names[0])
            .map(|r| r.query.clone())
            .collect();
        let series: Vec<(String, Vec<f64>)> = fs_names
            .iter()
            .map(|fs| {
                let v = queries
                    .iter()
                    .map(|q| {
                        runs.iter()
                            .find(|r| &r.fs == fs && r.cache == cache && &r.query == q)
                            .map(|r| r.timing_us.mean / 1000.0)
                            .unwrap_or(0.0)
                    })
                    .collect();
                (fs.clone(), v)
            })
            .collect();
        html.heading(&format!("{} cache: mean time per query (ms)", cache.name()));
        html.svg(&bar_chart_svg(
            &format!("SQLite queries, {} cache", cache.name()),
            "ms (mean)",
            &queries,
            &series,
        ));
    }
}
