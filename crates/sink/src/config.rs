//! How a sink runs and what it shows.

use std::time::Duration;

use serde::Serialize;

/// The engine feed slot the sink holds the log with.
pub const SLOT_NAME: &str = "cloud-sink";

/// How the sink runs.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    /// `postgres://user:password@host:port/database` (or the key=value form). `sslmode=require`
    /// (or `verify-ca`, `verify-full`) in it asks for TLS (rustls, the system's roots plus
    /// `ca_file`); without it the connection is plain. Or `kafka://HOST:PORT[,...]/TOPIC`
    /// (`kafka+ssl://` for TLS, `USER@` for SASL: kafka/url.rs).
    pub url: String,
    /// The password, when it is kept out of the URL (`--sink-password-file`): it wins over one
    /// in the URL.
    pub password: Option<String>,
    /// A PEM file of CA certificates to trust besides the system's (a private CA); for Kafka,
    /// instead of the system's (librdkafka's `ssl.ca.location`).
    pub ca_file: Option<std::path::PathBuf>,
    /// This edge's identity (the server's `edge.json`): the cursor row's key; in Kafka the
    /// offsets record's key and the producer's transactional id.
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
            password: None,
            ca_file: None,
            edge_id: edge_id.to_string(),
            batch_rows: 5_000,
            batch_bytes: 4 << 20,
            poll_interval: Duration::from_millis(50),
        }
    }

    /// Whether the URL asks for TLS (`sslmode=require`, `verify-ca` or `verify-full`).
    pub fn wants_tls(&self) -> bool {
        ["require", "verify-ca", "verify-full"]
            .iter()
            .any(|mode| self.url.contains(&format!("sslmode={mode}")))
    }
}

/// What the sink is doing (for the server's metrics and status page once it starts the sink).
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
