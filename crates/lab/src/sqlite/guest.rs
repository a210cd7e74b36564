//! `roamkv lab sqlite --vm`: the SQLite journal-mode matrix on the file systems this kernel lacks
//! (F2FS, FAT, exFAT), inside the qemu guest of the `--vm` route, with ext4 in the same guest as
//! the control. The guest kernel has no lab tracer, so there a run is counted by the virtual
//! disk's own counters (/sys/block/vda/stat): block writes and flushes per transaction, not split
//! by kind.
//!
//! The host passes `lab guest-sqlite <the sqlite options> --` as the command prefix; the guest's
//! /init appends the words naming each mounted file system (`vm::InitWords`).
use super::{SqliteArgs, matrix, measure};
use crate::LabError;
use crate::fs::workload::MountedDevice;
use crate::vm::{self, InitWords};
use roamkv_testbed::prerequisite::require_root;
use roamkv_testbed::report::{Html, MachineHeader, write_json};
use std::process::ExitCode;

/// Guest file systems measured by default (nilfs2 is left out: without its cleaner it fills up).
const GUEST_DEFAULT_FS: &str = "ext4,vfat,exfat,f2fs";

/// Inside the guest (hidden): the matrix on one mounted file system.
#[derive(clap::Args, Debug)]
pub struct GuestSqliteArgs {
    #[command(flatten)]
    pub args: SqliteArgs,
    /// The words the guest's /init appends (see `vm::InitWords`).
    #[arg(last = true)]
    pub init_words: Vec<String>,
}

/// `roamkv lab sqlite`: on the host's loop devices, or with `--vm` in the guest.
pub fn run_sqlite(args: &SqliteArgs) -> ExitCode {
    if !args.vm {
        return super::run(args);
    }
    match run_in_guest(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab sqlite --vm: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The sqlite options the guest repeats (everything but the host's file systems and output).
fn forwarded_options(args: &SqliteArgs) -> Vec<String> {
    let mut out = Vec::new();
    if args.quick {
        out.push("--quick".to_string());
    }
    let mut pair = |flag: &str, value: String| {
        out.push(flag.to_string());
        out.push(value);
    };
    if let Some(j) = &args.journal {
        pair("--journal", j.clone());
    }
    if let Some(op) = &args.op {
        pair("--op", op.clone());
    }
    if let Some(t) = args.transactions {
        pair("--transactions", t.to_string());
    }
    pair("--synchronous", args.synchronous.clone());
    pair("--sync-call", args.sync_call.clone());
    pair("--rows-per-tx", args.rows_per_tx.clone());
    pair("--record-bytes", args.record_bytes.to_string());
    pair("--threads", args.threads.clone());
    pair("--seed", args.seed.to_string());
    out
}

fn run_in_guest(args: &SqliteArgs) -> Result<ExitCode, LabError> {
    // Bad options fail here, before a guest boots.
    args.resolve()?;
    let names = vm::parse_guest_fs_list(args.fs.as_deref().unwrap_or(GUEST_DEFAULT_FS))?;
    require_root()?;
    let mut prefix = vm::command_prefix("sqlite");
    prefix.push("guest-sqlite".to_string());
    prefix.extend(forwarded_options(args));
    prefix.push("--".to_string());
    let guest = vm::run_guest(&prefix, &names, &vm::plain_options(args.vm_memory_mib))?;
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for fs in &guest.file_systems {
        if let Some(e) = &fs.error {
            errors.push(format!("{}: {e}", fs.fs));
        }
        rows.extend(fs.measurements.iter().cloned());
    }
    render(args, &guest.kernel, &rows, &errors)?;
    Ok(if errors.is_empty() && !rows.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The columns of the guest's table, one `row_cells` each.
const COLUMNS: [&str; 12] = [
    "fs",
    "journal",
    "sync",
    "call",
    "op",
    "tx/s",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "writes/tx",
    "writes/tx +syncfs",
    "flushes/tx",
];

/// One run as the guest wrote it (JSON of `measure::RunResult`), as table cells.
fn row_cells(run: &serde_json::Value) -> Vec<String> {
    let text = |k: &str| {
        run.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default()
    };
    let number = |v: Option<&serde_json::Value>, digits: usize| {
        v.and_then(serde_json::Value::as_f64)
            .map_or("-".to_string(), |x| format!("{x:.digits$}"))
    };
    let latency = |k: &str| number(run.get("latency_us").and_then(|l| l.get(k)), 0);
    vec![
        format!("{} (guest)", text("fs")),
        text("journal_mode"),
        text("synchronous"),
        text("sync_call"),
        text("op"),
        number(run.get("tx_per_sec"), 0),
        latency("p50"),
        latency("p99"),
        latency("p99_9"),
        number(run.get("block_writes_per_tx"), 2),
        number(run.get("block_writes_per_tx_after_syncfs"), 2),
        number(run.get("flushes_per_tx"), 2),
    ]
}

fn render(
    args: &SqliteArgs,
    kernel: &str,
    runs: &[serde_json::Value],
    errors: &[String],
) -> Result<(), LabError> {
    let rows: Vec<Vec<String>> = runs.iter().map(row_cells).collect();
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&COLUMNS, &rows)
    );
    for e in errors {
        eprintln!("guest: {e}");
    }
    let header = MachineHeader::collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let json = serde_json::json!({
        "tool": "roamkv lab sqlite --vm", "command": command, "machine": header,
        "guest_kernel": kernel, "counted_by": "the guest's /sys/block/vda/stat (untraced)",
        "runs": runs, "errors": errors,
    });
    let json_path = write_json(&args.out, "results-vm", &json)?;
    let mut html = Html::new(
        &format!(
            "roamkv lab sqlite --vm (guest kernel {kernel}, software emulation: compare guest rows with each other only)"
        ),
        &header,
    );
    html.paragraph(&format!(
        "Command: {command}. SQLite transactions per journal mode and sync call inside a qemu \
         guest; ext4 in the same guest is the control. Block writes and flushes are the virtual \
         disk's own counters, not split by kind. Errors: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("; ")
        }
    ));
    html.table(&COLUMNS, &rows);
    let html_path = args.out.join("report-vm.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

/// In the guest: every combination of the options on the file system /init mounted; the runs
/// go where /init collects them.
pub fn run_guest_sqlite(args: &GuestSqliteArgs) -> ExitCode {
    match guest_sqlite(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("guest-sqlite: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn guest_sqlite(args: &GuestSqliteArgs) -> Result<(), LabError> {
    let init = InitWords::parse(&args.init_words)?;
    let config = args.args.resolve()?;
    let target = MountedDevice::from(&init);
    let mut runs = Vec::new();
    for spec in matrix(&config) {
        eprintln!(
            "guest: {} {} sync={} {} {} x{}",
            init.fs_name,
            spec.journal_mode,
            spec.synchronous,
            spec.sync_call,
            spec.op,
            spec.rows_per_tx
        );
        runs.push(measure::run_on(&target, &spec)?);
    }
    init.write_results(&runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        args: SqliteArgs,
    }

    #[test]
    fn the_guest_parses_what_the_host_forwards() {
        let host = Wrapper::try_parse_from([
            "x",
            "--quick",
            "--journal",
            "wal",
            "--transactions",
            "7",
            "--fs",
            "f2fs",
            "--vm",
        ])
        .expect("host options");
        let mut words = vec!["x".to_string()];
        words.extend(forwarded_options(&host.args));
        let guest = Wrapper::try_parse_from(words).expect("guest options");
        let config = guest.args.resolve().expect("resolves");
        assert_eq!(config.transactions, 7);
        assert_eq!(config.journal_modes.len(), 1);
        assert!(!guest.args.vm, "the guest must not boot a guest");
    }

    #[test]
    fn a_guest_run_becomes_a_row() {
        let run = serde_json::json!({
            "fs": "f2fs", "journal_mode": "wal", "synchronous": "full", "sync_call": "fdatasync",
            "op": "insert", "tx_per_sec": 123.4, "block_writes_per_tx": 2.5,
            "block_writes_per_tx_after_syncfs": 3.0, "flushes_per_tx": 1.0,
            "latency_us": {"p50": 10.0, "p99": 20.0, "p99_9": 30.0},
        });
        let cells = row_cells(&run);
        assert_eq!(cells[0], "f2fs (guest)");
        assert_eq!(cells[5], "123");
        assert_eq!(cells[8], "30");
        assert_eq!(cells[9], "2.50");
    }
}
