//! The MQTT bus: the broker, its topics (EdgeX's layout by default), credentials and TLS.

use std::path::PathBuf;

use super::args::{FileConfig, ServeArgs};

/// Default EdgeX message-bus topic filter for events (EdgeX publishes on
/// edgex/events/device/{service}/{profile}/{device}/{source}).
pub const MQTT_TOPIC_DEFAULT: &str = "edgex/events/device/#";
/// Where core-data publishes the events it takes over REST.
pub const MQTT_REPUBLISH_PREFIX_DEFAULT: &str = "edgex/events/core";
/// `--mqtt-queue-bytes-max`'s default: the queue only has to keep MQTT's write slots fed
/// (routes/mqtt, `IN_FLIGHT_EVENTS_MAX`: 1,024 events), not to hold a backlog, which the broker
/// keeps (QoS 1) or drops (QoS 0) by its own limits. 16 MiB is ~5,000 events of 10 readings
/// (~3 KB each as device-sdk-go v4 sends them) or ~600 of 100: more than the write slots take
/// at once at 10 readings an event, and small beside the engine's own memory (index 128 MiB,
/// lower tier 64 MiB).
pub const MQTT_QUEUE_BYTES_MAX_DEFAULT: usize = 16 << 20;

#[derive(Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub topic: String,
    pub client_id: String,
    /// Where REST-posted events go on the bus (ingest/republish.rs); None: nowhere.
    pub republish_prefix: Option<String>,
    /// TLS to the broker (an mqtts:// broker), trusting the system's CAs and these.
    pub tls: Option<MqttTls>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// `--mqtt-queue-bytes-max`: messages taken from the broker and not yet being written, at
    /// most this many bytes (and one message more: an empty queue takes any message).
    pub queue_bytes_max: usize,
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
            .field("queue_bytes_max", &self.queue_bytes_max)
            .finish()
    }
}

pub(super) fn resolve_mqtt(
    args: &ServeArgs,
    file: &FileConfig,
) -> Result<Option<MqttConfig>, String> {
    let username = args.mqtt_username.clone().or(file.mqtt_username.clone());
    let password_file = args
        .mqtt_password_file
        .clone()
        .or(file.mqtt_password_file.clone());
    let ca_file = args.mqtt_ca_file.clone().or(file.mqtt_ca_file.clone());
    let Some(broker) = args.mqtt_broker.clone().or(file.mqtt_broker.clone()) else {
        let republish =
            args.mqtt_republish_prefix.is_some() || file.mqtt_republish_prefix.is_some();
        let queue = args.mqtt_queue_bytes_max.is_some() || file.mqtt_queue_bytes_max.is_some();
        if username.is_some() || password_file.is_some() || ca_file.is_some() || republish || queue
        {
            return Err(
                "MQTT credentials, a CA file, a republish prefix or a queue bound without \
                 --mqtt-broker"
                    .into(),
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
    mqtt.queue_bytes_max = match args.mqtt_queue_bytes_max.or(file.mqtt_queue_bytes_max) {
        Some(0) => return Err("--mqtt-queue-bytes-max must be at least 1".into()),
        Some(bytes) => bytes,
        None => MQTT_QUEUE_BYTES_MAX_DEFAULT,
    };
    Ok(Some(mqtt))
}

/// `host:port`, `mqtt://host:port` or `tcp://host:port` (plain); `mqtts://`, `ssl://` or
/// `tls://` (TLS: EdgeX names the protocols tcp and ssl).
pub(super) fn parse_broker(
    broker: &str,
    topic: String,
    client_id: String,
) -> Result<MqttConfig, String> {
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
        queue_bytes_max: MQTT_QUEUE_BYTES_MAX_DEFAULT,
    })
}
