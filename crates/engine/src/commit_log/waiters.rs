//! The writers parked in the group commit, and which of them a change wakes.
//!
//! A writer waits in `group_commit::wait_for` until its ticket is committed, taking the writer's
//! or the syncer's role when it finds one free with work. Woken all together at every change
//! (a condition variable's `notify_all`), 32 parked writers woke 64 times per group to find,
//! all but one or two of them, nothing to do: on 2 cores the server's ingest spent a third of
//! its CPU in those wake-ups (docs/BENCHMARKS.md, "HTTP ingest, the wake-ups"). A change now
//! wakes only:
//!
//! - the writers whose tickets it committed (they return);
//! - one writer for the syncer's role, if it is free with groups written, and one whose group
//!   is still queued for the writer's role, if that is free with a queue — unless the thread
//!   that made the change goes on to take that role itself (it loops in `wait_for`).
//!
//! Every decision is made under the state lock, by the thread that changed what it depends
//! on, and a writer parks only after registering under the same lock: a wake cannot fall
//! between a writer's check and its park. A parked writer still re-checks every
//! `COMMIT_PARK_RECHECK_MS`; a re-check that finds work it was not woken for counts in
//! `Stats::commit_wakes_missed` (the tests hold it at 0).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::commit_log::log_state::LogState;

/// What a writer waiting for its commit reads of the log's state (under the state lock):
/// `wait_for`'s next step and the wake decision both come from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Roles {
    /// Every ticket up to this one is committed.
    pub committed_ticket: u64,
    /// The last ticket of the newest group written and not yet taken by a syncer (None: no such
    /// group).
    pub written_ticket: Option<u64>,
    pub writer_active: bool,
    pub syncer_active: bool,
    pub queued_groups: bool,
}

/// What a waiting writer does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Its ticket is committed: it returns.
    Committed,
    /// It takes the syncer's role (for its own group, or for groups written ahead of it).
    Sync,
    /// It takes the writer's role (its group is not written yet).
    Write,
    /// Nothing to do: it yields or parks.
    Wait,
}

impl Roles {
    pub fn of(log: &LogState) -> Roles {
        Roles {
            committed_ticket: log.committed_ticket,
            written_ticket: log.written.back().map(|g| g.last_ticket),
            writer_active: log.writer_active,
            syncer_active: log.syncer_active,
            queued_groups: !log.queue.is_empty(),
        }
    }

    /// The syncer's role is free and has groups to sync.
    fn syncer_wanted(&self) -> bool {
        !self.syncer_active && self.written_ticket.is_some()
    }

    /// The writer's role is free and has a queue to write.
    fn writer_wanted(&self) -> bool {
        !self.writer_active && self.queued_groups
    }

    /// The next step of a writer holding `ticket`: its own written group synced first, then the
    /// queue written (unless its group is written already), then groups ahead of it synced.
    pub fn step(&self, ticket: u64) -> Step {
        let mine_written = self.written_ticket.is_some_and(|t| t >= ticket);
        if ticket <= self.committed_ticket {
            Step::Committed
        } else if !self.syncer_active && mine_written {
            Step::Sync
        } else if self.writer_wanted() && !mine_written {
            Step::Write
        } else if self.syncer_wanted() {
            Step::Sync
        } else {
            Step::Wait
        }
    }
}

/// One parked writer's wake-up: a flag set under the state lock, then its thread unparked.
pub(crate) struct Wake {
    woken: AtomicBool,
    thread: Thread,
}

impl Wake {
    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.thread.unpark();
    }

    pub fn is_woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }

    /// Parks the calling thread (the one that made this `Wake`) until woken, or for at most
    /// `recheck`. Called without the state lock.
    pub fn park(&self, recheck: Duration) {
        let deadline = Instant::now() + recheck;
        while !self.is_woken() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::park_timeout(left);
        }
    }
}

thread_local! {
    /// A thread's wake-up, made once and reused for every park.
    static WAKE: Arc<Wake> = Arc::new(Wake {
        woken: AtomicBool::new(false),
        thread: std::thread::current(),
    });
}

struct Parked {
    ticket: u64,
    wake: Arc<Wake>,
}

/// The writers parked in the group commit (at most one entry per thread).
#[derive(Default)]
pub(crate) struct CommitWaiters {
    parked: Vec<Parked>,
}

impl CommitWaiters {
    /// Registers the calling thread as parked for `ticket` (under the state lock; the caller
    /// then parks with the lock released and calls `forget` when it has it again).
    pub fn register(&mut self, ticket: u64) -> Arc<Wake> {
        let wake = WAKE.with(Arc::clone);
        wake.woken.store(false, Ordering::Relaxed);
        self.parked.push(Parked {
            ticket,
            wake: Arc::clone(&wake),
        });
        wake
    }

    /// Removes the calling thread's entry, if a wake did not already.
    pub fn forget(&mut self, wake: &Arc<Wake>) {
        self.parked.retain(|p| !Arc::ptr_eq(&p.wake, wake));
    }

    /// Wakes every parked writer (the engine is poisoned: each must see it).
    pub fn wake_all(&mut self) {
        for parked in self.parked.drain(..) {
            parked.wake.wake();
        }
    }

    /// Wakes the writers `roles` lets go on (see the module's comment). `changer`: the ticket
    /// of the writer that made the change; it goes on looping in `wait_for`, and nobody is
    /// woken for a role it takes itself (none once its own ticket is committed).
    pub fn wake(&mut self, roles: &Roles, changer: u64) {
        let woken = self.woken_by(roles, changer);
        if woken.is_empty() {
            return;
        }
        let mut i = 0;
        self.parked.retain(|parked| {
            let keep = !woken.contains(&i);
            i += 1;
            if !keep {
                parked.wake.wake();
            }
            keep
        });
    }

    /// The indexes in `parked` of the writers to wake.
    fn woken_by(&self, roles: &Roles, changer: u64) -> Vec<usize> {
        let steps: Vec<Step> = self.parked.iter().map(|p| roles.step(p.ticket)).collect();
        let mut woken: Vec<usize> = (0..steps.len())
            .filter(|&i| steps[i] == Step::Committed)
            .collect();
        let changer_step = roles.step(changer);
        let lowest = |eligible: &dyn Fn(Step) -> bool, woken: &[usize]| {
            (0..steps.len())
                .filter(|i| !woken.contains(i) && eligible(steps[*i]))
                .min_by_key(|&i| self.parked[i].ticket)
        };
        if roles.writer_wanted()
            && changer_step != Step::Write
            && let Some(i) = lowest(&|s| s == Step::Write, &woken)
        {
            woken.push(i);
        }
        if roles.syncer_wanted() && changer_step != Step::Sync {
            // One whose next step is the sync, else any other: once the writer's role is taken,
            // it syncs the groups ahead of it.
            let syncer = lowest(&|s| s == Step::Sync, &woken)
                .or_else(|| lowest(&|s| s != Step::Committed, &woken));
            woken.extend(syncer);
        }
        woken
    }

    /// Whether a writer holding `ticket` has something to do now: for the re-check after a
    /// park that no wake ended.
    pub fn has_work(roles: &Roles, ticket: u64) -> bool {
        roles.step(ticket) != Step::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> Roles {
        Roles {
            committed_ticket: 10,
            written_ticket: None,
            writer_active: false,
            syncer_active: false,
            queued_groups: false,
        }
    }

    fn waiters(tickets: &[u64]) -> CommitWaiters {
        let mut w = CommitWaiters::default();
        for &ticket in tickets {
            w.parked.push(Parked {
                ticket,
                wake: Arc::new(Wake {
                    woken: AtomicBool::new(false),
                    thread: std::thread::current(),
                }),
            });
        }
        w
    }

    /// A changer whose ticket is committed (it returns: it takes no role).
    const RETURNING: u64 = 0;

    fn woken(w: &CommitWaiters, roles: &Roles, changer: u64) -> Vec<u64> {
        let mut t: Vec<u64> = w
            .woken_by(roles, changer)
            .into_iter()
            .map(|i| w.parked[i].ticket)
            .collect();
        t.sort_unstable();
        t
    }

    #[test]
    fn a_commit_wakes_exactly_the_committed() {
        let w = waiters(&[12, 5, 10, 25, 11]);
        assert_eq!(woken(&w, &roles(), RETURNING), vec![5, 10]);
    }

    #[test]
    fn a_free_role_with_work_wakes_one_writer_for_it() {
        // Groups written up to ticket 14, a queue after that.
        let w = waiters(&[25, 15, 22, 12]);
        let r = Roles {
            written_ticket: Some(14),
            queued_groups: true,
            ..roles()
        };
        // The syncer: 12 (its own group is written); the writer: the lowest not written (15).
        assert_eq!(woken(&w, &r, RETURNING), vec![12, 15]);
        // Roles taken: nobody.
        let busy = Roles {
            writer_active: true,
            syncer_active: true,
            ..r
        };
        assert!(woken(&w, &busy, RETURNING).is_empty());
    }

    #[test]
    fn nobody_is_woken_for_a_role_the_changer_takes() {
        let w = waiters(&[15, 22]);
        let r = Roles {
            written_ticket: Some(14),
            ..roles()
        };
        // The changer (ticket 14, written, not committed) syncs: nobody is woken for it.
        assert!(woken(&w, &r, 14).is_empty());
        // A committed changer returns: one is woken to sync (the groups ahead of it).
        assert_eq!(woken(&w, &r, 9), vec![15]);
        // A changer whose group is queued writes; the syncer's role still wants somebody.
        let both = Roles {
            queued_groups: true,
            ..r
        };
        assert_eq!(both.step(30), Step::Write);
        assert_eq!(woken(&w, &both, 30), vec![15]);
    }

    #[test]
    fn no_waiter_that_would_write_means_no_writer_is_woken() {
        // Every parked writer's group is written; the queue's writers are all running.
        let w = waiters(&[12]);
        let r = Roles {
            written_ticket: Some(14),
            syncer_active: true,
            queued_groups: true,
            ..roles()
        };
        assert_eq!(r.step(12), Step::Wait);
        assert!(woken(&w, &r, RETURNING).is_empty());
    }

    #[test]
    fn steps_follow_wait_for_s_order() {
        let r = Roles {
            written_ticket: Some(14),
            queued_groups: true,
            ..roles()
        };
        assert_eq!(r.step(10), Step::Committed);
        assert_eq!(r.step(12), Step::Sync); // its own group written: sync first
        assert_eq!(r.step(20), Step::Write);
        let writing = Roles {
            writer_active: true,
            ..r
        };
        assert_eq!(writing.step(20), Step::Sync); // the groups ahead of it
        let all_busy = Roles {
            syncer_active: true,
            ..writing
        };
        assert_eq!(all_busy.step(20), Step::Wait);
        assert!(!CommitWaiters::has_work(&all_busy, 20));
        assert!(CommitWaiters::has_work(&all_busy, 3));
    }
}
