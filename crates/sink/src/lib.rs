//! The cloud sink (`roamkv serve --sink postgres://...`, docs/SERVER.md "The cloud sink"): it
//! tails the engine's commit log (the engine's change feed, no second queue) and writes every
//! reading to a PostgreSQL-protocol database, exactly once per (device, sensor, ts):
//!
//! - one transaction per batch inserts the rows (`ON CONFLICT DO NOTHING` on the key) and
//!   advances this edge's cursor row, so the table and the cursor never disagree, and a batch
//!   sent again after a crash changes nothing;
//! - the engine's feed slot `cloud-sink` holds the log from the last committed batch (within
//!   its cap): after a restart of the edge or an outage of the database, the sink resumes from
//!   the cursor in the database;
//! - a position from another history of the log (a restored or replaced data directory) starts
//!   a new *generation*; a position the log no longer holds (the hold was released) is a *gap*:
//!   the devices present are exported by scanning, then the log is tailed from where the scan
//!   began;
//! - errors a retry may cure are retried with backoff (100 ms doubling to 500 ms), so the sink
//!   resumes within about half a second of the database accepting connections (measured in
//!   docs/BENCHMARKS.md); a database unreachable at start is such an error;
//! - a reading written twice: the last write wins, in the table as in the engine
//!   (`schema::INSERT_READINGS`).
//!
//! Layers: `config` (what it is given and shows), `schema` (the SQL), `db` (connection,
//! transactions, errors), `tail` (the loop), `lag` (how far behind it is, sampled apart). The engine knows nothing of this crate.
#![deny(clippy::unwrap_used)]

mod config;
pub mod db;
pub mod explain;
mod lag;
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
    /// Connects (making the tables if missing) and starts tailing. A malformed URL, refused
    /// credentials, a missing database or missing rights are an error here, naming the URL
    /// (without its password): they would fail every retry. A database that cannot be reached
    /// now is normal at the edge: the sink starts disconnected and keeps trying (backoff to
    /// 500 ms) while ingest goes on.
    pub async fn start(
        engine: Arc<Engine>,
        config: SinkConfig,
        stop: watch::Receiver<bool>,
    ) -> Result<Sink, String> {
        let refused = |e: &db::DbError| {
            format!(
                "the cloud sink cannot use {}: {e}; check --sink (and that the database \
                 accepts this user)",
                redact(&config.url)
            )
        };
        db::parse_url(&config.url).map_err(|e| refused(&e))?;
        let (db, first_error) = match db::Db::connect(&config).await {
            Ok(db) => (Some(db), None),
            Err(e @ db::DbError::Retryable(_)) => {
                tracing::warn!(error = %e, "cloud sink: the database cannot be reached yet; retrying");
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
