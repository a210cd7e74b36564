//! The cloud sink (`roamkv serve --sink URL`, docs/SERVER.md "The cloud sink"): it tails the
//! engine's commit log (the engine's change feed, no second queue) and writes every reading to a
//! PostgreSQL-protocol database (`postgres://…`) or a Kafka topic (`kafka://HOST:PORT[,…]/TOPIC`),
//! exactly once per reading:
//!
//! - one transaction per batch writes the readings and advances this edge's cursor, so the data
//!   and the cursor never disagree: in PostgreSQL the rows (`ON CONFLICT DO NOTHING` on the key,
//!   so a batch sent again after a crash changes nothing) and the cursor row; in Kafka the
//!   records (keyed by device) and the sink's position in the compacted offsets topic
//!   `<topic>.roamkv-offsets`, in one Kafka transaction of a producer whose transactional id
//!   comes from the edge id (kafka/: the way Kafka Connect's exactly-once source connectors keep
//!   their offsets);
//! - the engine's feed slot `cloud-sink` holds the log from the last committed batch (within
//!   its cap): after a restart of the edge or an outage of the destination, the sink resumes
//!   from the cursor the destination committed;
//! - a position from another history of the log (a restored or replaced data directory) starts
//!   a new *generation*; a position the log no longer holds (the hold was released) is a *gap*:
//!   the devices present are exported by scanning (as of a read view), then the log is tailed
//!   from where the scan began (Kafka, which has no key to make a reading sent twice harmless,
//!   records what the scan exported and leaves it out of the tail);
//! - errors a retry may cure are retried with backoff (100 ms doubling to 500 ms), so the sink
//!   resumes within about half a second of the destination accepting connections (measured in
//!   docs/BENCHMARKS.md); a destination unreachable at start is such an error;
//! - a reading written twice: the last write wins, in the table as in the engine
//!   (`schema::INSERT_READINGS`); in Kafka both writes are records, the later one last.
//!
//! Layers: `config` (what it is given and shows), `destination` (PostgreSQL or Kafka, one
//! contract: `db` and `schema`, `kafka/`), `error` and `rows` (what both share), `tail` (the
//! loop), `lag` (how far behind it is, sampled apart). The engine knows nothing of this crate.
#![deny(clippy::unwrap_used)]

mod config;
pub mod db;
mod destination;
pub mod error;
pub mod explain;
pub mod kafka;
mod lag;
pub mod rows;
pub mod schema;
mod tail;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use roamkv_engine::{Engine, LogPos};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{SLOT_NAME, SinkConfig, SinkStatus};
pub use db::redact;

/// A running sink.
pub struct Sink {
    status: Arc<Mutex<SinkStatus>>,
    cursor: watch::Receiver<Option<LogPos>>,
    /// True once the task has ended (it holds the engine until then).
    ended: watch::Receiver<bool>,
    task: parking_lot::Mutex<Option<JoinHandle<()>>>,
    /// The lag sampler (lag.rs), which ends with the task.
    lag: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Sink {
    /// Connects (making the tables, or Kafka's offsets topic, if missing) and starts tailing. A
    /// malformed URL, refused credentials, a missing database or topic or missing rights are
    /// an error here, naming the URL (without its password): they would fail every retry. A
    /// destination that cannot be reached now is normal at the edge: the sink starts
    /// disconnected and keeps trying (backoff to 500 ms) while ingest goes on.
    pub async fn start(
        engine: Arc<Engine>,
        config: SinkConfig,
        stop: watch::Receiver<bool>,
    ) -> Result<Sink, String> {
        let kafka = kafka::url::is_kafka(&config.url);
        let refused = |e: &db::DbError| {
            let check = if kafka {
                "check --sink (the brokers, the topic, and that the cluster accepts this edge)"
            } else {
                "check --sink (and that the database accepts this user)"
            };
            format!(
                "the cloud sink cannot use {}: {e}; {check}",
                redact(&config.url)
            )
        };
        db::parse_url(&config.url).map_err(|e| refused(&e))?;
        let (db, first_error) = match destination::Destination::connect(&config).await {
            Ok(db) => (Some(db), None),
            Err(e @ db::DbError::Retryable(_)) => {
                tracing::warn!(error = %e, "cloud sink: the destination cannot be reached yet; retrying");
                (None, Some(e.to_string()))
            }
            Err(e) => return Err(refused(&e)),
        };
        let status = Arc::new(Mutex::new(SinkStatus {
            state: if db.is_some() {
                "connecting"
            } else {
                "disconnected"
            }
            .into(),
            url: redact(&config.url),
            edge_id: config.edge_id.clone(),
            last_error: first_error,
            ..SinkStatus::default()
        }));
        let (cursor_tx, cursor) = watch::channel(None);
        let (ended_tx, ended) = watch::channel(false);
        let lag = tokio::spawn(lag::run(
            Arc::clone(&engine),
            Arc::clone(&status),
            cursor.clone(),
            stop.clone(),
            ended.clone(),
        ));
        let tail = tail::Tail::new(engine, config, Arc::clone(&status), cursor_tx, stop, db);
        let task = tokio::spawn(async move {
            tail::run(tail).await;
            let _ = ended_tx.send(true);
        });
        Ok(Sink {
            status,
            cursor,
            ended,
            task: parking_lot::Mutex::new(Some(task)),
            lag: parking_lot::Mutex::new(Some(lag)),
        })
    }

    pub fn status(&self) -> SinkStatus {
        self.status.lock().clone()
    }

    /// Waits until every record before `pos` is in the database (the cursor is at or past it
    /// and no snapshot is pending), for at most `timeout`.
    pub async fn wait_past(&self, pos: &LogPos, timeout: Duration) -> Result<(), String> {
        let mut cursor = self.cursor.clone();
        let wait = async {
            loop {
                if cursor.borrow().is_some_and(|c| c.is_at_or_past(pos)) {
                    return;
                }
                if cursor.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| {
            let status = self.status();
            format!(
                "the cloud sink has not reached {pos} within {} s (state {}, lag {} bytes{})",
                timeout.as_secs_f64(),
                status.state,
                status.lag_bytes,
                status
                    .last_error
                    .map(|e| format!(", last error: {e}"))
                    .unwrap_or_default()
            )
        })
    }

    /// Waits for the sink's task to end (after the stop signal); it holds the engine until then.
    pub async fn join(&self) {
        let task = self.task.lock().take();
        match task {
            Some(task) => {
                let _ = task.await;
            }
            None => {
                let mut ended = self.ended.clone();
                let _ = ended.wait_for(|e| *e).await;
            }
        }
        // The lag sampler ends with the tail; it holds the engine too, which a caller may
        // close once this returns.
        let lag = self.lag.lock().take();
        if let Some(lag) = lag {
            let _ = lag.await;
        }
    }
}
