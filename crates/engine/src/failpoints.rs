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

/// A test's code run at one migration step (see `FailPoints::run_at_next_migration_step`).
type StepHook = Box<dyn FnOnce() + Send>;

/// Armed failures. Shared through `Options::fail_points` (hidden: for tests).
#[derive(Default)]
pub struct FailPoints {
    migration_step: AtomicU32,
    group_commit_panic: AtomicBool,
    hook: parking_lot::Mutex<Option<(u32, StepHook)>>,
}

impl std::fmt::Debug for FailPoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailPoints")
            .field("migration_step", &self.migration_step)
            .field("group_commit_panic", &self.group_commit_panic)
            .field("hook_armed", &self.hook.lock().is_some())
            .finish()
    }
}

impl FailPoints {
    /// Makes the next migration pass fail at `step` (once).
    pub fn fail_next_migration_at(&self, step: MigrationStep) {
        self.migration_step.store(step as u32, Ordering::SeqCst);
    }

    /// Runs `hook` on the migrating thread when the next migration pass reaches `step`
    /// (once), e.g. to make other calls while a run is between its snapshot and its switch.
    /// At `ReadLog` and `Ingest` no engine lock is held (only the one-pass-at-a-time lock);
    /// at `CatchUp` the state lock is held, so the hook must not call the engine there.
    pub fn run_at_next_migration_step(
        &self,
        step: MigrationStep,
        hook: impl FnOnce() + Send + 'static,
    ) {
        *self.hook.lock() = Some((step as u32, Box::new(hook)));
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
        let hook = {
            let mut armed = self.hook.lock();
            match armed.take() {
                Some((at, hook)) if at == step as u32 => Some(hook),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(hook) = hook {
            hook();
        }
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
