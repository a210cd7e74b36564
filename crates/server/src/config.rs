//! The server's settings: command-line flags, an optional TOML file with the same names, and
//! the defaults. A flag given on the command line wins over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use roamkv_engine::Durability;
use serde::Deserialize;

use crate::tls::TlsFiles;

/// Default EdgeX message-bus topic filter for events (EdgeX publishes on
/// edgex/events/device/{service}/{profile}/{device}/{source}).
pub const MQTT_TOPIC_DEFAULT: &str = "edgex/events/device/#";
/// Where core-data publishes the events it takes over REST.
pub const MQTT_REPUBLISH_PREFIX_DEFAULT: &str = "edgex/events/core";

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
    /// Largest request body accepted, in bytes [default: 4194304]; larger ones get 413.
    #[arg(long, env = "ROAMKV_BODY_BYTES_MAX")]
    pub body_bytes_max: Option<usize>,
    /// Most readings in one event or one native batch [default: 10000]; more get 413.
    #[arg(long, env = "ROAMKV_BATCH_READINGS_MAX")]
    pub batch_readings_max: Option<usize>,
    /// Requests served at once; more get 429 at once rather than queueing [default: 256].
    #[arg(long, env = "ROAMKV_CONCURRENT_REQUESTS_MAX")]
    pub concurrent_requests_max: Option<usize>,
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
    /// `postgres://user@host:port/database` (`?sslmode=require` for TLS). Also
    /// $ROAMKV_SINK. None: no sink.
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
    /// How other edges reach this one, `http://host:port`: a receiver of a handoff from here is
    /// told it [default: http:// and the address it listens on].
    #[arg(long, env = "ROAMKV_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// What a departure does with the device's data: `drop` (at once, paper 002) or `cloud`
    /// (dropped only once the sink has it in the cloud; needs --sink) [default: drop].
    #[arg(long, env = "ROAMKV_ON_DEPART")]
    pub on_depart: Option<String>,
}

/// The same settings as they may appear in the `--config` file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data: Option<PathBuf>,
    listen: Option<SocketAddr>,
    durability: Option<String>,
    management_time_ms: Option<u64>,
    log_budget_mib: Option<u64>,
    segment_mib: Option<u64>,
    index_memory_mib: Option<u64>,
    lower_memory_mib: Option<u64>,
    auth_token_file: Option<PathBuf>,
    read_only_token_file: Option<PathBuf>,
    insecure: Option<bool>,
    body_bytes_max: Option<usize>,
    batch_readings_max: Option<usize>,
    concurrent_requests_max: Option<usize>,
    query_readings_max: Option<usize>,
    max_result_count: Option<usize>,
    mqtt_broker: Option<String>,
    mqtt_topic: Option<String>,
    mqtt_client_id: Option<String>,
    mqtt_republish_prefix: Option<String>,
    mqtt_username: Option<String>,
    mqtt_password_file: Option<PathBuf>,
    mqtt_ca_file: Option<PathBuf>,
    header_timeout_s: Option<u64>,
    body_timeout_s: Option<u64>,
    drain_timeout_s: Option<u64>,
    retention_interval_s: Option<u64>,
    retention_default_h: Option<u64>,
    event_id_index: Option<bool>,
    sink: Option<String>,
    sink_password_file: Option<PathBuf>,
    sink_ca_file: Option<PathBuf>,
    on_depart: Option<String>,
    advertise_url: Option<String>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
}

/// Resolved settings, every default applied and every value checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub data: PathBuf,
    pub listen: SocketAddr,
    pub durability: Durability,
    pub durability_text: String,
    pub management_time_ms: u64,
    /// What the engine may take of the disk and of memory.
    pub sizes: Sizes,
    /// The read-write bearer token, if auth is on.
    pub auth_token: Option<Vec<u8>>,
    /// The read-only bearer token, if there is one.
    pub read_only_token: Option<Vec<u8>>,
    pub insecure: bool,
    pub body_bytes_max: usize,
    pub batch_readings_max: usize,
    pub concurrent_requests_max: usize,
    pub query_readings_max: usize,
    pub max_result_count: usize,
    pub mqtt: Option<MqttConfig>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub drain_timeout: Duration,
    pub retention_interval: Duration,
    /// The maximum age of the readings of devices without a setting of their own
    /// (`--retention-default-h`); None: no default. Until `start` settles it, the value given
    /// (if `retention_default_given`); then the one in force (retention_store.rs).
    pub retention_default_ms: Option<u64>,
    /// Whether `--retention-default-h` (or its environment variable or file key) was given;
    /// if not, the data directory's recorded default holds (retention_store.rs).
    pub retention_default_given: bool,
    /// Whether events are indexed by id (`--event-id-index`).
    pub event_id_index: bool,
    /// The cloud sink, if one is configured.
    pub sink: Option<SinkSettings>,
    pub on_depart: OnDepart,
    /// How other edges reach this one (None: from the address it listens on).
    pub advertise_url: Option<String>,
    /// HTTPS, when a certificate and key are given.
    pub tls: Option<TlsFiles>,
}

/// The cloud sink's settings (the edge id comes from the data directory, `edge.rs`).
#[derive(Clone)]
pub struct SinkSettings {
    pub url: String,
    pub password: Option<String>,
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for SinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkSettings")
            .field("url", &roamkv_sink::redact(&self.url))
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// What a departure does with the device's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDepart {
    /// Dropped at once: one DEPART record, nothing rewritten (paper 002).
    #[default]
    Drop,
    /// Dropped once the cloud sink has committed every reading of the device: the device is
    /// fenced (writes refused with 409) and its DEPART waits (departing.rs).
    Cloud,
}

impl OnDepart {
    pub fn name(self) -> &'static str {
        match self {
            OnDepart::Drop => "drop",
            OnDepart::Cloud => "cloud",
        }
    }
}

#[derive(Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub topic: String,
    pub client_id: String,
    /// Where REST-posted events go on the bus (republish.rs); None: nowhere.
    pub republish_prefix: Option<String>,
    /// TLS to the broker (an mqtts:// broker), trusting the system's CAs and these.
    pub tls: Option<MqttTls>,
    pub username: Option<String>,
    pub password: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MqttTls {
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for MqttConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("topic", &self.topic)
            .field("client_id", &self.client_id)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Config {
    /// Merges flags over the file over the defaults, and checks the result.
    pub fn resolve(args: &ServeArgs) -> Result<Config, String> {
        let file = match &args.config {
            Some(path) => read_file_config(path)?,
            None => FileConfig::default(),
        };
        let data = args
            .data
            .clone()
            .or(file.data.clone())
            .ok_or("no data directory: give --data DIR (or `data` in the config file)")?;
        let (durability_text, durability) = resolve_durability(args, &file)?;
        let access = Access::resolve(args, &file)?;
        let limits = Limits::resolve(args, &file)?;
        let timeouts = Timeouts::resolve(args, &file)?;
        Ok(Config {
            sizes: Sizes::resolve(args, &file, &data)?,
            data,
            listen: access.listen,
            durability,
            durability_text,
            management_time_ms: args
                .management_time_ms
                .or(file.management_time_ms)
                .unwrap_or(60_000),
            auth_token: access.auth_token,
            read_only_token: access.read_only_token,
            insecure: access.insecure,
            body_bytes_max: limits.body_bytes_max,
            batch_readings_max: limits.batch_readings_max,
            concurrent_requests_max: limits.concurrent_requests_max,
            query_readings_max: limits.query_readings_max,
            max_result_count: limits.max_result_count,
            mqtt: resolve_mqtt(args, &file)?,
            header_timeout: timeouts.header,
            body_timeout: timeouts.body,
            drain_timeout: timeouts.drain,
            retention_interval: timeouts.retention_interval,
            retention_default_ms: retention_default_ms(args, &file)?,
            retention_default_given: args
                .retention_default_h
                .or(file.retention_default_h)
                .is_some(),
            event_id_index: args.event_id_index.or(file.event_id_index).unwrap_or(true),
            sink: resolve_sink(args, &file)?,
            on_depart: resolve_on_depart(args, &file)?,
            advertise_url: args
                .advertise_url
                .clone()
                .or(file.advertise_url.clone())
                .map(|u| u.trim_end_matches('/').to_string()),
            tls: resolve_tls(args, &file)?,
        })
        .and_then(|config| {
            if config.on_depart == OnDepart::Cloud && config.sink.is_none() {
                Err(
                    "--on-depart cloud needs a cloud sink: give --sink postgres://... \
                     (or `sink` in the config file, or $ROAMKV_SINK)"
                        .into(),
                )
            } else {
                Ok(config)
            }
        })
    }

    /// The settings as /api/v3/config shows them (never the token itself).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "data": self.data.display().to_string(),
            "listen": self.listen.to_string(),
            "durability": self.durability_text,
            "managementTimeMs": self.management_time_ms,
            "segmentMib": self.sizes.segment_bytes >> 20,
            "logBudgetMib": self.sizes.log_budget_bytes >> 20,
            "indexMemoryMib": self.sizes.index_memory_bytes >> 20,
            "lowerMemoryMib": self.sizes.lower_memory_bytes >> 20,
            "authEnabled": self.auth_token.is_some(),
            "readOnlyToken": self.read_only_token.is_some(),
            "insecure": self.insecure,
            "bodyBytesMax": self.body_bytes_max,
            "batchReadingsMax": self.batch_readings_max,
            "concurrentRequestsMax": self.concurrent_requests_max,
            "queryReadingsMax": self.query_readings_max,
            "maxResultCount": self.max_result_count,
            "mqtt": self.mqtt.as_ref().map(|m| serde_json::json!({
                "broker": format!("{}:{}", m.host, m.port),
                "tls": m.tls.is_some(),
                "topic": m.topic,
                "clientId": m.client_id,
                "republishPrefix": m.republish_prefix,
                "username": m.username,
            })),
            "headerTimeoutS": self.header_timeout.as_secs(),
            "bodyTimeoutS": self.body_timeout.as_secs(),
            "drainTimeoutS": self.drain_timeout.as_secs(),
            "retentionIntervalS": self.retention_interval.as_secs(),
            "retentionDefaultH": self.retention_default_ms.map_or(0, |ms| ms / 3_600_000),
            "eventIdIndex": self.event_id_index,
            "sink": self.sink.as_ref().map(|s| roamkv_sink::redact(&s.url)),
            "onDepart": self.on_depart.name(),
            "tls": self.tls.as_ref().map(|t| serde_json::json!({
                "certFile": t.cert_file.display().to_string(),
                "keyFile": t.key_file.display().to_string(),
            })),
        })
    }
}

/// Both files or neither: half a TLS setting is a mistake, not plain HTTP.
fn resolve_tls(args: &ServeArgs, file: &FileConfig) -> Result<Option<TlsFiles>, String> {
    let cert_file = args.tls_cert_file.clone().or(file.tls_cert_file.clone());
    let key_file = args.tls_key_file.clone().or(file.tls_key_file.clone());
    match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => Ok(Some(TlsFiles {
            cert_file,
            key_file,
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(
            "--tls-cert-file needs --tls-key-file (or `tls_key_file` in the config file)".into(),
        ),
        (None, Some(_)) => Err(
            "--tls-key-file needs --tls-cert-file (or `tls_cert_file` in the config file)".into(),
        ),
    }
}

fn resolve_durability(args: &ServeArgs, file: &FileConfig) -> Result<(String, Durability), String> {
    let text = args
        .durability
        .clone()
        .or(file.durability.clone())
        .unwrap_or_else(|| "sync".into());
    let durability = Durability::parse(&text).ok_or_else(|| {
        format!("unknown durability {text:?}; valid: sync, periodic, periodic:MS, none")
    })?;
    Ok((text, durability))
}

/// Where the server listens and who may talk to it.
struct Access {
    listen: SocketAddr,
    auth_token: Option<Vec<u8>>,
    read_only_token: Option<Vec<u8>>,
    insecure: bool,
}

impl Access {
    /// Without a token, only a loopback address (unless --insecure).
    fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Access, String> {
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 59880)));
        let auth_token = match args
            .auth_token_file
            .clone()
            .or(file.auth_token_file.clone())
        {
            Some(path) => Some(read_token(&path)?),
            None => None,
        };
        let read_only_token = match args
            .read_only_token_file
            .clone()
            .or(file.read_only_token_file.clone())
        {
            Some(path) => Some(read_token(&path)?),
            None => None,
        };
        if read_only_token.is_some() && auth_token.is_none() {
            return Err(
                "--read-only-token-file needs --auth-token-file (the read-write token): \
                 otherwise nothing could write"
                    .into(),
            );
        }
        if read_only_token.is_some() && read_only_token == auth_token {
            return Err("the read-only token must differ from the read-write token".into());
        }
        let insecure = args.insecure || file.insecure.unwrap_or(false);
        if auth_token.is_none() && !listen.ip().is_loopback() && !insecure {
            return Err(format!(
                "refusing to listen on {listen} without an auth token: give --auth-token-file FILE, \
                 listen on a loopback address, or pass --insecure"
            ));
        }
        Ok(Access {
            listen,
            auth_token,
            read_only_token,
            insecure,
        })
    }
}

/// Request limits, each at least 1.
struct Limits {
    body_bytes_max: usize,
    batch_readings_max: usize,
    concurrent_requests_max: usize,
    query_readings_max: usize,
    max_result_count: usize,
}

impl Limits {
    fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Limits, String> {
        let positive =
            |name: &str, value: Option<usize>, default: usize| match value.unwrap_or(default) {
                0 => Err(format!("{name} must be at least 1")),
                n => Ok(n),
            };
        Ok(Limits {
            body_bytes_max: positive(
                "body_bytes_max",
                args.body_bytes_max.or(file.body_bytes_max),
                4 << 20,
            )?,
            batch_readings_max: positive(
                "batch_readings_max",
                args.batch_readings_max.or(file.batch_readings_max),
                10_000,
            )?
            // One record of an event's batch is its entry in the index of event ids.
            .min(roamkv_engine::limits::BATCH_RECORDS_MAX - 1),
            concurrent_requests_max: positive(
                "concurrent_requests_max",
                args.concurrent_requests_max
                    .or(file.concurrent_requests_max),
                256,
            )?,
            query_readings_max: positive(
                "query_readings_max",
                args.query_readings_max.or(file.query_readings_max),
                200_000,
            )?,
            max_result_count: positive(
                "max_result_count",
                args.max_result_count.or(file.max_result_count),
                1024,
            )?,
        })
    }
}

/// `--retention-default-h` in milliseconds; 0 (or not given) is none.
fn retention_default_ms(args: &ServeArgs, file: &FileConfig) -> Result<Option<u64>, String> {
    match args
        .retention_default_h
        .or(file.retention_default_h)
        .unwrap_or(0)
    {
        0 => Ok(None),
        // Past ~1000 years no reading has a timestamp old enough to go; refuse it as a typo.
        h if h > 24 * 365 * 1000 => Err(format!(
            "retention_default_h {h} is more than 1000 years (0 keeps readings until deleted)"
        )),
        h => Ok(Some(h * 3_600_000)),
    }
}

/// Timeouts and intervals, each at least one second.
struct Timeouts {
    header: Duration,
    body: Duration,
    drain: Duration,
    retention_interval: Duration,
}

impl Timeouts {
    fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Timeouts, String> {
        let seconds = |name: &str, value: Option<u64>, default: u64| match value.unwrap_or(default)
        {
            0 => Err(format!("{name} must be at least 1 second")),
            n => Ok(Duration::from_secs(n)),
        };
        Ok(Timeouts {
            header: seconds(
                "header_timeout_s",
                args.header_timeout_s.or(file.header_timeout_s),
                10,
            )?,
            body: seconds(
                "body_timeout_s",
                args.body_timeout_s.or(file.body_timeout_s),
                30,
            )?,
            drain: seconds(
                "drain_timeout_s",
                args.drain_timeout_s.or(file.drain_timeout_s),
                30,
            )?,
            retention_interval: seconds(
                "retention_interval_s",
                args.retention_interval_s.or(file.retention_interval_s),
                60,
            )?,
        })
    }
}

/// The defaults are sized for a gateway with 2-4 GB of RAM and 8-32 GB of eMMC (a Raspberry
/// Pi 4 or CM4 with 16 GB, EdgeX's usual class of box), not for the benchmark machine the
/// engine's own defaults assume (a 45 GiB log): a log of 1 GiB holds one 60 s management time
/// of ingest up to ~17 MiB/s, and when it fills, maintenance settles devices early rather than
/// refusing writes. Memory: at most ~200 MiB for the index and the lower tier together.
pub const SEGMENT_MIB_DEFAULT: u64 = 8;
pub const LOG_BUDGET_MIB_DEFAULT: u64 = 1024;
pub const INDEX_MEMORY_MIB_DEFAULT: u64 = 128;
pub const LOWER_MEMORY_MIB_DEFAULT: u64 = 64;

/// What the engine may take of the disk and of memory, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub segment_bytes: u64,
    /// The log's space budget (`Options::log_bytes_max`).
    pub log_budget_bytes: u64,
    pub index_memory_bytes: u64,
    pub lower_memory_bytes: u64,
}

impl Sizes {
    /// Each size in MiB, at least 1; the segment within the engine's bounds; the default log
    /// budget at most half the free space where the data goes (a budget the disk cannot hold
    /// would end in ENOSPC instead of early settling).
    fn resolve(args: &ServeArgs, file: &FileConfig, data: &Path) -> Result<Sizes, String> {
        let mib = |name: &str, value: Option<u64>, default: u64| -> Result<u64, String> {
            match value.unwrap_or(default) {
                0 => Err(format!("{name} must be at least 1 (MiB)")),
                n => n
                    .checked_mul(1 << 20)
                    .ok_or_else(|| format!("{name} {n} MiB is too large")),
            }
        };
        let segment_bytes = mib(
            "segment_mib",
            args.segment_mib.or(file.segment_mib),
            SEGMENT_MIB_DEFAULT,
        )?;
        let segment_range =
            roamkv_engine::limits::SEGMENT_BYTES_MIN..=roamkv_engine::limits::SEGMENT_BYTES_MAX;
        if !segment_range.contains(&segment_bytes) {
            return Err(format!(
                "segment_mib must be between {} and {}",
                segment_range.start() >> 20,
                segment_range.end() >> 20
            ));
        }
        let log_budget_bytes = match args.log_budget_mib.or(file.log_budget_mib) {
            Some(set) => mib("log_budget_mib", Some(set), 0)?,
            None => {
                let free = free_bytes_at(data).unwrap_or(u64::MAX);
                (LOG_BUDGET_MIB_DEFAULT << 20)
                    .min(free / 2)
                    .max(roamkv_engine::limits::LOG_SEGMENTS_MIN * segment_bytes)
            }
        };
        Ok(Sizes {
            segment_bytes,
            log_budget_bytes,
            index_memory_bytes: mib(
                "index_memory_mib",
                args.index_memory_mib.or(file.index_memory_mib),
                INDEX_MEMORY_MIB_DEFAULT,
            )?,
            lower_memory_bytes: mib(
                "lower_memory_mib",
                args.lower_memory_mib.or(file.lower_memory_mib),
                LOWER_MEMORY_MIB_DEFAULT,
            )?,
        })
    }
}

/// Bytes free for an unprivileged file at `path`, or at its nearest existing ancestor (the data
/// directory is created at open, after the settings are resolved): the engine's own statvfs.
fn free_bytes_at(path: &Path) -> Option<u64> {
    use roamkv_engine::storage::{PlainFiles, Storage};
    let existing = path.ancestors().find(|p| p.exists())?;
    PlainFiles.free_bytes(existing).ok()
}

fn resolve_mqtt(args: &ServeArgs, file: &FileConfig) -> Result<Option<MqttConfig>, String> {
    let username = args.mqtt_username.clone().or(file.mqtt_username.clone());
    let password_file = args
        .mqtt_password_file
        .clone()
        .or(file.mqtt_password_file.clone());
    let ca_file = args.mqtt_ca_file.clone().or(file.mqtt_ca_file.clone());
    let Some(broker) = args.mqtt_broker.clone().or(file.mqtt_broker.clone()) else {
        let republish =
            args.mqtt_republish_prefix.is_some() || file.mqtt_republish_prefix.is_some();
        if username.is_some() || password_file.is_some() || ca_file.is_some() || republish {
            return Err(
                "MQTT credentials, a CA file or a republish prefix without --mqtt-broker".into(),
            );
        }
        return Ok(None);
    };
    let topic = args
        .mqtt_topic
        .clone()
        .or(file.mqtt_topic.clone())
        .unwrap_or_else(|| MQTT_TOPIC_DEFAULT.into());
    let client_id = args
        .mqtt_client_id
        .clone()
        .or(file.mqtt_client_id.clone())
        .unwrap_or_else(|| "roamkv-core-data".into());
    let mut mqtt = parse_broker(&broker, topic, client_id)?;
    let prefix = args
        .mqtt_republish_prefix
        .clone()
        .or(file.mqtt_republish_prefix.clone())
        .unwrap_or_else(|| MQTT_REPUBLISH_PREFIX_DEFAULT.into());
    mqtt.republish_prefix =
        Some(prefix.trim_end_matches('/').to_string()).filter(|p| !p.is_empty());
    if let Some(path) = &ca_file {
        if mqtt.tls.is_none() {
            return Err(format!(
                "--mqtt-ca-file is for a TLS broker: give --mqtt-broker mqtts://{}:{}",
                mqtt.host, mqtt.port
            ));
        }
        if let Err(e) = std::fs::metadata(path) {
            return Err(format!("--mqtt-ca-file {}: {e}", path.display()));
        }
        mqtt.tls = Some(MqttTls { ca_file });
    }
    mqtt.password = match password_file {
        Some(path) if username.is_none() => {
            return Err(format!(
                "--mqtt-password-file {} needs --mqtt-username",
                path.display()
            ));
        }
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("--mqtt-password-file {}: {e}", path.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        ),
        None => None,
    };
    mqtt.username = username;
    Ok(Some(mqtt))
}

/// The sink: flag, then $ROAMKV_SINK (clap reads both into `args`), then the file. A malformed
/// URL or an unreadable password file is an error naming the setting.
fn resolve_sink(args: &ServeArgs, file: &FileConfig) -> Result<Option<SinkSettings>, String> {
    let Some(url) = args.sink.clone().or(file.sink.clone()) else {
        return Ok(None);
    };
    if let Err(e) = roamkv_sink::db::parse_url(&url) {
        return Err(format!("--sink: {e}"));
    }
    let password = match args
        .sink_password_file
        .clone()
        .or(file.sink_password_file.clone())
    {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("--sink-password-file {}: {e}", path.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        ),
        None => None,
    };
    let ca_file = args.sink_ca_file.clone().or(file.sink_ca_file.clone());
    if let Some(path) = &ca_file
        && let Err(e) = std::fs::metadata(path)
    {
        return Err(format!("--sink-ca-file {}: {e}", path.display()));
    }
    Ok(Some(SinkSettings {
        url,
        password,
        ca_file,
    }))
}

fn resolve_on_depart(args: &ServeArgs, file: &FileConfig) -> Result<OnDepart, String> {
    match args.on_depart.as_deref().or(file.on_depart.as_deref()) {
        None | Some("drop") => Ok(OnDepart::Drop),
        Some("cloud") => Ok(OnDepart::Cloud),
        Some(other) => Err(format!(
            "--on-depart {other:?}: valid values are drop and cloud"
        )),
    }
}

fn read_file_config(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading config file {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

fn read_token(path: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading auth token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.len() < 16 {
        return Err(format!(
            "auth token in {} is {} characters; use at least 16",
            path.display(),
            token.len()
        ));
    }
    Ok(token.as_bytes().to_vec())
}

/// `host:port`, `mqtt://host:port` or `tcp://host:port` (plain); `mqtts://`, `ssl://` or
/// `tls://` (TLS: EdgeX names the protocols tcp and ssl).
fn parse_broker(broker: &str, topic: String, client_id: String) -> Result<MqttConfig, String> {
    let (tls, address) = match broker.split_once("://") {
        None => (false, broker),
        Some(("mqtt" | "tcp", rest)) => (false, rest),
        Some(("mqtts" | "ssl" | "tls", rest)) => (true, rest),
        Some((scheme, _)) => {
            return Err(format!(
                "MQTT broker {broker:?}: unknown scheme {scheme:?}; use mqtt:// or mqtts://"
            ));
        }
    };
    let (host, port) = address
        .trim_end_matches('/')
        .rsplit_once(':')
        .ok_or_else(|| format!("MQTT broker {broker:?} is not host:port"))?;
    let port = port
        .parse()
        .map_err(|_| format!("MQTT broker {broker:?}: port {port:?} is not a number"))?;
    if host.is_empty() || topic.is_empty() || client_id.is_empty() {
        return Err("MQTT broker host, topic and client id must not be empty".into());
    }
    Ok(MqttConfig {
        host: host.trim_start_matches('[').trim_end_matches(']').into(),
        port,
        topic,
        client_id,
        republish_prefix: None,
        tls: tls.then_some(MqttTls { ca_file: None }),
        username: None,
        password: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(data: &str) -> ServeArgs {
        ServeArgs {
            data: Some(data.into()),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn defaults_listen_on_loopback_with_sync_durability() {
        let config = Config::resolve(&args("/tmp/x")).expect("resolve");
        assert!(config.listen.ip().is_loopback());
        assert_eq!(config.durability, Durability::Sync);
        assert!(config.auth_token.is_none());
    }

    #[test]
    fn non_loopback_without_token_is_refused_unless_insecure() {
        let mut a = args("/tmp/x");
        a.listen = Some("0.0.0.0:59880".parse().expect("addr"));
        let error = Config::resolve(&a).expect_err("must refuse");
        assert!(error.contains("--insecure"), "{error}");
        a.insecure = true;
        assert!(Config::resolve(&a).is_ok());
    }

    #[test]
    fn file_settings_apply_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.toml");
        std::fs::write(
            &path,
            "data = \"/from/file\"\ndurability = \"none\"\nmax_result_count = 7\n",
        )
        .expect("write");
        let mut a = ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        };
        a.max_result_count = Some(9);
        let config = Config::resolve(&a).expect("resolve");
        assert_eq!(config.data, PathBuf::from("/from/file"));
        assert_eq!(config.durability, Durability::None);
        assert_eq!(config.max_result_count, 9);
        std::fs::write(&path, "colour = \"blue\"\n").expect("write");
        let error = Config::resolve(&a).expect_err("unknown key");
        assert!(error.contains("colour"), "{error}");
    }

    #[test]
    fn short_tokens_and_bad_brokers_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "short\n").expect("write");
        let mut a = args("/tmp/x");
        a.auth_token_file = Some(token);
        assert!(Config::resolve(&a).is_err());
        let mut b = args("/tmp/x");
        b.mqtt_broker = Some("localhost".into());
        assert!(Config::resolve(&b).is_err());
    }

    #[test]
    fn sink_settings_are_checked_and_on_depart_cloud_needs_a_sink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = args("/tmp/x");
        a.on_depart = Some("cloud".into());
        let error = Config::resolve(&a).expect_err("no sink");
        assert!(error.contains("--sink"), "{error}");
        a.sink = Some("postgres://edge@db.example:notaport/fleet".into());
        let error = Config::resolve(&a).expect_err("bad URL");
        assert!(error.starts_with("--sink:"), "{error}");
        a.sink = Some("postgres://edge@db.example:5432/fleet".into());
        a.sink_password_file = Some(dir.path().join("missing"));
        let error = Config::resolve(&a).expect_err("no password file");
        assert!(error.contains("--sink-password-file"), "{error}");
        std::fs::write(dir.path().join("pw"), "s3cret\n").expect("write");
        a.sink_password_file = Some(dir.path().join("pw"));
        let config = Config::resolve(&a).expect("resolve");
        let sink = config.sink.as_ref().expect("a sink");
        assert_eq!(sink.password.as_deref(), Some("s3cret"));
        assert!(!format!("{sink:?}").contains("s3cret"));
        assert_eq!(config.on_depart, OnDepart::Cloud);
        a.on_depart = Some("later".into());
        assert!(Config::resolve(&a).is_err());
    }

    #[test]
    fn mqtt_brokers_take_a_scheme_and_credentials_need_a_broker() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = args("/tmp/x");
        a.mqtt_username = Some("edge".into());
        let error = Config::resolve(&a).expect_err("no broker");
        assert!(error.contains("--mqtt-broker"), "{error}");
        a.mqtt_broker = Some("mqtts://broker.local:8883".into());
        let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
        assert!(mqtt.tls.is_some());
        assert_eq!((mqtt.host.as_str(), mqtt.port), ("broker.local", 8883));
        a.mqtt_broker = Some("tcp://broker.local:1883".into());
        assert!(
            Config::resolve(&a)
                .expect("resolve")
                .mqtt
                .expect("mqtt")
                .tls
                .is_none()
        );
        a.mqtt_broker = Some("ftp://broker.local:21".into());
        let error = Config::resolve(&a).expect_err("scheme");
        assert!(error.contains("scheme"), "{error}");

        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").expect("write");
        a.mqtt_broker = Some("broker.local:1883".into());
        a.mqtt_ca_file = Some(ca.clone());
        let error = Config::resolve(&a).expect_err("CA without TLS");
        assert!(error.contains("mqtts://"), "{error}");
        a.mqtt_broker = Some("ssl://broker.local:8883".into());
        let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
        assert_eq!(mqtt.tls.expect("tls").ca_file, Some(ca));

        let password = dir.path().join("pw");
        std::fs::write(&password, "s3cret\n").expect("write");
        a.mqtt_password_file = Some(password.clone());
        let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
        assert_eq!(mqtt.password.as_deref(), Some("s3cret"));
        assert!(!format!("{mqtt:?}").contains("s3cret"));
        a.mqtt_username = None;
        let error = Config::resolve(&a).expect_err("password without user");
        assert!(error.contains("--mqtt-username"), "{error}");
    }

    #[test]
    fn a_read_only_token_needs_a_different_read_write_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = dir.path().join("write");
        let read = dir.path().join("read");
        std::fs::write(&write, "write-token-0123456789\n").expect("write");
        std::fs::write(&read, "read-token-0123456789\n").expect("write");
        let mut a = args("/tmp/x");
        a.read_only_token_file = Some(read.clone());
        let error = Config::resolve(&a).expect_err("read-only alone");
        assert!(error.contains("--auth-token-file"), "{error}");
        a.auth_token_file = Some(read.clone());
        assert!(Config::resolve(&a).is_err(), "the same token twice");
        a.auth_token_file = Some(write);
        let config = Config::resolve(&a).expect("resolve");
        assert_eq!(
            config.read_only_token.as_deref(),
            Some(&b"read-token-0123456789"[..])
        );
    }
}
