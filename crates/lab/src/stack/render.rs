//! The host run's table, stack.json and stack.html: each step against the stock stack, ours
//! beside the paper's, and the polling verdict.
use super::args::StackArgs;
use super::polling::PollingReport;
use super::steps::{PAPER_F2FS_ALL, PAPER_STOCK, StepResult};
use crate::LabError;
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, write_json};

pub(super) fn fmt(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "-".into()
    }
}

pub(super) fn render(
    args: &StackArgs,
    inserts: usize,
    results: &[StepResult],
    polling: &PollingReport,
) -> Result<(), LabError> {
    let stock = results.first().map_or(f64::NAN, |r| r.inserts_per_s);
    let mut rows: Vec<Vec<String>> = results.iter().map(|r| step_row(r, stock)).collect();
    rows.push(f2fs_row());
    let polled = polling_verdict(polling);
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&STEP_COLUMNS, &rows)
    );
    println!("polled I/O (io_uring IOPOLL): {polled}");

    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "inserts_per_step": inserts, "record_bytes": 100,
        "steps": results, "paper_f2fs_all_inserts_per_s": PAPER_F2FS_ALL,
        "polling": polling, "polled_io": polled,
    });
    let json_path = write_json(&args.out, "stack", &json)?;
    let mut html = Html::new(
        "roamkv lab stack: paper 004's I/O stack, step by step",
        &header,
    );
    html.paragraph(&format!(
        "{inserts} single-row SQLite inserts (100 B, synchronous FULL) per step, each on a fresh \
         loop-device file system; block writes counted by the lab's block tracer. The paper's \
         figures are from its sections 6-7 (Galaxy S3 eMMC, Android 4.0.4); where it gives a \
         percentage, its number is 39 inserts/s times that gain."
    ));
    html.svg(&gain_chart(results, stock));
    html.table(&STEP_COLUMNS, &rows);
    html.heading("Polled vs interrupt-driven I/O");
    html.paragraph(&format!("io_uring IOPOLL: {polled}"));
    let device_rows: Vec<Vec<String>> = polling
        .devices
        .iter()
        .map(|(d, f)| vec![d.clone(), f.clone()])
        .collect();
    html.table(&["block device", "queue/io_poll"], &device_rows);
    let html_path = args.out.join("stack.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

/// The columns of the table of steps, one `step_row` each.
const STEP_COLUMNS: [&str; 11] = [
    "step",
    "fs",
    "journal",
    "sync",
    "inserts/s",
    "at p50",
    "x stock",
    "paper inserts/s",
    "paper x stock",
    "block writes/insert",
    "incl. writeback",
];

/// One step's row; `stock`: the first step's inserts/s, which the others are relative to.
fn step_row(r: &StepResult, stock: f64) -> Vec<String> {
    let mut row = vec![
        r.step.name.to_string(),
        r.step.fs.name().to_string(),
        r.step.journal_mode.name().to_string(),
        r.step.sync_call.name().to_string(),
    ];
    match &r.error {
        Some(e) => {
            row.push(format!("error: {e}"));
            row.extend((0..2).map(|_| String::new()));
        }
        None => row.extend([
            fmt(r.inserts_per_s),
            fmt(r.inserts_per_s_at_p50),
            format!("{:.2}", r.inserts_per_s / stock),
        ]),
    }
    row.push(r.step.paper_inserts_per_s.map_or("-".into(), fmt));
    row.push(
        r.step
            .paper_inserts_per_s
            .map_or("-".into(), |p| format!("{:.2}", p / PAPER_STOCK)),
    );
    row.push(fmt(r.block_writes_per_insert));
    row.push(fmt(r.block_writes_per_insert_after_syncfs));
    row
}

/// The paper's last step, which this kernel cannot run: its figures only.
fn f2fs_row() -> Vec<String> {
    vec![
        "all on F2FS".into(),
        "f2fs".into(),
        "wal".into(),
        "fdatasync".into(),
        "not run here: this kernel has no F2FS (`lab stack --vm` runs it in the guest)".into(),
        String::new(),
        String::new(),
        fmt(PAPER_F2FS_ALL),
        format!("{:.2}", PAPER_F2FS_ALL / PAPER_STOCK),
        String::new(),
        String::new(),
    ]
}

/// Whether polled I/O works on the lab's device, in words.
fn polling_verdict(polling: &PollingReport) -> String {
    if polling.supported {
        "supported (not measured by this version)".to_string()
    } else {
        format!(
            "not supported by this device ({}: queue/io_poll = {}; {})",
            polling.device,
            polling.queue_io_poll.as_deref().unwrap_or("absent"),
            polling.iopoll_write
        )
    }
}

/// Each step's inserts/s relative to the stock stack, ours beside the paper's.
fn gain_chart(results: &[StepResult], stock: f64) -> String {
    let names: Vec<String> = results.iter().map(|r| r.step.name.to_string()).collect();
    bar_chart_svg(
        "Inserts/s relative to the stock stack: ours vs paper 004",
        "x stock",
        &names,
        &[
            (
                "ours".into(),
                results.iter().map(|r| r.inserts_per_s / stock).collect(),
            ),
            (
                "paper 004".into(),
                results
                    .iter()
                    .map(|r| {
                        r.step
                            .paper_inserts_per_s
                            .map_or(f64::NAN, |p| p / PAPER_STOCK)
                    })
                    .collect(),
            ),
        ],
    )
}
