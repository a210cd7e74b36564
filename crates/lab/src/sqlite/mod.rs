//! `roamkv lab sqlite`: a Mobibench for SQLite (paper 004). Insert/update/delete transactions of
//! one row (autocommit) or N rows, per journal mode, synchronous level and sync call (fsync vs
//! fdatasync, switched for real by the VFS shim in `vfs.rs`), on file systems of the lab, with
//! every block request traced and classified (db / journal-or-WAL / fs journal / metadata /
//! flushes), both while the transactions run and for the deferred write-back that `syncfs` forces.
pub mod config;
pub mod guest;
pub mod measure;
pub mod report;
pub mod vfs;
pub mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::LabError;
pub use config::SqliteConfig;
use config::{JournalMode, Op, SyncCall, Synchronous, parse_list};
use measure::{RunResult, RunSpec, run_one};
use roamkv_testbed::fixture::{self, Fixture};
use roamkv_testbed::prerequisite::require_root;
use roamkv_testbed::report::say;

#[derive(clap::Args, Debug, Clone)]
pub struct SqliteArgs {
    /// A run of a few minutes: ext4,xfs; delete,truncate,persist,wal; insert,update; 100 transactions.
    #[arg(long)]
    pub quick: bool,
    /// File systems, comma-separated, or "all". Default: all (quick: ext4,xfs).
    #[arg(long)]
    pub fs: Option<String>,
    /// Journal modes: delete,truncate,persist,memory,wal,off or "all". Default: all (quick: delete,truncate,persist,wal).
    #[arg(long)]
    pub journal: Option<String>,
    /// PRAGMA synchronous levels: off,normal,full or "all". Default: full.
    #[arg(long, default_value = "full")]
    pub synchronous: String,
    /// Sync call SQLite makes: fdatasync,fsync or "all". Default: both.
    #[arg(long, default_value = "fdatasync,fsync")]
    pub sync_call: String,
    /// Operations: insert,update,delete or "all". Default: all (quick: insert,update).
    #[arg(long)]
    pub op: Option<String>,
    /// Transactions per thread per run. Default 1000 (quick: 100).
    #[arg(long)]
    pub transactions: Option<usize>,
    /// Rows per transaction, comma-separated (1 = autocommit). Default: 1.
    #[arg(long, default_value = "1")]
    pub rows_per_tx: String,
    /// Bytes of each record's payload (paper 004: 100).
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// Thread counts, comma-separated; each thread has its own database file. Default: 1.
    #[arg(long, default_value = "1")]
    pub threads: String,
    /// Size of each file-system image in MiB.
    #[arg(long, default_value_t = 512)]
    pub image_mib: u64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "lab-results/sqlite")]
    pub out: PathBuf,
    /// Run in the qemu guest instead (Debian's stock kernel: F2FS, FAT, exFAT; ext4 in the same
    /// guest is the control). --fs then names guest file systems (default: ext4,vfat,exfat,f2fs).
    /// Untraced there: writes are counted by the virtual disk's own counters.
    #[arg(long)]
    pub vm: bool,
    /// Guest memory for --vm.
    #[arg(long, default_value_t = 1024)]
    pub vm_memory_mib: u32,
}

fn parse_usize_list(s: &str, what: &str) -> Result<Vec<usize>, LabError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: usize = part.parse().map_err(|_| LabError::Parse {
            what: what.into(),
            detail: format!("{part:?} is not a positive integer"),
        })?;
        if n == 0 {
            return Err(LabError::Parse {
                what: what.into(),
                detail: "must be at least 1".into(),
            });
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.is_empty() {
        return Err(LabError::Parse {
            what: what.into(),
            detail: "empty list".into(),
        });
    }
    Ok(out)
}

fn names<T: Copy + std::str::FromStr<Err = config::UnknownName> + PartialEq>(
    s: &str,
    all: &[T],
) -> Result<Vec<T>, LabError> {
    let v = parse_list(s, all).map_err(|e| LabError::Parse {
        what: e.what.into(),
        detail: e.to_string(),
    })?;
    if v.is_empty() {
        return Err(LabError::Parse {
            what: "list".into(),
            detail: format!("{s:?} names nothing"),
        });
    }
    Ok(v)
}

impl SqliteArgs {
    pub fn resolve(&self) -> Result<SqliteConfig, LabError> {
        let q = self.quick;
        let fs = fixture::parse_fs_list(self.fs.as_deref().unwrap_or(if q {
            "ext4,xfs"
        } else {
            "all"
        }))?;
        let journal_modes = names(
            self.journal.as_deref().unwrap_or(if q {
                "delete,truncate,persist,wal"
            } else {
                "all"
            }),
            JournalMode::all(),
        )?;
        let synchronous = names(&self.synchronous, Synchronous::all())?;
        let sync_calls = names(&self.sync_call, SyncCall::all())?;
        let ops = names(
            self.op
                .as_deref()
                .unwrap_or(if q { "insert,update" } else { "all" }),
            Op::all(),
        )?;
        let transactions = self.transactions.unwrap_or(if q { 100 } else { 1000 });
        let rows_per_tx = parse_usize_list(&self.rows_per_tx, "--rows-per-tx")?;
        let threads = parse_usize_list(&self.threads, "--threads")?;
        let spec = workload::StreamSpec {
            op: Op::Insert,
            transactions,
            rows_per_tx: rows_per_tx[0],
            record_bytes: self.record_bytes,
            seed: self.seed,
        };
        spec.validate().map_err(|e| LabError::Parse {
            what: "workload".into(),
            detail: e.to_string(),
        })?;
        if self.image_mib < 300 {
            return Err(LabError::Parse {
                what: "--image-mib".into(),
                detail: "at least 300 (XFS's minimum size)".into(),
            });
        }
        Ok(SqliteConfig {
            fs,
            journal_modes,
            synchronous,
            sync_calls,
            ops,
            transactions,
            rows_per_tx,
            record_bytes: self.record_bytes,
            threads,
            image_bytes: self.image_mib << 20,
            seed: self.seed,
        })
    }
}

/// `roamkv lab sqlite` on the host (with `--vm`, the `guest` module runs it in the qemu guest).
pub fn run(args: &SqliteArgs) -> ExitCode {
    match args
        .resolve()
        .and_then(|config| run_matrix(&config, &args.out))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv lab sqlite: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every combination of the configuration, on every file system; writes results.json and
/// report.html into `out` and prints a table.
pub fn run_matrix(config: &SqliteConfig, out: &Path) -> Result<(), LabError> {
    require_root()?;
    std::fs::create_dir_all(out).map_err(|e| LabError::io(out, e))?;
    let specs = matrix(config);
    let started = Instant::now();
    let bar = indicatif::ProgressBar::new((specs.len() * config.fs.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    let mut fixtures = Vec::new();
    for &fs in &config.fs {
        bar.set_message(format!("{fs}: mkfs"));
        let fx = match Fixture::create(fs, config.image_bytes) {
            Ok(fx) => fx,
            Err(e) => {
                say(&bar, format!("{fs}: skipped: {e}"));
                bar.inc(specs.len() as u64);
                continue;
            }
        };
        fixtures.push(serde_json::json!({
            "fs": fs.name(), "mkfs": fx.mkfs_command(), "mount_options": fx.mount_options(), "image_bytes": fx.image_bytes(),
        }));
        for spec in &specs {
            if fixture::interrupted() {
                return Err(LabError::Interrupted);
            }
            bar.set_message(format!(
                "{fs} {} sync={} {} {} x{}",
                spec.journal_mode, spec.synchronous, spec.sync_call, spec.op, spec.rows_per_tx
            ));
            let r = run_one(&fx, spec)?;
            if bar.is_hidden() {
                eprintln!(
                    "{fs} {} sync={} {} {} x{}: {:.0} tx/s, {:.2} block writes/tx",
                    spec.journal_mode,
                    spec.synchronous,
                    spec.sync_call,
                    spec.op,
                    spec.rows_per_tx,
                    r.tx_per_sec,
                    r.block_writes_per_tx
                );
            }
            results.push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    report::print_table(&results);
    write_results(config, out, started, &fixtures, &results)
}

/// Every (journal mode, synchronous, sync call, op, rows/tx, threads) of the configuration.
pub(crate) fn matrix(config: &SqliteConfig) -> Vec<RunSpec> {
    let mut specs = Vec::new();
    for &journal_mode in &config.journal_modes {
        for &synchronous in &config.synchronous {
            for &sync_call in &config.sync_calls {
                for &op in &config.ops {
                    for &rows_per_tx in &config.rows_per_tx {
                        for &threads in &config.threads {
                            specs.push(RunSpec {
                                journal_mode,
                                synchronous,
                                sync_call,
                                op,
                                transactions: config.transactions,
                                rows_per_tx,
                                record_bytes: config.record_bytes,
                                threads,
                                seed: config.seed,
                            });
                        }
                    }
                }
            }
        }
    }
    specs
}

/// results.json and report.html.
fn write_results(
    config: &SqliteConfig,
    out: &Path,
    started: Instant,
    fixtures: &[serde_json::Value],
    results: &[RunResult],
) -> Result<(), LabError> {
    let header = roamkv_testbed::report::MachineHeader::collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let value = serde_json::json!({
        "tool": "roamkv lab sqlite",
        "command": command,
        "machine": header,
        "config": config,
        "fixtures": fixtures,
        "sqlite_version": rusqlite::version(),
        "elapsed_s": started.elapsed().as_secs_f64(),
        "runs": results,
        "paper_004": {
            "ext4_block_writes_per_insert": { "delete": 9, "persist": 12 },
            "fdatasync_gain_ext4": { "insert": 0.17, "update": 0.50 },
            "note": "Galaxy S3, eMMC, Android 4.0.4 SQLite calling fsync; one 100-byte insert traced",
        },
    });
    let json = roamkv_testbed::report::write_json(out, "results", &value)?;
    let html = out.join("report.html");
    report::write_html(&html, &header, &command, results)?;
    eprintln!("wrote {} and {}", json.display(), html.display());
    Ok(())
}
