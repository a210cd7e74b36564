//! The commit lab's report: a terminal table, results.json (`rows` as documented in docs/LAB.md)
//! and report.html with charts shaped like paper 003's Figure 1, the paper's own figures beside.
use super::model::{Device, DeviceReport, Plan, Row};
use crate::LabError;
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, number as fmt, write_json};
use std::path::{Path, PathBuf};

/// Paper 003, Table 2: total seconds per session count (1..4) for 10k/20k/40k 1-byte
/// insert+commit transactions per session, redo log on SSD and on a 7200 rpm HDD.
pub const PAPER_TABLE2: [(&str, u64, [f64; 4]); 6] = [
    ("SSD", 10_000, [184.0, 189.0, 182.0, 174.0]),
    ("SSD", 20_000, [283.0, 245.0, 249.0, 386.0]),
    ("SSD", 40_000, [691.0, 695.0, 757.0, 696.0]),
    ("HDD", 10_000, [198.0, 194.0, 196.0, 194.0]),
    ("HDD", 20_000, [399.0, 400.0, 394.0, 399.0]),
    ("HDD", 40_000, [780.0, 782.0, 785.0, 780.0]),
];

/// Paper 003, Table 3: 20k x 512 B transactions, run and wait seconds summed over sessions.
pub const PAPER_TABLE3: [(&str, f64, f64, f64); 2] =
    [("SSD", 1501.0, 97.0, 0.065), ("HDD", 1610.0, 1012.0, 0.628)];

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1} %", v * 100.0)
    } else {
        "-".into()
    }
}

const COLUMNS: [&str; 11] = [
    "engine",
    "device",
    "sessions",
    "tx/session",
    "row B",
    "total s",
    "tx/s",
    "commit wait",
    "(client)",
    "group size",
    "commit ms",
];

fn table_rows(rows: &[Row]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            let mut cells = vec![
                r.engine.to_string(),
                r.device.to_string(),
                r.sessions.to_string(),
                r.transactions.to_string(),
                r.row_bytes.to_string(),
            ];
            match &r.error {
                Some(e) => {
                    cells.push(format!("error: {e}"));
                    cells.extend((0..5).map(|_| String::new()));
                }
                None => cells.extend([
                    fmt(r.total_seconds),
                    fmt(r.transactions_per_second),
                    pct(r.commit_wait_share),
                    pct(r.commit_wait_share_client),
                    fmt(r.mean_group_size),
                    fmt(r.commit_latency_ms_mean),
                ]),
            }
            cells
        })
        .collect()
}

pub fn print_table(rows: &[Row]) {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(COLUMNS.to_vec());
    for row in table_rows(rows) {
        table.add_row(row);
    }
    println!("{table}");
}

/// Mean of the finite values (NaN when there are none).
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn workload_label((tx, bytes): (u64, usize)) -> String {
    if tx >= 1000 && tx.is_multiple_of(1000) {
        format!("{}k x {bytes} B", tx / 1000)
    } else {
        format!("{tx} x {bytes} B")
    }
}

/// The paper's Figure 1 from its Table 2: mean total seconds over 1-4 sessions, SSD vs HDD.
fn paper_figure1() -> String {
    let categories: Vec<String> = ["10k", "20k", "40k"].map(String::from).to_vec();
    let series: Vec<(String, Vec<f64>)> = ["SSD", "HDD"]
        .iter()
        .map(|dev| {
            let values = [10_000u64, 20_000, 40_000]
                .iter()
                .map(|tx| {
                    PAPER_TABLE2
                        .iter()
                        .find(|(d, t, _)| d == dev && t == tx)
                        .map_or(f64::NAN, |(_, _, s)| mean(s.iter().copied()))
                })
                .collect();
            (dev.to_string(), values)
        })
        .collect();
    bar_chart_svg(
        "Paper 003 Figure 1 (from its Table 2): mean seconds over 1-4 sessions, commercial DBMS",
        "seconds",
        &categories,
        &series,
    )
}

/// Ours, the same shape: per engine, mean total seconds over the session counts, fast vs slow.
fn our_figure1(plan: &Plan, rows: &[Row], engine: &str) -> String {
    let categories: Vec<String> = plan.workloads.iter().map(|w| workload_label(*w)).collect();
    let series: Vec<(String, Vec<f64>)> = plan
        .devices
        .iter()
        .map(|device| {
            let values = plan
                .workloads
                .iter()
                .map(|w| {
                    mean(
                        rows.iter()
                            .filter(|r| {
                                r.engine == engine
                                    && r.device == device.name()
                                    && (r.transactions, r.row_bytes) == *w
                            })
                            .map(|r| r.total_seconds),
                    )
                })
                .collect();
            (device.name().to_string(), values)
        })
        .collect();
    bar_chart_svg(
        &format!(
            "{engine}: mean total seconds over {} session counts",
            plan.sessions.len()
        ),
        "seconds",
        &categories,
        &series,
    )
}

/// Commit-wait share per engine and device, with the paper's Table 3 as the first group.
fn wait_share_chart(plan: &Plan, rows: &[Row]) -> String {
    let mut categories = vec!["paper 003 (20k x 512 B)".to_string()];
    categories.extend(plan.engines.iter().map(|e| e.name().to_string()));
    let series: Vec<(String, Vec<f64>)> = plan
        .devices
        .iter()
        .map(|device| {
            let paper = match device {
                Device::Fast => PAPER_TABLE3[0].3,
                Device::Slow => PAPER_TABLE3[1].3,
            };
            let mut values = vec![paper * 100.0];
            values.extend(plan.engines.iter().map(|e| {
                100.0
                    * mean(
                        rows.iter()
                            .filter(|r| r.engine == e.name() && r.device == device.name())
                            .map(|r| r.commit_wait_share),
                    )
            }));
            let label = match device {
                Device::Fast => "fast (paper: SSD)",
                Device::Slow => "slow (paper: HDD)",
            };
            (label.to_string(), values)
        })
        .collect();
    bar_chart_svg(
        "Share of session time waiting for the commit (mean over all runs)",
        "%",
        &categories,
        &series,
    )
}

fn group_size_chart(plan: &Plan, rows: &[Row]) -> String {
    let categories: Vec<String> = plan
        .sessions
        .iter()
        .map(|s| format!("{s} sessions"))
        .collect();
    let mut series = Vec::new();
    for engine in &plan.engines {
        for device in &plan.devices {
            let values = plan
                .sessions
                .iter()
                .map(|s| {
                    mean(
                        rows.iter()
                            .filter(|r| {
                                r.engine == engine.name()
                                    && r.device == device.name()
                                    && r.sessions == *s
                            })
                            .map(|r| r.mean_group_size),
                    )
                })
                .collect();
            series.push((format!("{} {}", engine.name(), device.name()), values));
        }
    }
    bar_chart_svg(
        "Transactions per log sync (group commit), mean over workloads",
        "transactions / sync",
        &categories,
        &series,
    )
}

/// Writes DIR/results.json and DIR/report.html; returns their paths.
pub fn write_report(
    out: &Path,
    plan: &Plan,
    devices: &[DeviceReport],
    rows: &[Row],
) -> Result<(PathBuf, PathBuf), LabError> {
    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "plan": plan, "devices": devices, "rows": rows, "paper": paper_json(),
    });
    let json_path = write_json(out, "results", &json)?;

    let mut html = Html::new(
        "roamkv lab commit: paper 003's redo-log experiment",
        &header,
    );
    html.paragraph(&format!(
        "Work outside the commit: each session sleeps {} ms before each transaction (--think-ms).",
        plan.think_ms
    ));
    html.paragraph(
        "Each session runs single-row insert + commit transactions; all sessions start together. \
         'commit wait' is the share of session time spent waiting for the commit to be durable: \
         PostgreSQL's from its own pg_stat_activity wait events (WALWrite, WALSync) sampled every \
         10 ms, SQLite's and roamkv's from the time inside the commit call. 'group size' is \
         transactions per log sync. The slow device is the same loop device with its write \
         requests throttled in the block layer (see the devices table).",
    );
    html.heading("Log devices");
    devices_table(&mut html, devices);
    html.heading("Figure 1: total time, the paper's and ours");
    html.svg(&paper_figure1());
    for engine in &plan.engines {
        html.svg(&our_figure1(plan, rows, engine.name()));
    }
    html.heading("Commit wait (the paper's Table 3: SSD 6.5 %, HDD 62.8 %)");
    html.svg(&wait_share_chart(plan, rows));
    html.heading("Group commit: what decides total time");
    html.svg(&group_size_chart(plan, rows));
    html.heading("All runs");
    html.table(&COLUMNS, &table_rows(rows));
    html.heading("The paper's figures");
    paper_tables(&mut html);
    let html_path = out.join("report.html");
    html.write(&html_path)?;
    Ok((json_path, html_path))
}

/// The paper's Tables 2 and 3, for results.json.
fn paper_json() -> serde_json::Value {
    serde_json::json!({
        "source": "paper 003 (Kim, Kim, Lee): redo log of a commercial DBMS on SSD vs 7200 rpm HDD",
        "table2_total_seconds": PAPER_TABLE2.iter().map(|(d, tx, s)| serde_json::json!({"device": d, "transactions": tx, "row_bytes": 1, "sessions_1_to_4": s})).collect::<Vec<_>>(),
        "table3_20k_x_512B": PAPER_TABLE3.iter().map(|(d, run, wait, share)| serde_json::json!({"device": d, "run_seconds_sum": run, "wait_seconds_sum": wait, "wait_share": share})).collect::<Vec<_>>(),
    })
}

/// Each log device: what it is and what a synchronous write costs on it.
fn devices_table(html: &mut Html, devices: &[DeviceReport]) {
    let device_rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                d.device.to_string(),
                d.block_device.clone(),
                d.fs.clone(),
                d.throttle.clone().unwrap_or_else(|| "none".into()),
                format!("{:.2}", d.sync_write_ms_mean),
                format!("{:.2}", d.sync_write_ms_median),
            ]
        })
        .collect();
    html.table(
        &[
            "device",
            "block device",
            "fs",
            "throttle",
            "4 KiB write+fdatasync median ms",
        ],
        &device_rows,
    );
}

/// The paper's Tables 2 and 3 as HTML tables.
fn paper_tables(html: &mut Html) {
    let paper_rows: Vec<Vec<String>> = PAPER_TABLE2
        .iter()
        .map(|(d, tx, s)| {
            let mut r = vec![d.to_string(), tx.to_string()];
            r.extend(s.iter().map(|v| format!("{v:.0}")));
            r
        })
        .collect();
    html.table(
        &["device", "tx/session (1 B)", "1 session s", "2", "3", "4"],
        &paper_rows,
    );
    let table3: Vec<Vec<String>> = PAPER_TABLE3
        .iter()
        .map(|(d, run, wait, share)| {
            vec![
                d.to_string(),
                format!("{run:.0}"),
                format!("{wait:.0}"),
                pct(*share),
            ]
        })
        .collect();
    html.table(
        &["device", "run s (sum)", "wait s (sum)", "wait share"],
        &table3,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_figure_means_match_table2() {
        let ssd10 = PAPER_TABLE2[0].2;
        assert!((mean(ssd10.iter().copied()) - 182.25).abs() < 1e-9);
        assert!(mean([f64::NAN, 1.0, 3.0].into_iter()) == 2.0);
        assert!(mean(std::iter::empty()).is_nan());
    }

    #[test]
    fn workload_labels() {
        assert_eq!(workload_label((20_000, 512)), "20k x 512 B");
        assert_eq!(workload_label((200, 1)), "200 x 1 B");
    }
}
