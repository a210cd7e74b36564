//! The report of `roamkv lab sqlite`: the runs as a table on the terminal, results.json, and
//! report.html with one chart pair per workload group and the writes split by kind.

use std::path::Path;

use super::config::{Op, Synchronous};
use super::measure::RunResult;
use crate::LabError;
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg};

const COLUMNS: [&str; 15] = [
    "fs",
    "journal",
    "sync",
    "call",
    "op",
    "rows/tx",
    "threads",
    "tx/s",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "writes/tx",
    "KiB/tx",
    "flushes/tx",
    "writes/tx +syncfs",
];

fn rows(results: &[RunResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            vec![
                r.fs.clone(),
                r.journal_mode.to_string(),
                r.synchronous.to_string(),
                r.sync_call.to_string(),
                r.op.to_string(),
                r.rows_per_tx.to_string(),
                r.threads.to_string(),
                format!("{:.0}", r.tx_per_sec),
                format!("{:.0}", r.latency_us.p50),
                format!("{:.0}", r.latency_us.p99),
                format!("{:.0}", r.latency_us.p99_9),
                format!("{:.2}", r.block_writes_per_tx),
                format!("{:.1}", r.block_bytes_per_tx / 1024.0),
                format!("{:.2}", r.flushes_per_tx),
                format!("{:.2}", r.block_writes_per_tx_after_syncfs),
            ]
        })
        .collect()
}

pub fn print_table(results: &[RunResult]) {
    let mut t = comfy_table::Table::new();
    t.set_header(COLUMNS.to_vec());
    for row in rows(results) {
        t.add_row(row);
    }
    println!("{t}");
}

pub fn write_html(
    path: &Path,
    header: &MachineHeader,
    command: &str,
    results: &[RunResult],
) -> Result<(), LabError> {
    let mut html = Html::new(
        "roamkv lab sqlite — SQLite journaling on file systems (paper 004)",
        header,
    );
    html.paragraph(&format!(
        "Command: {command}. SQLite {}. Each run: fresh database file per thread, pre-filled for update/delete, \
         caches synced, then the transactions traced at the block layer; 'writes/tx' counts data + file-system \
         journal + metadata writes while the transactions ran, '+syncfs' adds the deferred write-back forced \
         afterwards. Paper 004 (EXT4, Galaxy S3): 9 block writes per insert in DELETE mode, 12 in PERSIST; \
         fdatasync instead of fsync +17 % inserts/s, +50 % updates/s.",
        rusqlite::version()
    ));
    group_charts(&mut html, results);
    html.heading("All runs");
    html.table(&COLUMNS, &rows(results));
    html.heading("Block writes per transaction by kind (while running; see results.json for bytes and +syncfs)");
    let split_rows = split_rows(results);
    html.table(
        &[
            "fs",
            "journal",
            "sync",
            "call",
            "op",
            "db",
            "journal/WAL",
            "other data",
            "fs journal",
            "metadata",
            "flushes",
            "fsync+delegated calls",
        ],
        &split_rows,
    );
    html.write(path)
}

/// One chart pair (tx/s, block writes per tx) per (op, synchronous, rows/tx, threads):
/// categories = journal modes, series = file system / sync call.
fn group_charts(html: &mut Html, results: &[RunResult]) {
    let mut groups: Vec<(Op, Synchronous, usize, usize)> = Vec::new();
    for r in results {
        let g = (r.op, r.synchronous, r.rows_per_tx, r.threads);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (op, sync, rows_per_tx, threads) in groups {
        let sel: Vec<&RunResult> = results
            .iter()
            .filter(|r| {
                r.op == op
                    && r.synchronous == sync
                    && r.rows_per_tx == rows_per_tx
                    && r.threads == threads
            })
            .collect();
        let mut modes: Vec<String> = Vec::new();
        let mut series_names: Vec<String> = Vec::new();
        for r in &sel {
            let m = r.journal_mode.to_string();
            if !modes.contains(&m) {
                modes.push(m);
            }
            let s = format!("{}/{}", r.fs, r.sync_call);
            if !series_names.contains(&s) {
                series_names.push(s);
            }
        }
        let series = |f: &dyn Fn(&RunResult) -> f64| -> Vec<(String, Vec<f64>)> {
            series_names
                .iter()
                .map(|s| {
                    let v = modes
                        .iter()
                        .map(|m| {
                            sel.iter()
                                .find(|r| {
                                    &format!("{}/{}", r.fs, r.sync_call) == s
                                        && &r.journal_mode.to_string() == m
                                })
                                .map(|r| f(r))
                                .unwrap_or(0.0)
                        })
                        .collect();
                    (s.clone(), v)
                })
                .collect()
        };
        let what =
            format!("{op}, synchronous={sync}, {rows_per_tx} row(s)/tx, {threads} thread(s)");
        html.heading(&what);
        html.svg(&bar_chart_svg(
            &format!("{op}: transactions/s"),
            "tx/s",
            &modes,
            &series(&|r| r.tx_per_sec),
        ));
        html.svg(&bar_chart_svg(
            &format!("{op}: block writes per transaction"),
            "writes/tx",
            &modes,
            &series(&|r| r.block_writes_per_tx),
        ));
    }
}

/// Per run: block writes per transaction by kind (db, journal/WAL, other data, fs journal,
/// metadata), flushes, and the sync calls SQLite made.
fn split_rows(results: &[RunResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            let d = r.transactions.max(1) as f64;
            let s = &r.immediate;
            vec![
                r.fs.clone(),
                r.journal_mode.to_string(),
                r.synchronous.to_string(),
                r.sync_call.to_string(),
                r.op.to_string(),
                format!("{:.2}", s.db.writes as f64 / d),
                format!("{:.2}", s.journal.writes as f64 / d),
                format!("{:.2}", s.other_data.writes as f64 / d),
                format!("{:.2}", s.fs_journal.writes as f64 / d),
                format!("{:.2}", s.metadata.writes as f64 / d),
                format!("{:.2}", s.flushes as f64 / d),
                format!(
                    "{}+{}",
                    r.sync_calls.fsync_calls, r.sync_calls.delegated_syncs
                ),
            ]
        })
        .collect()
}
