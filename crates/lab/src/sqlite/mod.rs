//! `roamkv lab sqlite`: a Mobibench for SQLite (paper 004). Insert/update/delete transactions of
//! one row (autocommit) or N rows, per journal mode, synchronous level and sync call (fsync vs
//! fdatasync, switched for real by the VFS shim in `vfs.rs`), on file systems of the lab, with
//! every block request traced and classified (db / journal-or-WAL / fs journal / metadata /
//! flushes), both while the transactions run and for the deferred write-back that `syncfs` forces.
pub mod config;
pub mod measure;
pub mod vfs;
pub mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::LabError;
use crate::fixture::{self, FsSpec};
use config::{JournalMode, Op, SyncCall, Synchronous, parse_list};

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
}

/// The resolved matrix of one invocation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SqliteConfig {
    pub fs: Vec<FsSpec>,
    pub journal_modes: Vec<JournalMode>,
    pub synchronous: Vec<Synchronous>,
    pub sync_calls: Vec<SyncCall>,
    pub ops: Vec<Op>,
    pub transactions: usize,
    pub rows_per_tx: Vec<usize>,
    pub record_bytes: usize,
    pub threads: Vec<usize>,
    pub image_bytes: u64,
    pub seed: u64,
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

pub fn run(args: &SqliteArgs) -> ExitCode {
    match args
        .resolve()
        .and_then(|config| measure::run_matrix(&config, &args.out))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv lab sqlite: {e}");
            ExitCode::FAILURE
        }
    }
}
