//! The server's writes, gathered: request handlers (EdgeX and native HTTP, MQTT) hand their
//! readings to a few ingest threads, which take everything waiting at once and write it with
//! one engine call (`Engine::put_batches`: each request's readings stay one atomic batch),
//! answering each handler once the group commit has acknowledged its batch.
//!
//! Why: a write on a blocking-pool thread of its own (`spawn_blocking` + `put_batch`) cost every
//! request a thread woken for it, a park in the group commit and a wake-up back, beside the
//! tokio worker's own: at 10 readings per event those hand-offs were most of the server's CPU
//! (docs/BENCHMARKS.md, "HTTP ingest: the hand-offs"). Here a busy server wakes nobody per
//! request: the threads find the next requests queued when their last call returns. Two
//! threads, so that one gathers the next group while the other waits for its fdatasync.
//!
//! Under `sync` durability the gathering thread waits until the other's call has committed
//! before it makes its own (`Shared::gather_while_committing`): everything that arrives during
//! one fdatasync is then one group and one fdatasync after it. Taking the first request at once
//! instead made a group of it alone, the next arrivals waiting in the queue for a free thread:
//! 4 EdgeX clients made 1.3 events a commit, and each commit rewrote its 4 KiB log block on
//! the device (docs/BENCHMARKS.md, "Footprint"). The wait costs no throughput: the engine
//! would sync the gathered group only after the running fdatasync anyway (one at a time); only
//! its write (a pwritev into the page cache) no longer overlaps that fdatasync. Under `none` and
//! `periodic` a call is not a device flush, and the threads write as soon as there is work.
//!
//! A few clients then split into two cohorts that take turns (those answered by one commit
//! come back during the next), half of them a commit. So a small group also waits for company
//! (PostgreSQL's `commit_delay` and `commit_siblings`, sized from what was just seen): when a
//! call commits, the requests it answered are expected back; while the expected group is at
//! most `COMPANY_REQUESTS_MAX` requests, the thread waits for it to be queued, for at most
//! `--commit-delay-us` (2 ms by default; 0 turns the wait off). A large group (many clients, the
//! CPU the bound) never waits. The bound is the clients' round trip, not the fdatasync's time:
//! bounded by the last call's time (~0.3 ms here) the waits ran out before 4 local EdgeX
//! clients were back and a commit took 2.5 events; with 2 ms it takes 3.8, and the rate rose
//! 1.7x (fewer fdatasyncs, fewer wake-ups). Its price is latency where the clients do not come
//! straight back but others arrive (an open loop of many clients below the peak): there a
//! group waits until as many have arrived (docs/SERVER.md, "How a write reaches the engine").
//!
//! Fences are checked here, under one shared hold for the whole call (departures/fence.rs: a fence waits
//! for the writes already past its check).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use roamkv_engine::{Engine, Record};
use roamkv_wire::keyed::KeyedReading;

use crate::departures::fence::Fences;
use crate::http::error::ApiError;

/// Threads that write gathered requests: one writes while the other waits for its commit.
pub const INGEST_THREADS: usize = 2;
/// Requests one engine call takes at most; the rest wait for the next call. Bounds the time a
/// call holds the fences shared (and so how long a departure's fence waits).
pub const INGEST_GROUP_REQUESTS_MAX: usize = 512;
/// The largest group (requests) that waits for company: below it a commit's 4 KiB log block is
/// mostly rewritten bytes (a 10-reading EdgeX event is ~1.2 KB of log records).
const COMPANY_REQUESTS_MAX: usize = 16;

struct Job {
    readings: Vec<KeyedReading>,
    what: &'static str,
    answer: oneshot::Sender<Result<(), ApiError>>,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Threads waiting for a job (one is woken per job queued while any waits).
    idle: usize,
    /// Threads inside their engine call (taken jobs, not yet committed).
    committing: usize,
    /// Threads with jobs waiting for the other's commit (`gather_while_committing`) or for
    /// company: `put` wakes them once `wake_at_jobs` are queued.
    gathering: usize,
    wake_at_jobs: usize,
    /// The group expected once a call has committed (the requests it answered and those
    /// queued then), and until when it is waited for.
    company: Option<(usize, Instant)>,
    stopped: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    job_queued: Condvar,
    /// Woken when a call commits (`committing` falls) or a gathered group is full.
    commit_done: Condvar,
    /// The engine's commits are device flushes (`Durability::Sync`): gather while one runs.
    gather_while_committing: bool,
    /// The longest wait for company (`--commit-delay-us`; zero: none): a request's added
    /// latency at most, and the time a client that has gone costs the next group once (then
    /// the expected group shrinks).
    company_wait: Duration,
    /// Requests written so far (taken by an engine call): how background work sees that
    /// ingest runs (routes/export.rs).
    requests_written: AtomicU64,
}

pub struct Ingest {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Ingest {
    /// Starts the ingest threads, writing to `engine`, refusing fenced devices.
    /// `commits_flush`: the engine's durability is `sync` (each commit an fdatasync);
    /// `company_wait`: `--commit-delay-us`.
    pub fn start(
        engine: Arc<Engine>,
        fences: Arc<Fences>,
        commits_flush: bool,
        company_wait: Duration,
    ) -> Result<Ingest, String> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            job_queued: Condvar::new(),
            commit_done: Condvar::new(),
            gather_while_committing: commits_flush,
            company_wait,
            requests_written: AtomicU64::new(0),
        });
        let mut threads = Vec::with_capacity(INGEST_THREADS);
        for i in 0..INGEST_THREADS {
            let (shared, engine, fences) = (
                Arc::clone(&shared),
                Arc::clone(&engine),
                Arc::clone(&fences),
            );
            let thread = std::thread::Builder::new()
                .name(format!("roamkv-ingest-{i}"))
                .spawn(move || run(&shared, &engine, &fences))
                .map_err(|e| format!("starting an ingest thread: {e}"))?;
            threads.push(thread);
        }
        Ok(Ingest {
            shared,
            threads: Mutex::new(threads),
        })
    }

    /// Writes `readings` as one engine batch unless a device of theirs is fenced (409 naming
    /// it and what it takes no more of: `what`); returns once the batch is acknowledged.
    pub async fn put(
        &self,
        readings: Vec<KeyedReading>,
        what: &'static str,
    ) -> Result<(), ApiError> {
        let (answer, answered) = oneshot::channel();
        {
            let mut queue = self.shared.queue.lock();
            if queue.stopped {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is shutting down",
                ));
            }
            self.shared.enqueue(
                &mut queue,
                Job {
                    readings,
                    what,
                    answer,
                },
            );
        }
        answered
            .await
            .map_err(|_| ApiError::internal("the ingest thread ended before it answered"))?
    }

    /// Requests written so far: it moves while ingest runs.
    pub fn requests_written(&self) -> u64 {
        self.shared.requests_written.load(Ordering::Relaxed)
    }

    /// Stops taking requests; the threads write what is queued, then end (joined here:
    /// blocking, for the shutdown's last steps, before the engine closes).
    pub fn stop(&self) {
        self.shared.queue.lock().stopped = true;
        self.shared.job_queued.notify_all();
        self.shared.commit_done.notify_all();
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

impl Shared {
    /// Queues a job, waking an idle thread, or a gathering one once its group is there.
    fn enqueue(&self, queue: &mut Queue, job: Job) {
        queue.jobs.push_back(job);
        if queue.idle > 0 {
            self.job_queued.notify_one();
        }
        if queue.gathering > 0 && queue.jobs.len() == queue.wake_at_jobs {
            self.commit_done.notify_all();
        }
    }
}

/// A server that stops without its shutdown sequence (a start that failed part-way) still ends
/// its ingest threads, so that they let go of the engine.
impl Drop for Ingest {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An ingest thread: takes every request queued (up to `INGEST_GROUP_REQUESTS_MAX`), writes
/// them with one engine call, answers them; until stopped with nothing queued.
fn run(shared: &Shared, engine: &Engine, fences: &Fences) {
    while let Some(jobs) = take_group(shared) {
        write_gathered(shared, engine, fences, jobs);
    }
}

/// Waits for jobs (and, under `gather_while_committing`, for the other thread's call to
/// commit, then for company: see the module's doc), then takes them. `None`: stopped, and
/// nothing left.
fn take_group(shared: &Shared) -> Option<Vec<Job>> {
    let mut queue = shared.queue.lock();
    loop {
        let queued = queue.jobs.len();
        if queued == 0 {
            if queue.stopped {
                return None;
            }
            queue.idle += 1;
            shared.job_queued.wait(&mut queue);
            queue.idle -= 1;
            continue;
        }
        let gather = shared.gather_while_committing && !queue.stopped;
        if gather && queue.committing > 0 && queued < INGEST_GROUP_REQUESTS_MAX {
            queue.gathering += 1;
            queue.wake_at_jobs = INGEST_GROUP_REQUESTS_MAX;
            shared.commit_done.wait(&mut queue);
            queue.gathering -= 1;
            continue;
        }
        match queue.company {
            Some((expected, until)) if gather && queued < expected && Instant::now() < until => {
                queue.gathering += 1;
                queue.wake_at_jobs = expected;
                shared.commit_done.wait_until(&mut queue, until);
                queue.gathering -= 1;
                continue;
            }
            _ => {}
        }
        let n = queued.min(INGEST_GROUP_REQUESTS_MAX);
        queue.committing += 1;
        queue.company = None;
        return Some(queue.jobs.drain(..n).collect());
    }
}

/// A thread's engine call, counted in `Queue::committing` until it returns (or unwinds: the
/// other thread must not gather forever); on return it sets the company the next group waits
/// for.
struct Committing<'a> {
    shared: &'a Shared,
    requests: usize,
}

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        let mut queue = self.shared.queue.lock();
        queue.committing -= 1;
        let expected = self.requests + queue.jobs.len();
        let wait = self.shared.company_wait;
        queue.company = (expected <= COMPANY_REQUESTS_MAX && !wait.is_zero())
            .then(|| (expected, Instant::now() + wait));
        if queue.gathering > 0 {
            self.shared.commit_done.notify_all();
        }
    }
}

/// Writes the jobs' batches with one engine call (each atomic on its own) and answers each.
fn write_gathered(shared: &Shared, engine: &Engine, fences: &Fences, jobs: Vec<Job>) {
    let committing = Committing {
        shared,
        requests: jobs.len(),
    };
    let fenced = fences.read();
    let mut taken = Vec::with_capacity(jobs.len());
    for job in jobs {
        let devices = job.readings.iter().map(|r| r.device.as_str());
        match fenced.refuse(devices, job.what) {
            Some(refused) => {
                let _ = job.answer.send(Err(refused));
            }
            None => taken.push(job),
        }
    }
    let records: Vec<Vec<Record<'_>>> = taken
        .iter()
        .map(|job| job.readings.iter().map(KeyedReading::record).collect())
        .collect();
    let batches: Vec<&[Record<'_>]> = records.iter().map(Vec::as_slice).collect();
    let answers = engine.put_batches(&batches);
    shared
        .requests_written
        .fetch_add(batches.len() as u64, Ordering::Relaxed);
    drop(committing);
    drop(fenced);
    drop(batches);
    drop(records);
    for (job, answer) in taken.into_iter().zip(answers) {
        // A handler that is gone (its client left) no longer wants the answer.
        let _ = job.answer.send(answer.map_err(ApiError::from_engine));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn shared(gather_while_committing: bool) -> Shared {
        Shared {
            queue: Mutex::new(Queue::default()),
            job_queued: Condvar::new(),
            commit_done: Condvar::new(),
            gather_while_committing,
            company_wait: Duration::from_millis(2),
            requests_written: AtomicU64::new(0),
        }
    }

    /// Queues `n` empty jobs as `Ingest::put` does.
    fn queue_jobs(shared: &Shared, n: usize) {
        let mut queue = shared.queue.lock();
        for _ in 0..n {
            let job = Job {
                readings: Vec::new(),
                what: "test",
                answer: oneshot::channel().0,
            };
            shared.enqueue(&mut queue, job);
        }
    }

    /// Runs `take_group` on a thread; `check` sees whether it has returned, then the group's
    /// size is returned.
    fn taken_after(shared: &Shared, check: impl FnOnce(&AtomicBool)) -> usize {
        let taken = AtomicBool::new(false);
        std::thread::scope(|s| {
            let thread = s.spawn(|| {
                let jobs = take_group(shared).map_or(0, |jobs| jobs.len());
                taken.store(true, Ordering::Release);
                jobs
            });
            check(&taken);
            thread.join().expect("take_group panicked")
        })
    }

    fn settle() {
        std::thread::sleep(Duration::from_millis(50));
    }

    #[test]
    fn under_sync_a_group_gathers_until_the_other_call_commits() {
        let shared = shared(true);
        let call = Committing {
            shared: &shared,
            requests: 1,
        };
        shared.queue.lock().committing = 1;
        queue_jobs(&shared, 1);
        let n = taken_after(&shared, |taken| {
            settle();
            assert!(
                !taken.load(Ordering::Acquire),
                "took while the other committed"
            );
            queue_jobs(&shared, 3);
            settle();
            assert!(!taken.load(Ordering::Acquire));
            // The call commits: its 1 request and the 4 queued are expected (for at most
            // `company_wait`); nothing more comes, and the 4 go.
            drop(call);
        });
        assert_eq!(
            n, 4,
            "everything that arrived during the commit is one group"
        );
    }

    #[test]
    fn a_small_group_waits_for_its_company_and_goes_once_it_is_there() {
        let shared = shared(true);
        shared.queue.lock().company = Some((3, Instant::now() + Duration::from_secs(60)));
        queue_jobs(&shared, 1);
        let started = Instant::now();
        let n = taken_after(&shared, |taken| {
            settle();
            assert!(!taken.load(Ordering::Acquire), "went without its company");
            queue_jobs(&shared, 2);
        });
        assert_eq!(n, 3);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "woken, not timed out"
        );
    }

    #[test]
    fn company_is_waited_for_at_most_until_its_deadline() {
        let shared = shared(true);
        shared.queue.lock().company = Some((5, Instant::now() + Duration::from_millis(100)));
        queue_jobs(&shared, 2);
        assert_eq!(taken_after(&shared, |_| {}), 2);
    }

    #[test]
    fn a_large_group_expects_no_company() {
        let shared = shared(true);
        shared.queue.lock().committing = 1;
        let call = Committing {
            shared: &shared,
            requests: COMPANY_REQUESTS_MAX,
        };
        queue_jobs(&shared, 1);
        drop(call);
        assert!(shared.queue.lock().company.is_none());
        assert_eq!(taken_after(&shared, |_| {}), 1);
    }

    #[test]
    fn a_commit_delay_of_zero_expects_no_company() {
        let mut shared = shared(true);
        shared.company_wait = Duration::ZERO;
        shared.queue.lock().committing = 1;
        let call = Committing {
            shared: &shared,
            requests: 1,
        };
        queue_jobs(&shared, 1);
        drop(call);
        assert!(shared.queue.lock().company.is_none());
        assert_eq!(taken_after(&shared, |_| {}), 1);
    }

    #[test]
    fn without_sync_a_thread_writes_at_once() {
        let shared = shared(false);
        {
            let mut queue = shared.queue.lock();
            queue.committing = 1;
            queue.company = Some((10, Instant::now() + Duration::from_secs(60)));
        }
        queue_jobs(&shared, 1);
        assert_eq!(taken_after(&shared, |_| {}), 1);
    }

    #[test]
    fn stopping_ends_the_gathering_and_the_queue_is_written() {
        let shared = shared(true);
        shared.queue.lock().committing = 1;
        queue_jobs(&shared, 2);
        let n = taken_after(&shared, |taken| {
            settle();
            assert!(!taken.load(Ordering::Acquire));
            shared.queue.lock().stopped = true;
            shared.commit_done.notify_all();
        });
        assert_eq!(n, 2);
    }
}
