//! Test hooks that make one step of a maintenance pass fail (or run a test's code there), so
//! tests can prove that a pass interrupted at any step — by an error, or by a crash right
//! after it — leaves a state that opens with every acknowledged reading. Free when unused: one
//! atomic load per step.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::model::error::{Error, Result};

/// The steps of a pass (docs/ENGINE.md, "Leaving the log"). A failure armed at a step happens
/// right after it: the step's effects are on disk, the next step's are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PassStep {
    /// The readings to move were read from the log (nothing written yet).
    Read = 1,
    /// The run's file is written (not yet part of the lower tier).
    RunWritten = 2,
    /// The run is ingested into the lower tier (the catalog does not name it yet).
    Ingested = 3,
    /// The catalog batch is durable (the in-memory state has not switched). No path of the
    /// engine fails here: a failure armed at it stops the engine as a crash would (it is
    /// poisoned; tests abandon and reopen it).
    Cataloged = 4,
    /// The in-memory state switched (the segment is not retired yet).
    Committed = 5,
    /// Segments that left the log are retired.
    Retired = 6,
    /// Dead windows are dropped.
    WindowsDropped = 7,
}

/// A test's code run at one pass step (see `FailPoints::run_at_next_pass_step`).
type StepHook = Box<dyn FnOnce() + Send>;

/// Armed failures. Shared through `Options::fail_points` (hidden: for tests).
#[derive(Default)]
pub struct FailPoints {
    pass_step: AtomicU32,
    group_commit_panic: AtomicBool,
    catalog_write: AtomicBool,
    index_apply_delay_us: AtomicU64,
    group_commit_delay_us: AtomicU64,
    hook: parking_lot::Mutex<Option<(u32, StepHook)>>,
}

impl std::fmt::Debug for FailPoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailPoints")
            .field("pass_step", &self.pass_step)
            .field("group_commit_panic", &self.group_commit_panic)
            .field("catalog_write", &self.catalog_write)
            .field("index_apply_delay_us", &self.index_apply_delay_us)
            .field("group_commit_delay_us", &self.group_commit_delay_us)
            .field("hook_armed", &self.hook.lock().is_some())
            .finish()
    }
}

impl FailPoints {
    /// Makes the next pass fail right after `step` (once).
    pub fn fail_next_pass_at(&self, step: PassStep) {
        self.pass_step.store(step as u32, Ordering::SeqCst);
    }

    /// Runs `hook` on the maintenance thread when the next pass reaches `step` (once), e.g. to
    /// make other calls while a run is between its snapshot and its switch. No engine lock is
    /// held at any step (only the one-pass-at-a-time lock): the hook may call the engine, but
    /// not `maintain`.
    pub fn run_at_next_pass_step(&self, step: PassStep, hook: impl FnOnce() + Send + 'static) {
        *self.hook.lock() = Some((step as u32, Box::new(hook)));
    }

    /// Makes the next pass's catalog batch fail as the lower tier's write would (once): nothing
    /// of it is durable, and the pass rolls back. (`PassStep::Cataloged` is the other case: the
    /// batch is durable and the process stops.)
    pub fn fail_next_catalog_write(&self) {
        self.catalog_write.store(true, Ordering::SeqCst);
    }

    pub(crate) fn check_catalog_write(&self) -> Result<()> {
        if self.catalog_write.load(Ordering::Relaxed)
            && self.catalog_write.swap(false, Ordering::SeqCst)
        {
            return Err(Error::Lower("injected failure of a catalog batch".into()));
        }
        Ok(())
    }

    /// Makes the next group commit panic while its syncer holds the state lock (once).
    pub fn panic_in_next_group_commit(&self) {
        self.group_commit_panic.store(true, Ordering::SeqCst);
    }

    /// Makes the index's thread wait `delay` before it applies each group (until set back to
    /// zero): the index lags the log, as it does on a loaded machine, for tests of
    /// read-your-writes and of recovery from a log the index had not caught up with.
    pub fn slow_index_apply(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.index_apply_delay_us.store(us, Ordering::SeqCst);
    }

    /// The index's thread, before it applies a group: waits out `slow_index_apply`'s delay, in
    /// steps short enough to see the engine stop (`stopped`).
    pub(crate) fn delay_index_apply(&self, stopped: impl Fn() -> bool) {
        let delay_us = self.index_apply_delay_us.load(Ordering::Relaxed);
        if delay_us == 0 {
            return;
        }
        let started = Instant::now();
        let delay = Duration::from_micros(delay_us);
        while !stopped() && started.elapsed() < delay {
            std::thread::sleep((delay - started.elapsed()).min(Duration::from_millis(5)));
        }
    }

    /// Makes every group commit wait `delay` before its fdatasync (until set back to zero), as
    /// a slow disk would: writers wait that much longer for their acknowledgement, for tests of
    /// what a server does with work that arrives faster than the engine takes it.
    pub fn slow_group_commit(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.group_commit_delay_us.store(us, Ordering::SeqCst);
    }

    /// The syncer, without the state lock, before it syncs a group: waits out
    /// `slow_group_commit`'s delay.
    pub(crate) fn delay_group_commit(&self) {
        let delay_us = self.group_commit_delay_us.load(Ordering::Relaxed);
        if delay_us > 0 {
            std::thread::sleep(Duration::from_micros(delay_us));
        }
    }

    pub(crate) fn check_group_commit_panic(&self) {
        if self.group_commit_panic.load(Ordering::Relaxed)
            && self.group_commit_panic.swap(false, Ordering::SeqCst)
        {
            panic!("injected panic in a group commit");
        }
    }

    pub(crate) fn check(&self, step: PassStep) -> Result<()> {
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
        if self.pass_step.load(Ordering::Relaxed) == step as u32
            && self
                .pass_step
                .compare_exchange(step as u32, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Err(Error::Lower(format!(
                "injected failure after pass step {step:?}"
            )));
        }
        Ok(())
    }
}

/// The environment variable naming the crash points armed in this process (`crash_point`):
/// `NAME` or `NAME=N` (the Nth time it is reached), several separated by commas.
pub const CRASH_POINTS_ENV: &str = "ROAMKV_CRASH_POINTS";

/// Kills the process with SIGKILL, as `kill -9` would (no destructors, no flushing, no signal
/// handler), when the crash point `name` is armed in `ROAMKV_CRASH_POINTS` and reached for the
/// Nth time. For the crash tests of the server's handoff and the cloud sink, which run the
/// real binary; costs a lookup in a map read once per process.
pub fn crash_point(name: &str) {
    use std::collections::HashMap;
    use std::sync::OnceLock;
    static ARMED: OnceLock<parking_lot::Mutex<HashMap<String, u64>>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let spec = std::env::var(CRASH_POINTS_ENV).unwrap_or_default();
        let map = spec
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|item| match item.trim().split_once('=') {
                Some((n, count)) => (n.to_string(), count.parse().unwrap_or(1)),
                None => (item.trim().to_string(), 1),
            })
            .collect();
        parking_lot::Mutex::new(map)
    });
    let mut armed = armed.lock();
    if let Some(left) = armed.get_mut(name) {
        *left = left.saturating_sub(1);
        if *left == 0 {
            eprintln!("roamkv: crash point {name} reached: SIGKILL");
            // SAFETY: kill(2) on our own pid takes no pointers; SIGKILL cannot be caught, so
            // nothing of this process runs after it is delivered.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            std::process::abort();
        }
    }
}
