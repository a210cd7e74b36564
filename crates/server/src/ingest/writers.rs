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
//! threads, so that one queues and writes the next group while the other waits for its
//! fdatasync (the group commit's pipeline, engine/src/group_commit.rs).
//!
//! Fences are checked here, under one shared hold for the whole call (departures/fence.rs: a fence waits
//! for the writes already past its check).

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

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
    stopped: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    job_queued: Condvar,
}

pub struct Ingest {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Ingest {
    /// Starts the ingest threads, writing to `engine`, refusing fenced devices.
    pub fn start(engine: Arc<Engine>, fences: Arc<Fences>) -> Result<Ingest, String> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            job_queued: Condvar::new(),
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
            queue.jobs.push_back(Job {
                readings,
                what,
                answer,
            });
            if queue.idle > 0 {
                self.shared.job_queued.notify_one();
            }
        }
        answered
            .await
            .map_err(|_| ApiError::internal("the ingest thread ended before it answered"))?
    }

    /// Stops taking requests; the threads write what is queued, then end (joined here:
    /// blocking, for the shutdown's last steps, before the engine closes).
    pub fn stop(&self) {
        self.shared.queue.lock().stopped = true;
        self.shared.job_queued.notify_all();
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
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
    loop {
        let jobs: Vec<Job> = {
            let mut queue = shared.queue.lock();
            while queue.jobs.is_empty() && !queue.stopped {
                queue.idle += 1;
                shared.job_queued.wait(&mut queue);
                queue.idle -= 1;
            }
            if queue.jobs.is_empty() {
                return; // stopped, and nothing left
            }
            let n = queue.jobs.len().min(INGEST_GROUP_REQUESTS_MAX);
            queue.jobs.drain(..n).collect()
        };
        write_gathered(engine, fences, jobs);
    }
}

/// Writes the jobs' batches with one engine call (each atomic on its own) and answers each.
fn write_gathered(engine: &Engine, fences: &Fences, jobs: Vec<Job>) {
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
    drop(fenced);
    drop(batches);
    drop(records);
    for (job, answer) in taken.into_iter().zip(answers) {
        // A handler that is gone (its client left) no longer wants the answer.
        let _ = job.answer.send(answer.map_err(ApiError::from_engine));
    }
}
