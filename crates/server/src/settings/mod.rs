//! The server's settings: command-line flags, an optional TOML file with the same names, and
//! the defaults. A flag given on the command line wins over the file.
//!
//! One file for each thing configured: the flags and the file's keys (`args`), who may talk to
//! the server and how (`access`, `tls`), the bounds of requests, time and space (`limits`), the
//! MQTT bus (`mqtt`), the cloud sink with what a departure does (`cloud`), how handoffs reach the
//! next edges (`peer`), and the log (`logs`); what SIGHUP changes while the server runs
//! (`reload`). This module merges them into one checked `Config`. It imports no other room of the
//! server: every room may read the settings.

mod access;
mod args;
mod cloud;
mod limits;
mod logs;
mod mqtt;
mod peer;
pub mod reload;
#[cfg(test)]
mod tests;
pub mod tls;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use roamkv_engine::{Durability, FailPoints};

pub use access::Tokens;
use access::{Access, resolve_tls};
use args::FileConfig;
pub use args::ServeArgs;
pub use cloud::{OnDepart, SinkSettings};
use cloud::{resolve_on_depart, resolve_sink};
pub use limits::{
    BACKUP_RATE_MIB_DEFAULT, INDEX_MEMORY_MIB_DEFAULT, LOG_BUDGET_MIB_DEFAULT,
    LOWER_MEMORY_MIB_DEFAULT, SEGMENT_MIB_DEFAULT, Sizes,
};
use limits::{
    Limits, Timeouts, backup_bytes_per_sec, commit_delay, export_bytes_per_sec,
    retention_default_ms,
};
use logs::resolve_logs;
pub use logs::{LogFormat, LogSettings};
use mqtt::resolve_mqtt;
pub use mqtt::{
    MQTT_QUEUE_BYTES_MAX_DEFAULT, MQTT_REPUBLISH_PREFIX_DEFAULT, MQTT_TOPIC_DEFAULT, MqttConfig,
    MqttTls,
};
pub use peer::PeerSettings;
use peer::resolve_peer;
use tls::TlsFiles;

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
    /// How long a small group of writes waits for company under `sync` (`--commit-delay-us`);
    /// zero: never.
    pub commit_delay: Duration,
    pub query_readings_max: usize,
    pub max_result_count: usize,
    pub mqtt: Option<MqttConfig>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub drain_timeout: Duration,
    pub retention_interval: Duration,
    /// What a backup reads per second (`--backup-rate-mib`); 0: no limit.
    pub backup_bytes_per_sec: u64,
    /// What an export writes per second while ingest runs (`--export-rate-mib`); 0: no limit.
    pub export_bytes_per_sec: u64,
    /// The maximum age of the readings of devices without a setting of their own
    /// (`--retention-default-h`); None: no default. Until `start` settles it, the value given
    /// (if `retention_default_given`); then the one in force (retention/store.rs).
    pub retention_default_ms: Option<u64>,
    /// Whether `--retention-default-h` (or its environment variable or file key) was given;
    /// if not, the data directory's recorded default holds (retention/store.rs).
    pub retention_default_given: bool,
    /// Whether events are indexed by id (`--event-id-index`).
    pub event_id_index: bool,
    /// The cloud sink, if one is configured.
    pub sink: Option<SinkSettings>,
    pub on_depart: OnDepart,
    /// How other edges reach this one (None: from the address it listens on).
    pub advertise_url: Option<String>,
    /// How this edge reaches the next edges of its handoffs: the token it presents, their CA.
    pub peer: PeerSettings,
    /// HTTPS, when a certificate and key are given.
    pub tls: Option<TlsFiles>,
    /// The log's level, format and access log.
    pub logs: LogSettings,
    /// The flags (and environment) these settings were resolved from: SIGHUP resolves them
    /// again with the config file as it is then (reload.rs).
    pub source: ServeArgs,
    /// The engine's test hooks (`Options::fail_points`), none armed: tests of the server arm
    /// them through it, e.g. a slow group commit.
    pub fail_points: Arc<FailPoints>,
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
            commit_delay: commit_delay(args, &file)?,
            query_readings_max: limits.query_readings_max,
            max_result_count: limits.max_result_count,
            mqtt: resolve_mqtt(args, &file)?,
            header_timeout: timeouts.header,
            body_timeout: timeouts.body,
            drain_timeout: timeouts.drain,
            retention_interval: timeouts.retention_interval,
            backup_bytes_per_sec: backup_bytes_per_sec(args, &file)?,
            export_bytes_per_sec: export_bytes_per_sec(args, &file)?,
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
            peer: resolve_peer(args, &file)?,
            tls: resolve_tls(args, &file)?,
            logs: resolve_logs(args, &file)?,
            source: args.clone(),
            fail_points: Arc::default(),
        })
        .and_then(|config| {
            if config.on_depart == OnDepart::Cloud && config.sink.is_none() {
                Err(
                    "--on-depart cloud needs a cloud sink: give --sink postgres://... or kafka://... \
                     (or `sink` in the config file, or $ROAMKV_SINK)"
                        .into(),
                )
            } else {
                Ok(config)
            }
        })
    }

    /// The bearer tokens, as the server checks them.
    pub fn tokens(&self) -> Tokens {
        Tokens {
            write: self.auth_token.clone(),
            read_only: self.read_only_token.clone(),
        }
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
            "commitDelayUs": self.commit_delay.as_micros() as u64,
            "queryReadingsMax": self.query_readings_max,
            "maxResultCount": self.max_result_count,
            "mqtt": self.mqtt.as_ref().map(|m| serde_json::json!({
                "broker": format!("{}:{}", m.host, m.port),
                "tls": m.tls.is_some(),
                "topic": m.topic,
                "clientId": m.client_id,
                "republishPrefix": m.republish_prefix,
                "username": m.username,
                "queueBytesMax": m.queue_bytes_max,
            })),
            "headerTimeoutS": self.header_timeout.as_secs(),
            "bodyTimeoutS": self.body_timeout.as_secs(),
            "drainTimeoutS": self.drain_timeout.as_secs(),
            "retentionIntervalS": self.retention_interval.as_secs(),
            "retentionDefaultH": self.retention_default_ms.map_or(0, |ms| ms / 3_600_000),
            "eventIdIndex": self.event_id_index,
            "sink": self.sink.as_ref().map(|s| roamkv_sink::redact(&s.url)),
            "onDepart": self.on_depart.name(),
            "peer": {
                "token": self.peer.token.is_some(),
                "caFile": self.peer.ca_file.as_ref().map(|p| p.display().to_string()),
            },
            "tls": self.tls.as_ref().map(|t| serde_json::json!({
                "certFile": t.cert_file.display().to_string(),
                "keyFile": t.key_file.display().to_string(),
            })),
            "logLevel": self.logs.level,
            "logFormat": self.logs.format.name(),
            "accessLog": self.logs.access_log,
        })
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

fn read_file_config(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading config file {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}
