//! What `roamkv bench footprint` shows: a terminal table (bytes per reading on disk after ingest
//! and settled, device bytes written per reading, rate, read-back), roamkv's own account of its
//! bytes, results.json and report.html with a chart per figure (the testbed's report kit).

use std::path::Path;

use roamkv_testbed::report::{
    Html, MachineHeader, bar_chart_svg, number, terminal_table, write_json,
};

use crate::error::{BenchError, Result};
use crate::footprint::measure::{Breakdown, Footprint};
use crate::footprint::stream::StreamSpec;
use crate::footprint::systems::Settings;

const COLUMNS: [&str; 9] = [
    "system",
    "on disk B/reading, after ingest",
    "on disk B/reading, settled",
    "device written B/reading, ingest",
    "device written B/reading, ingest + settle",
    "readings/s",
    "device write MB/s, ingest",
    "read back",
    "settled how",
];

fn rows(runs: &[Footprint]) -> Vec<Vec<String>> {
    runs.iter()
        .map(|f| {
            vec![
                f.system.name().to_string(),
                number(f.per_reading(f.ingest.on_disk_bytes)),
                number(f.per_reading(f.settle.on_disk_bytes)),
                number(f.per_reading(f.ingest.device_written_bytes)),
                number(f.per_reading(f.device_written_bytes())),
                number(f.readings_per_sec),
                // What the device was asked to write a second while the stream went in: near
                // a throttled disk's MB/s, the bytes decide the rate.
                format!(
                    "{:.1}",
                    f.ingest.device_written_bytes as f64 / f.ingest_seconds.max(1e-9) / 1e6
                ),
                if f.read_back.ok() {
                    format!("ok, {} of {}", f.read_back.matched, f.read_back.expected)
                } else {
                    format!(
                        "FAILED: {} of {} ({})",
                        f.read_back.matched,
                        f.read_back.expected,
                        f.read_back
                            .first_mismatch
                            .as_deref()
                            .unwrap_or("missing readings")
                    )
                },
                f.settled_how.clone(),
            ]
        })
        .collect()
}

const WHERE_COLUMNS: [&str; 11] = [
    "system (roamkv's Stats, B/reading)",
    "log records",
    "log block rewrites and padding (whole blocks - records)",
    "group commits per 1,000 readings",
    "segment preparation",
    "lower tier (runs, catalog, compaction)",
    "file system (device - the rest)",
    "device written",
    "caller's bytes",
    "on disk settled: log files (of them spare segments)",
    "on disk settled: lower tier's window and settled-space files",
];

fn where_rows(runs: &[Footprint]) -> Vec<Vec<String>> {
    runs.iter()
        .filter_map(|f| f.breakdown_settled.map(|b| (f, b)))
        .map(|(f, b): (&Footprint, Breakdown)| {
            let device = f.device_written_bytes();
            // The log's whole blocks, or its records where a counter of blocks is missing.
            let log = b.log_block_bytes.max(b.log_record_bytes);
            let engine = log + b.segment_preparation_bytes + b.lower_tier_bytes;
            vec![
                f.system.name().to_string(),
                number(f.per_reading(b.log_record_bytes)),
                number(f.per_reading(log - b.log_record_bytes)),
                number(f.per_reading(b.group_commits * 1000)),
                number(f.per_reading(b.segment_preparation_bytes)),
                number(f.per_reading(b.lower_tier_bytes)),
                number(f.per_reading(device.saturating_sub(engine))),
                number(f.per_reading(device)),
                number(f.per_reading(b.user_bytes)),
                format!(
                    "{} ({})",
                    number(f.per_reading(b.log_file_bytes)),
                    number(f.per_reading(b.spare_segments_bytes))
                ),
                number(f.per_reading(b.lower_file_bytes)),
            ]
        })
        .collect()
}

/// The terminal's two tables.
pub fn terminal(runs: &[Footprint]) -> String {
    let mut text = terminal_table(&COLUMNS, &rows(runs));
    let where_rows = where_rows(runs);
    if !where_rows.is_empty() {
        text.push_str("\nWhere roamkv's bytes went (its own counters beside the device's):\n");
        text.push_str(&terminal_table(&WHERE_COLUMNS, &where_rows));
    }
    text
}

/// results.json and report.html in `out`.
pub fn write(
    out: &Path,
    header: &MachineHeader,
    spec: &StreamSpec,
    settings: &Settings,
    runs: &[Footprint],
    notes: &[String],
) -> Result<()> {
    let json = serde_json::json!({
        "bench": "footprint",
        "header": header.rows(),
        "stream": spec,
        "settings": settings,
        "durability": "sync",
        "runs": runs,
        "notes": notes,
    });
    write_json(out, "results", &json)?;
    let mut html = Html::new("roamkv bench footprint", header);
    html.paragraph(&format!(
        "{} devices x {} sensors at 1 Hz for {} s = {} readings (seed {}); EdgeX: one event per \
         device and second; every other system: batches of {} readings; {} client threads; \
         sync durability everywhere; each system on its own ext4 on its own loop device.",
        spec.devices,
        spec.sensors,
        spec.seconds,
        spec.readings(),
        spec.seed,
        settings.batch_readings,
        settings.clients
    ));
    html.table(&COLUMNS, &rows(runs));
    html.table(&WHERE_COLUMNS, &where_rows(runs));
    html.svg(&chart(
        runs,
        "Bytes on disk per reading",
        |f| {
            vec![
                f.per_reading(f.ingest.on_disk_bytes),
                f.per_reading(f.settle.on_disk_bytes),
            ]
        },
        &["after ingest", "settled"],
    ));
    html.svg(&chart(
        runs,
        "Bytes written to the device per reading",
        |f| {
            vec![
                f.per_reading(f.ingest.device_written_bytes),
                f.per_reading(f.device_written_bytes()),
            ]
        },
        &["ingest", "ingest + settle"],
    ));
    html.svg(&chart(
        runs,
        "Ingest rate (readings/s)",
        |f| vec![f.readings_per_sec],
        &["readings/s"],
    ));
    for note in notes {
        html.paragraph(note);
    }
    let path = out.join("report.html");
    html.write(&path).map_err(BenchError::from)
}

/// Bars per system, one series per label.
fn chart(
    runs: &[Footprint],
    title: &str,
    values: impl Fn(&Footprint) -> Vec<f64>,
    labels: &[&str],
) -> String {
    let categories: Vec<String> = runs.iter().map(|f| f.system.name().to_string()).collect();
    let series = labels
        .iter()
        .enumerate()
        .map(|(i, label)| {
            (
                label.to_string(),
                runs.iter().map(|f| values(f)[i]).collect(),
            )
        })
        .collect::<Vec<_>>();
    bar_chart_svg(title, "bytes", &categories, &series)
}
