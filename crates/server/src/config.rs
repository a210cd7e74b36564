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

/// `roamkv serve` flags. Every one of them may also be set in the `--config` file (TOML, same
/// names with `_` for `-`), e.g. `listen = "127.0.0.1:59880"`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// TOML file with any of the settings below; flags given here win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory of the engine (created if missing).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:59880, EdgeX core-data's port].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// When a write is acknowledged: sync, periodic[:MS] or none [default: sync].
    #[arg(long)]
    pub durability: Option<String>,
    /// How long a new device stays in the upper tier before it settles, in ms [default: 60000].
    #[arg(long)]
    pub management_time_ms: Option<u64>,
    /// The log's space budget, in MiB [default: derived from the management time, at most half
    /// the free disk]. Near it the engine settles devices early, then stalls writers, then
    /// answers 507 (no space) until space returns.
    #[arg(long)]
    pub log_budget_mib: Option<u64>,
    /// File holding the bearer token every route but /health and /api/v3/ping requires.
    #[arg(long)]
    pub auth_token_file: Option<PathBuf>,
    /// Allow listening on a non-loopback address without an auth token.
    #[arg(long)]
    pub insecure: bool,
    /// Largest request body accepted, in bytes [default: 4194304]; larger ones get 413.
    #[arg(long)]
    pub body_bytes_max: Option<usize>,
    /// Most readings in one event or one native batch [default: 10000]; more get 413.
    #[arg(long)]
    pub batch_readings_max: Option<usize>,
    /// Requests served at once; more get 429 at once rather than queueing [default: 256].
    #[arg(long)]
    pub concurrent_requests_max: Option<usize>,
    /// Most readings one query may read before answering 416 [default: 200000].
    #[arg(long)]
    pub query_readings_max: Option<usize>,
    /// EdgeX's MaxResultCount: the largest `limit` of a query [default: 1024].
    #[arg(long)]
    pub max_result_count: Option<usize>,
    /// MQTT broker to take EdgeX events from, host:port (none: no MQTT ingest).
    #[arg(long)]
    pub mqtt_broker: Option<String>,
    /// MQTT topic filter to subscribe to [default: edgex/events/device/#].
    #[arg(long)]
    pub mqtt_topic: Option<String>,
    /// MQTT client id [default: roamkv-core-data].
    #[arg(long)]
    pub mqtt_client_id: Option<String>,
    /// Seconds a client may take to send its request headers (slow clients are cut off) [default: 10].
    #[arg(long)]
    pub header_timeout_s: Option<u64>,
    /// Seconds a client may take to send its request body; slower ones get 408 [default: 30].
    #[arg(long)]
    pub body_timeout_s: Option<u64>,
    /// Seconds shutdown waits for in-flight requests before closing the engine [default: 30].
    #[arg(long)]
    pub drain_timeout_s: Option<u64>,
    /// Seconds between applications of the per-device retention settings [default: 60].
    #[arg(long)]
    pub retention_interval_s: Option<u64>,
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
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM file of the private key that goes with --tls-cert-file.
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// How other edges reach this one, `http://host:port`: a receiver of a handoff from here is
    /// told it [default: http:// and the address it listens on].
    #[arg(long)]
    pub advertise_url: Option<String>,
    /// What a departure does with the device's data: `drop` (at once, paper 002) or `cloud`
    /// (dropped only once the sink has it in the cloud; needs --sink) [default: drop].
    #[arg(long)]
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
    auth_token_file: Option<PathBuf>,
    insecure: Option<bool>,
    body_bytes_max: Option<usize>,
    batch_readings_max: Option<usize>,
    concurrent_requests_max: Option<usize>,
    query_readings_max: Option<usize>,
    max_result_count: Option<usize>,
    mqtt_broker: Option<String>,
    mqtt_topic: Option<String>,
    mqtt_client_id: Option<String>,
    header_timeout_s: Option<u64>,
    body_timeout_s: Option<u64>,
    drain_timeout_s: Option<u64>,
    retention_interval_s: Option<u64>,
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
    /// The engine's log budget (`Options::log_bytes_max`); None: the engine's default.
    pub log_budget_bytes: Option<u64>,
    /// The bearer token, if auth is on.
    pub auth_token: Option<Vec<u8>>,
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

#[derive(Debug, Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub topic: String,
    pub client_id: String,
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
            data,
            listen: access.listen,
            durability,
            durability_text,
            log_budget_bytes: args
                .log_budget_mib
                .or(file.log_budget_mib)
                .map(|mib| mib << 20),
            management_time_ms: args
                .management_time_ms
                .or(file.management_time_ms)
                .unwrap_or(60_000),
            auth_token: access.auth_token,
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
            "authEnabled": self.auth_token.is_some(),
            "insecure": self.insecure,
            "bodyBytesMax": self.body_bytes_max,
            "batchReadingsMax": self.batch_readings_max,
            "concurrentRequestsMax": self.concurrent_requests_max,
            "queryReadingsMax": self.query_readings_max,
            "maxResultCount": self.max_result_count,
            "mqtt": self.mqtt.as_ref().map(|m| serde_json::json!({
                "broker": format!("{}:{}", m.host, m.port),
                "topic": m.topic,
                "clientId": m.client_id,
            })),
            "headerTimeoutS": self.header_timeout.as_secs(),
            "bodyTimeoutS": self.body_timeout.as_secs(),
            "drainTimeoutS": self.drain_timeout.as_secs(),
            "retentionIntervalS": self.retention_interval.as_secs(),
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
            .min(roamkv_engine::limits::BATCH_RECORDS_MAX),
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

fn resolve_mqtt(args: &ServeArgs, file: &FileConfig) -> Result<Option<MqttConfig>, String> {
    let Some(broker) = args.mqtt_broker.clone().or(file.mqtt_broker.clone()) else {
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
    parse_broker(&broker, topic, client_id).map(Some)
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

fn parse_broker(broker: &str, topic: String, client_id: String) -> Result<MqttConfig, String> {
    let (host, port) = broker
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
}
