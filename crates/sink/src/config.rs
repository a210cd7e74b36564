//! How a sink runs and what it shows.

use std::time::Duration;

use serde::Serialize;

/// The engine feed slot the sink holds the log with.
pub const SLOT_NAME: &str = "cloud-sink";

/// The URL schemes of a Kafka sink (kafka/url.rs reads the rest of the URL).
pub const KAFKA_SCHEMES: [&str; 2] = ["kafka://", "kafka+ssl://"];

/// Readings per PostgreSQL transaction at most: one multi-row insert, its cost in the rows.
pub const POSTGRES_BATCH_ROWS: usize = 5_000;
/// Log bytes a PostgreSQL batch's read covers at most.
pub const POSTGRES_BATCH_BYTES: usize = 4 << 20;
/// Readings per Kafka transaction at most. A Kafka commit has a fixed cost whatever its size
/// (the partitions added to the transaction, EndTxn written to the transaction log and a marker
/// to each partition, all replicated: 60-80 ms on the 3-broker test cluster), so that with 5,000
/// readings a transaction the drain spent about half its time committing (docs/BENCHMARKS.md).
/// The transaction grows with the backlog: the read takes what the log holds up to this, so a
/// sink that is caught up commits what came since its last commit, and a backlog drains in
/// transactions of this size (about 16 MB of JSON records; with the read made ahead while one
/// commits, about 80 MB of memory at most: two batches read, one as rows and records, and the
/// producer's copies).
pub const KAFKA_BATCH_ROWS: usize = 50_000;
/// Log bytes a Kafka batch's read covers at most: room for `KAFKA_BATCH_ROWS` readings of EdgeX
/// events (about 360 log bytes each).
pub const KAFKA_BATCH_BYTES: usize = 32 << 20;

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
    /// Readings per transaction at most [default: `POSTGRES_BATCH_ROWS`, `KAFKA_BATCH_ROWS`].
    pub batch_rows: usize,
    /// Log bytes read per batch at most [default: `POSTGRES_BATCH_BYTES`,
    /// `KAFKA_BATCH_BYTES`].
    pub batch_bytes: usize,
    /// How often a caught-up sink looks for new records.
    pub poll_interval: Duration,
}

impl SinkConfig {
    pub fn new(url: &str, edge_id: &str) -> SinkConfig {
        let kafka = KAFKA_SCHEMES.iter().any(|s| url.starts_with(s));
        let (batch_rows, batch_bytes) = if kafka {
            (KAFKA_BATCH_ROWS, KAFKA_BATCH_BYTES)
        } else {
            (POSTGRES_BATCH_ROWS, POSTGRES_BATCH_BYTES)
        };
        SinkConfig {
            url: url.to_string(),
            password: None,
            ca_file: None,
            edge_id: edge_id.to_string(),
            batch_rows,
            batch_bytes,
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
