//! Paper 004's steps, stock stack to every fix, with the paper's figures beside each, and the
//! one SQLite insert every step measures; what a step's measurement is (`StepResult`).
use crate::sqlite::config::{JournalMode, Op, SyncCall, Synchronous};
use crate::sqlite::measure::RunSpec;
use roamkv_testbed::fixture::FsSpec;

/// One step of the table.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Step {
    pub name: &'static str,
    pub fs: FsSpec,
    pub journal_mode: JournalMode,
    pub sync_call: SyncCall,
    /// Paper 004's inserts/s for this step where its text gives one (39 stock; +17 % fdatasync;
    /// +30 % external journal; +53 % fdatasync + external journal + polling; 92 all on EXT4).
    pub paper_inserts_per_s: Option<f64>,
}

/// Paper 004's stock Android stack: 39 inserts/s (section 7).
pub(super) const PAPER_STOCK: f64 = 39.0;

pub fn steps() -> Vec<Step> {
    let step = |name, fs, journal_mode, sync_call, paper| Step {
        name,
        fs,
        journal_mode,
        sync_call,
        paper_inserts_per_s: paper,
    };
    vec![
        step(
            "stock: ext4 ordered, TRUNCATE, fsync",
            FsSpec::Ext4,
            JournalMode::Truncate,
            SyncCall::Fsync,
            Some(PAPER_STOCK),
        ),
        step(
            "+ fdatasync",
            FsSpec::Ext4,
            JournalMode::Truncate,
            SyncCall::Fdatasync,
            Some(PAPER_STOCK * 1.17),
        ),
        step(
            "+ external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Truncate,
            SyncCall::Fsync,
            Some(PAPER_STOCK * 1.30),
        ),
        step(
            "+ WAL",
            FsSpec::Ext4,
            JournalMode::Wal,
            SyncCall::Fsync,
            None,
        ),
        step(
            "fdatasync + external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Truncate,
            SyncCall::Fdatasync,
            // The paper's +53 % includes polled I/O, which this row does not.
            Some(PAPER_STOCK * 1.53),
        ),
        step(
            "all on ext4: WAL + fdatasync + external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Wal,
            SyncCall::Fdatasync,
            Some(92.0),
        ),
    ]
}

/// The paper's best: F2FS with every fix, 157 inserts/s. This kernel has no F2FS; the row is
/// reported as not run, with the paper's figure beside it.
pub(super) const PAPER_F2FS_ALL: f64 = 157.0;

#[derive(Clone, Debug, serde::Serialize)]
pub struct StepResult {
    pub step: Step,
    pub inserts_per_s: f64,
    /// 1e6 / median latency (robust to the stalls a shared host adds to the mean).
    pub inserts_per_s_at_p50: f64,
    pub block_writes_per_insert: f64,
    pub block_writes_per_insert_after_syncfs: f64,
    pub flushes_per_insert: f64,
    pub error: Option<String>,
}

/// One single-row insert per transaction, 100 B, synchronous FULL: paper 004's measurement.
pub(super) fn insert_spec(
    journal_mode: JournalMode,
    sync_call: SyncCall,
    inserts: usize,
) -> RunSpec {
    RunSpec {
        journal_mode,
        synchronous: Synchronous::Full,
        sync_call,
        op: Op::Insert,
        transactions: inserts,
        rows_per_tx: 1,
        record_bytes: 100,
        threads: 1,
        seed: 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_start_at_the_stock_stack_and_cite_the_paper() {
        let s = steps();
        assert_eq!(s[0].fs, FsSpec::Ext4);
        assert_eq!(s[0].journal_mode, JournalMode::Truncate);
        assert_eq!(s[0].sync_call, SyncCall::Fsync);
        assert_eq!(s[0].paper_inserts_per_s, Some(39.0));
        assert_eq!(s.last().and_then(|x| x.paper_inserts_per_s), Some(92.0));
    }
}
