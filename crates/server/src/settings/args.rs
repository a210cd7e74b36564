//! The flags of `roamkv serve` and the keys of its `--config` file: the same names, one list.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// `roamkv serve` flags. Every one of them may also be set in the `--config` file (TOML, same
/// names with `_` for `-`), e.g. `listen = "127.0.0.1:59880"`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// TOML file with any of the settings below; flags given here win over it.
    #[arg(long, env = "ROAMKV_CONFIG")]
    pub config: Option<PathBuf>,
    /// Data directory of the engine (created if missing).
    #[arg(long, env = "ROAMKV_DATA")]
    pub data: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:59880, EdgeX core-data's port].
    #[arg(long, env = "ROAMKV_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// When a write is acknowledged: sync, periodic[:MS] or none [default: sync].
    #[arg(long, env = "ROAMKV_DURABILITY")]
    pub durability: Option<String>,
    /// How long a new device stays in the upper tier before it settles, in ms [default: 60000].
    #[arg(long, env = "ROAMKV_MANAGEMENT_TIME_MS")]
    pub management_time_ms: Option<u64>,
    /// The log's space budget, in MiB [default: 1024, at most half the free disk]. Near it the engine settles devices early, then stalls writers, then
    /// answers 507 (no space) until space returns.
    #[arg(long, env = "ROAMKV_LOG_BUDGET_MIB")]
    pub log_budget_mib: Option<u64>,
    /// Size of one log segment file, in MiB [default: 8]. The log grows and is reclaimed a
    /// segment at a time: the first reading takes one segment plus a spare on disk.
    #[arg(long, env = "ROAMKV_SEGMENT_MIB")]
    pub segment_mib: Option<u64>,
    /// Cap on the log's in-memory index, in MiB [default: 128]; beyond it the oldest segments
    /// settle early.
    #[arg(long, env = "ROAMKV_INDEX_MEMORY_MIB")]
    pub index_memory_mib: Option<u64>,
    /// Memory of the lower tier (RocksDB's write buffers and block cache), in MiB [default: 64].
    #[arg(long, env = "ROAMKV_LOWER_MEMORY_MIB")]
    pub lower_memory_mib: Option<u64>,
    /// File holding the bearer token every route but /health and /api/v3/ping requires.
    #[arg(long, env = "ROAMKV_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// File holding a second bearer token that may only read (GET and HEAD); needs
    /// --auth-token-file, the read-write token.
    #[arg(long, env = "ROAMKV_READ_ONLY_TOKEN_FILE")]
    pub read_only_token_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address without an auth token.
    #[arg(long, env = "ROAMKV_INSECURE")]
    pub insecure: bool,
    /// What the log shows: a level (error, warn, info, debug, trace) or tracing's filter
    /// directives (`info,roamkv_server=debug`); $RUST_LOG, when set, wins. SIGHUP applies a
    /// new value from the config file [default: info].
    #[arg(long, env = "ROAMKV_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// How log lines are written: `text` (for a terminal or journald) or `json` (one object a
    /// line, for a log shipper) [default: text].
    #[arg(long, env = "ROAMKV_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// One log line a request (method, route, path, status, milliseconds, client address) at
    /// info level, target `roamkv::access`; SIGHUP applies a new value from the config file
    /// [default: false].
    #[arg(long, env = "ROAMKV_ACCESS_LOG")]
    pub access_log: Option<bool>,
    /// Largest request body accepted, in bytes [default: 4194304]; larger ones get 413.
    #[arg(long, env = "ROAMKV_BODY_BYTES_MAX")]
    pub body_bytes_max: Option<usize>,
    /// Most readings in one event or one native batch [default: 10000]; more get 413.
    #[arg(long, env = "ROAMKV_BATCH_READINGS_MAX")]
    pub batch_readings_max: Option<usize>,
    /// Requests served at once; more get 429 at once rather than queueing [default: 256].
    #[arg(long, env = "ROAMKV_CONCURRENT_REQUESTS_MAX")]
    pub concurrent_requests_max: Option<usize>,
    /// Under `--durability sync`, how long a small group of writes waits for the clients the
    /// last commit answered to come back, in microseconds [default: 2000; at most 100000]:
    /// fewer, larger commits (fewer fdatasyncs and log-block rewrites on the flash) for at most
    /// this much more latency. 0: never wait.
    #[arg(long, env = "ROAMKV_COMMIT_DELAY_US")]
    pub commit_delay_us: Option<u64>,
    /// Most readings one query may read before answering 416 [default: 200000].
    #[arg(long, env = "ROAMKV_QUERY_READINGS_MAX")]
    pub query_readings_max: Option<usize>,
    /// EdgeX's MaxResultCount: the largest `limit` of a query [default: 1024].
    #[arg(long, env = "ROAMKV_MAX_RESULT_COUNT")]
    pub max_result_count: Option<usize>,
    /// MQTT broker to take EdgeX events from, host:port, or mqtts://host:port for TLS (none: no
    /// MQTT ingest).
    #[arg(long, env = "ROAMKV_MQTT_BROKER")]
    pub mqtt_broker: Option<String>,
    /// MQTT topic filter to subscribe to [default: edgex/events/device/#].
    #[arg(long, env = "ROAMKV_MQTT_TOPIC")]
    pub mqtt_topic: Option<String>,
    /// MQTT client id [default: roamkv-core-data].
    #[arg(long, env = "ROAMKV_MQTT_CLIENT_ID")]
    pub mqtt_client_id: Option<String>,
    /// Topic prefix under which events POSTed over HTTP are published to the MQTT bus, as
    /// core-data publishes them (`PREFIX/service/profile/device/source`); "" publishes nothing
    /// [default: edgex/events/core].
    #[arg(long, env = "ROAMKV_MQTT_REPUBLISH_PREFIX")]
    pub mqtt_republish_prefix: Option<String>,
    /// The broker account's user name (EdgeX secure mode).
    #[arg(long, env = "ROAMKV_MQTT_USERNAME")]
    pub mqtt_username: Option<String>,
    /// File holding the broker account's password (kept out of the process list and the
    /// config file).
    #[arg(long, env = "ROAMKV_MQTT_PASSWORD_FILE")]
    pub mqtt_password_file: Option<PathBuf>,
    /// PEM file of CA certificates to trust for the broker's TLS, besides the system's.
    #[arg(long, env = "ROAMKV_MQTT_CA_FILE")]
    pub mqtt_ca_file: Option<PathBuf>,
    /// Bytes of MQTT messages taken from the broker and waiting for a write slot, at most
    /// [default: 16777216, 16 MiB]. At the bound the server stops reading from the broker until
    /// a write finishes: at QoS 1 the broker keeps the rest; at QoS 0 it drops what it cannot
    /// hold (mosquitto: past `max_queued_messages`), as it does for EdgeX's own core-data.
    #[arg(long, env = "ROAMKV_MQTT_QUEUE_BYTES_MAX")]
    pub mqtt_queue_bytes_max: Option<usize>,
    /// Seconds a client may take to send its request headers (slow clients are cut off) [default: 10].
    #[arg(long, env = "ROAMKV_HEADER_TIMEOUT_S")]
    pub header_timeout_s: Option<u64>,
    /// Seconds a client may take to send its request body; slower ones get 408 [default: 30].
    #[arg(long, env = "ROAMKV_BODY_TIMEOUT_S")]
    pub body_timeout_s: Option<u64>,
    /// Seconds shutdown waits for in-flight requests before closing the engine [default: 30].
    #[arg(long, env = "ROAMKV_DRAIN_TIMEOUT_S")]
    pub drain_timeout_s: Option<u64>,
    /// Seconds between applications of the per-device retention settings [default: 60].
    #[arg(long, env = "ROAMKV_RETENTION_INTERVAL_S")]
    pub retention_interval_s: Option<u64>,
    /// The rate a backup (POST /api/roamkv/v1/backup) reads the data directory at, in MiB/s;
    /// 0: no limit [default: 128]. The copy's thread also runs at a lower CPU and I/O priority
    /// than ingest. A rate under ingest's makes a backup of a busy log hold it longer.
    #[arg(long, env = "ROAMKV_BACKUP_RATE_MIB")]
    pub backup_rate_mib: Option<u64>,
    /// The rate an export (GET /api/roamkv/v1/export) writes its output at while ingest runs
    /// (a write in the last half second), in MiB/s; 0: no limit [default: 2]. With ingest
    /// idle an export runs at full speed; its thread always runs at a lower CPU and I/O
    /// priority than ingest.
    #[arg(long, env = "ROAMKV_EXPORT_RATE_MIB")]
    pub export_rate_mib: Option<u64>,
    /// Hours the readings of a device without a retention setting of its own are kept, applied
    /// every --retention-interval-s, as core-data's age-based retention; 0: kept until deleted
    /// [default: 168, core-data's week, for a data directory this server made; off for one
    /// that held data before].
    #[arg(long, env = "ROAMKV_RETENTION_DEFAULT_H")]
    pub retention_default_h: Option<u64>,
    /// Keep an index of event ids (one more engine record per event, in its batch) so that
    /// GET and DELETE /api/v3/event/id/{id} find an event in one lookup; false: they answer 501
    /// [default: true].
    #[arg(long, env = "ROAMKV_EVENT_ID_INDEX")]
    pub event_id_index: Option<bool>,
    /// The cloud sink: every reading also goes to this PostgreSQL-protocol database,
    /// `postgres://user@host:port/database` (`?sslmode=require` for TLS), or to this Kafka
    /// topic, `kafka://host:port[,host:port...]/topic` (`kafka+ssl://` for TLS), exactly once.
    /// Also $ROAMKV_SINK. None: no sink.
    #[arg(long, env = "ROAMKV_SINK")]
    pub sink: Option<String>,
    /// File holding the sink database's password (kept out of the URL, the process list and
    /// the config file). Also $ROAMKV_SINK_PASSWORD_FILE.
    #[arg(long, env = "ROAMKV_SINK_PASSWORD_FILE")]
    pub sink_password_file: Option<PathBuf>,
    /// PEM file of CA certificates to trust for the sink's TLS, besides the system's.
    #[arg(long, env = "ROAMKV_SINK_CA_FILE")]
    pub sink_ca_file: Option<PathBuf>,
    /// PEM file of the server's certificate chain: serve HTTPS instead of HTTP (with
    /// --tls-key-file; SIGHUP reloads both).
    #[arg(long, env = "ROAMKV_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the private key that goes with --tls-cert-file.
    #[arg(long, env = "ROAMKV_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// How other edges reach this one, `http://host:port` (`https://` with TLS): a receiver of
    /// a handoff from here is told it [default: http:// or https:// and the address it listens
    /// on].
    #[arg(long, env = "ROAMKV_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// File holding the bearer token this edge presents to the next edges of its handoffs (their
    /// read-write token, their --auth-token-file's); never shown.
    #[arg(long, env = "ROAMKV_PEER_TOKEN_FILE")]
    pub peer_token_file: Option<PathBuf>,
    /// PEM file of the CA certificates that signed the next edges' certificates (handoffs to
    /// https:// edges), trusted besides the system's.
    #[arg(long, env = "ROAMKV_PEER_CA_FILE")]
    pub peer_ca_file: Option<PathBuf>,
    /// What a departure does with the device's data: `drop` (at once, paper 002) or `cloud`
    /// (dropped only once the sink has it in the cloud; needs --sink) [default: drop].
    #[arg(long, env = "ROAMKV_ON_DEPART")]
    pub on_depart: Option<String>,
}

/// The same settings as they may appear in the `--config` file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) data: Option<PathBuf>,
    pub(super) listen: Option<SocketAddr>,
    pub(super) durability: Option<String>,
    pub(super) management_time_ms: Option<u64>,
    pub(super) log_budget_mib: Option<u64>,
    pub(super) segment_mib: Option<u64>,
    pub(super) index_memory_mib: Option<u64>,
    pub(super) lower_memory_mib: Option<u64>,
    pub(super) auth_token_file: Option<PathBuf>,
    pub(super) read_only_token_file: Option<PathBuf>,
    pub(super) insecure: Option<bool>,
    pub(super) log_level: Option<String>,
    pub(super) log_format: Option<String>,
    pub(super) access_log: Option<bool>,
    pub(super) body_bytes_max: Option<usize>,
    pub(super) batch_readings_max: Option<usize>,
    pub(super) concurrent_requests_max: Option<usize>,
    pub(super) commit_delay_us: Option<u64>,
    pub(super) query_readings_max: Option<usize>,
    pub(super) max_result_count: Option<usize>,
    pub(super) mqtt_broker: Option<String>,
    pub(super) mqtt_topic: Option<String>,
    pub(super) mqtt_client_id: Option<String>,
    pub(super) mqtt_republish_prefix: Option<String>,
    pub(super) mqtt_username: Option<String>,
    pub(super) mqtt_password_file: Option<PathBuf>,
    pub(super) mqtt_ca_file: Option<PathBuf>,
    pub(super) mqtt_queue_bytes_max: Option<usize>,
    pub(super) header_timeout_s: Option<u64>,
    pub(super) body_timeout_s: Option<u64>,
    pub(super) drain_timeout_s: Option<u64>,
    pub(super) retention_interval_s: Option<u64>,
    pub(super) backup_rate_mib: Option<u64>,
    pub(super) export_rate_mib: Option<u64>,
    pub(super) retention_default_h: Option<u64>,
    pub(super) event_id_index: Option<bool>,
    pub(super) sink: Option<String>,
    pub(super) sink_password_file: Option<PathBuf>,
    pub(super) sink_ca_file: Option<PathBuf>,
    pub(super) on_depart: Option<String>,
    pub(super) advertise_url: Option<String>,
    pub(super) peer_token_file: Option<PathBuf>,
    pub(super) peer_ca_file: Option<PathBuf>,
    pub(super) tls_cert_file: Option<PathBuf>,
    pub(super) tls_key_file: Option<PathBuf>,
}
