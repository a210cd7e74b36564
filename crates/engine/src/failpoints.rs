//! Test hooks that make one step of a background job fail, so tests can prove that a job which
//! fails part-way leaves the state as it found it and is retried. Free when unused: one atomic
//! load per migration step.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::error::{Error, Result};

/// The steps of a migration pass (docs/ENGINE.md, "Migration").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MigrationStep {
    /// Reading the moving devices' records from the log.
    ReadLog = 1,
    /// Ingesting the sorted run into the lower tier.
    Ingest = 2,
    /// Reading the records written while the run was ingested (the catch-up).
    CatchUp = 3,
}

/// Armed failures. Shared through `Options::fail_points` (hidden: for tests).
#[derive(Debug, Default)]
pub struct FailPoints {
    migration_step: AtomicU32,
    group_commit_panic: AtomicBool,
}

impl FailPoints {
    /// Makes the next migration pass fail at `step` (once).
    pub fn fail_next_migration_at(&self, step: MigrationStep) {
        self.migration_step.store(step as u32, Ordering::SeqCst);
    }

    /// Makes the next group commit panic while its leader holds the state lock (once).
    pub fn panic_in_next_group_commit(&self) {
        self.group_commit_panic.store(true, Ordering::SeqCst);
    }

    pub(crate) fn check_group_commit_panic(&self) {
        if self.group_commit_panic.load(Ordering::Relaxed)
            && self.group_commit_panic.swap(false, Ordering::SeqCst)
        {
            panic!("injected panic in a group commit");
        }
    }

    pub(crate) fn check(&self, step: MigrationStep) -> Result<()> {
        if self.migration_step.load(Ordering::Relaxed) == step as u32
            && self
                .migration_step
                .compare_exchange(step as u32, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Err(Error::Lower(format!(
                "injected failure at migration step {step:?}"
            )));
        }
        Ok(())
    }
}
