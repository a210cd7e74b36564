//! The cloud sink of `roamkv serve --sink postgres://...` (docs/SERVER.md, "The cloud sink"): it
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
//! - errors a retry may cure are retried with backoff (100 ms doubling to 1 s), so the sink
//!   resumes within a second of the database accepting connections.
//!
//! Layers: `schema` (the SQL), `db` (connection, transactions, errors), `tail` (the loop). The
//! engine knows nothing of this crate; the server starts it.
#![deny(clippy::unwrap_used)]

pub mod db;
pub mod schema;
mod tail;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use roamkv_engine::{Engine, LogPos};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use db::redact;

/// The engine feed slot the sink holds the log with.
pub const SLOT_NAME: &str = "cloud-sink";

/// How the sink runs.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// `postgres://user:password@host:port/database` (or the key=value form). No TLS: reach a
    /// remote database through a TLS proxy or an SSH tunnel.
    pub url: String,
    /// This edge's identity (the server's `edge.json`): the cursor row's key.
    pub edge_id: String,
    /// Readings per transaction at most.
    pub batch_rows: usize,
    /// Log bytes read per batch at most.
    pub batch_bytes: usize,
    /// How often a caught-up sink looks for new records.
    pub poll_interval: Duration,
}

impl SinkConfig {
    pub fn new(url: &str, edge_id: &str) -> SinkConfig {
        SinkConfig {
            url: url.to_string(),
            edge_id: edge_id.to_string(),
            batch_rows: 5_000,
            batch_bytes: 4 << 20,
            poll_interval: Duration::from_millis(50),
        }
    }
}

/// What the sink is doing, for metrics, the status page and `GET /api/roamkv/v1/sink`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SinkStatus {
    /// "connecting", "snapshot", "tailing", "disconnected", "stopped".
    pub state: String,
    pub url: String,
    pub edge_id: String,
    pub generation: i64,
    /// The position of the last committed batch (the cursor row's).
    pub cursor: Option<String>,
    /// Log bytes from the cursor to the log's end.
    pub lag_bytes: u64,
    /// Seconds since the oldest record not yet in the database was written (0 when caught up).
    pub lag_seconds: f64,
    pub rows_total: u64,
    pub batches_total: u64,
    /// Readings exported by scanning (first start, gaps, new generations).
    pub snapshot_rows_total: u64,
    pub retries_total: u64,
    pub gaps_total: u64,
    pub generations_started: u64,
    pub last_error: Option<String>,
}

/// A running sink.
pub struct Sink {
    status: Arc<Mutex<SinkStatus>>,
    cursor: watch::Receiver<Option<LogPos>>,
    task: JoinHandle<()>,
}

impl Sink {
    /// Connects (making the tables if missing) and starts tailing. A database that cannot be
    /// reached now is an error here, naming the URL (without its password), not a silent
    /// stall; later outages are retried.
    pub async fn start(
        engine: Arc<Engine>,
        config: SinkConfig,
        stop: watch::Receiver<bool>,
    ) -> Result<Sink, String> {
        let db = db::Db::connect(&config.url, &config.edge_id)
            .await
            .map_err(|e| {
                format!(
                    "the cloud sink cannot use {}: {e}; check --sink (and that the database \
                     accepts this user)",
                    redact(&config.url)
                )
            })?;
        let status = Arc::new(Mutex::new(SinkStatus {
            state: "connecting".into(),
            url: redact(&config.url),
            edge_id: config.edge_id.clone(),
            ..SinkStatus::default()
        }));
        let (cursor_tx, cursor) = watch::channel(None);
        let task = tokio::spawn(tail::run(tail::Tail::new(
            engine,
            config,
            Arc::clone(&status),
            cursor_tx,
            stop,
            db,
        )));
        Ok(Sink {
            status,
            cursor,
            task,
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

    /// Waits for the sink's task to end (after the stop signal).
    pub async fn join(self) {
        let _ = self.task.await;
    }
}
