//! The command line of `roamkv lab commit` (`CommitArgs`) and its check into a `Plan`: every
//! list parsed and bounded before anything is made, so bad input changes nothing.
use super::model::{Device, Engine, Plan};
use super::postgres::{self, WalSettings};
use super::throttle;
use crate::LabError;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CommitArgs {
    /// A few minutes: 1, 2 and 4 sessions of 200 transactions (1 B and 512 B rows).
    #[arg(long)]
    pub quick: bool,
    /// Directory for results.json and report.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-commit")]
    pub out: PathBuf,
    /// Comma-separated engines: postgresql, sqlite, roamkv.
    #[arg(long, value_name = "LIST", default_value = "postgresql,sqlite,roamkv")]
    pub engines: String,
    /// Comma-separated log devices: fast (the loop device as it is), slow (write-throttled).
    #[arg(long, value_name = "LIST", default_value = "fast,slow")]
    pub devices: String,
    /// Comma-separated session counts (default 1,2,3,4; --quick 1,2,4).
    #[arg(long, value_name = "LIST")]
    pub sessions: Option<String>,
    /// Comma-separated transactions per session; with --row-bytes, every pair is run
    /// (default: the paper's 10000,20000,40000 x 1 B and 20000 x 512 B; --quick 200 x 1 B and 512 B).
    #[arg(long, value_name = "LIST")]
    pub transactions: Option<String>,
    /// Comma-separated row sizes in bytes (see --transactions).
    #[arg(long, value_name = "LIST")]
    pub row_bytes: Option<String>,
    /// The file system of the log device (and of PostgreSQL's data directory).
    #[arg(long, value_name = "FS", default_value = "ext4")]
    pub fs: String,
    /// Write requests per second of the slow device (about 2/N s per write + fdatasync).
    #[arg(long, value_name = "N", default_value_t = throttle::SLOW_WRITE_IOPS_DEFAULT)]
    pub slow_write_iops: u32,
    /// PostgreSQL wal_sync_method: fdatasync, open_datasync or fsync.
    #[arg(long, value_name = "METHOD", default_value = "fdatasync")]
    pub wal_sync_method: String,
    /// PostgreSQL commit_delay in microseconds (0 = off).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub commit_delay_us: u32,
    /// PostgreSQL commit_siblings (commit_delay applies only with this many other open transactions).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub commit_siblings: u32,
    /// Work outside the commit, per transaction, in ms: each session sleeps this long before
    /// each transaction, as paper 003's sessions spent most of a transaction elsewhere (0: the
    /// sessions only commit). Default: paper 003's fast-device run, (1501 s - 97 s) / 80,000
    /// transactions = 17.6 ms outside the commit per transaction (its Table 3), rounded down.
    #[arg(long, value_name = "MS", default_value_t = THINK_MS_DEFAULT)]
    pub think_ms: u64,
}

/// See `CommitArgs::think_ms`.
pub const THINK_MS_DEFAULT: u64 = 17;
/// A think time longer than this is a typo (a 40k-transaction session would take days).
const THINK_MS_MAX: u64 = 10_000;

/// Paper 003's runs: 10k/20k/40k single-row transactions of 1 B per session, and 20k of 512 B.
const PAPER_WORKLOADS: [(u64, usize); 4] = [(10_000, 1), (20_000, 1), (40_000, 1), (20_000, 512)];
const QUICK_WORKLOADS: [(u64, usize); 2] = [(200, 1), (200, 512)];
/// The lab's bound on rows per session and row size (keeps a mistyped list from filling the disk).
const TRANSACTIONS_MAX: u64 = 1_000_000;
const ROW_BYTES_MAX: usize = 64 * 1024;
const SESSIONS_MAX: u32 = 64;

fn parse_number_list<T: std::str::FromStr + PartialOrd + Copy + std::fmt::Display>(
    what: &str,
    text: &str,
    min: T,
    max: T,
) -> Result<Vec<T>, LabError> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let value: T = part.parse().map_err(|_| LabError::Parse {
            what: what.into(),
            detail: format!("{part:?} is not a number"),
        })?;
        if value < min || value > max {
            return Err(LabError::Parse {
                what: what.into(),
                detail: format!("{value} is outside {min}..={max}"),
            });
        }
        if !out.contains(&value) {
            out.push(value);
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

fn parse_named<T: Copy + PartialEq>(
    what: &str,
    text: &str,
    names: &[(&str, T)],
) -> Result<Vec<T>, LabError> {
    let valid = names.iter().map(|n| n.0).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let value = names
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(part))
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                LabError::Unsupported(format!("unknown {what} {part:?}; valid: {valid}"))
            })?;
        if !out.contains(&value) {
            out.push(value);
        }
    }
    if out.is_empty() {
        return Err(LabError::Unsupported(format!(
            "no {what} given; valid: {valid}"
        )));
    }
    Ok(out)
}

impl CommitArgs {
    /// Checks every option before anything is made (bad input changes nothing).
    pub fn plan(&self) -> Result<Plan, LabError> {
        let engines = parse_named(
            "engine",
            &self.engines,
            &[
                ("postgresql", Engine::Postgresql),
                ("sqlite", Engine::Sqlite),
                ("roamkv", Engine::Roamkv),
            ],
        )?;
        let devices = parse_named(
            "device",
            &self.devices,
            &[("fast", Device::Fast), ("slow", Device::Slow)],
        )?;
        let sessions = match &self.sessions {
            Some(list) => parse_number_list("--sessions", list, 1, SESSIONS_MAX)?,
            None if self.quick => vec![1, 2, 4],
            None => vec![1, 2, 3, 4],
        };
        let workloads = match (&self.transactions, &self.row_bytes) {
            (None, None) if self.quick => QUICK_WORKLOADS.to_vec(),
            (None, None) => PAPER_WORKLOADS.to_vec(),
            (tx, bytes) => {
                let tx = match tx {
                    Some(list) => parse_number_list("--transactions", list, 1, TRANSACTIONS_MAX)?,
                    None if self.quick => vec![QUICK_WORKLOADS[0].0],
                    None => vec![20_000],
                };
                let bytes = match bytes {
                    Some(list) => parse_number_list("--row-bytes", list, 1, ROW_BYTES_MAX)?,
                    None => vec![1],
                };
                tx.iter()
                    .flat_map(|t| bytes.iter().map(move |b| (*t, *b)))
                    .collect()
            }
        };
        if !postgres::WAL_SYNC_METHODS.contains(&self.wal_sync_method.as_str()) {
            return Err(LabError::Unsupported(format!(
                "unknown --wal-sync-method {:?}; valid: {}",
                self.wal_sync_method,
                postgres::WAL_SYNC_METHODS.join(", ")
            )));
        }
        if self.think_ms > THINK_MS_MAX {
            return Err(LabError::Unsupported(format!(
                "--think-ms must be at most {THINK_MS_MAX}"
            )));
        }
        if self.slow_write_iops == 0 {
            return Err(LabError::Unsupported(
                "--slow-write-iops must be at least 1".into(),
            ));
        }
        Ok(Plan {
            engines,
            devices,
            sessions,
            workloads,
            fs: self.fs.parse()?,
            slow_write_iops: self.slow_write_iops,
            think_ms: self.think_ms,
            postgres: WalSettings {
                sync_method: self.wal_sync_method.clone(),
                commit_delay_us: self.commit_delay_us,
                commit_siblings: self.commit_siblings,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Wrapper {
        #[command(flatten)]
        commit: CommitArgs,
    }

    fn args(extra: &[&str]) -> Result<Plan, String> {
        let mut all = vec!["x"];
        all.extend_from_slice(extra);
        let w = Wrapper::try_parse_from(all).map_err(|e| e.to_string())?;
        w.commit.plan().map_err(|e| e.to_string())
    }

    #[test]
    fn default_plan_is_the_papers() {
        let plan = args(&[]).expect("valid");
        assert_eq!(plan.workloads, PAPER_WORKLOADS.to_vec());
        assert_eq!(plan.sessions, vec![1, 2, 3, 4]);
        assert_eq!(plan.devices, vec![Device::Fast, Device::Slow]);
        assert_eq!(plan.engines.len(), 3);
        let quick = args(&["--quick"]).expect("valid");
        assert_eq!(quick.workloads, QUICK_WORKLOADS.to_vec());
    }

    #[test]
    fn explicit_lists_make_every_pair() {
        let plan = args(&[
            "--transactions",
            "10,20",
            "--row-bytes",
            "1,512",
            "--sessions",
            "2",
        ])
        .expect("valid");
        assert_eq!(plan.workloads, vec![(10, 1), (10, 512), (20, 1), (20, 512)]);
        assert_eq!(plan.sessions, vec![2]);
    }

    #[test]
    fn bad_options_are_refused_with_the_valid_names() {
        let e = args(&["--engines", "oracle"]).err().unwrap_or_default();
        assert!(e.contains("oracle") && e.contains("postgresql"), "{e}");
        let e = args(&["--devices", "ssd"]).err().unwrap_or_default();
        assert!(e.contains("fast, slow"), "{e}");
        let e = args(&["--sessions", "0"]).err().unwrap_or_default();
        assert!(e.contains("outside"), "{e}");
        let e = args(&["--transactions", "ten"]).err().unwrap_or_default();
        assert!(e.contains("not a number"), "{e}");
        let e = args(&["--wal-sync-method", "o_direct"])
            .err()
            .unwrap_or_default();
        assert!(e.contains("open_datasync"), "{e}");
        let e = args(&["--fs", "zfs"]).err().unwrap_or_default();
        assert!(e.contains("zfs"), "{e}");
        assert!(args(&["--slow-write-iops", "0"]).is_err());
    }
}
