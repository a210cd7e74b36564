//! The Kafka sink's URL: `kafka://HOST:PORT[,HOST:PORT...]/TOPIC`, and the client settings it
//! and the sink's other settings (`--sink-ca-file`, `--sink-password-file`) make.
//!
//! - `kafka://` is plaintext, `kafka+ssl://` TLS (librdkafka's OpenSSL: the system's CA
//!   certificates, or `--sink-ca-file` instead; the broker's name is verified);
//! - `USER[:PASSWORD]@` before the brokers adds SASL (`?sasl=PLAIN`, `SCRAM-SHA-256` or
//!   `SCRAM-SHA-512`, default `SCRAM-SHA-512`); the password of `--sink-password-file` wins over
//!   one in the URL; a user without a password is refused at start.
//!
//! Only plaintext is tested against a broker here (the test cluster has no TLS or SASL
//! listener): the TLS and SASL settings are librdkafka's own, checked by unit tests only.

use crate::error::{DbError, redact};

/// The offsets topic of data topic `T` is `T` + this.
pub const OFFSETS_SUFFIX: &str = ".roamkv-offsets";

/// The schemes a Kafka sink URL may have.
pub const SCHEMES: [&str; 2] = crate::config::KAFKA_SCHEMES;

/// A Kafka sink URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaUrl {
    /// `HOST:PORT,...`, as librdkafka's `bootstrap.servers` takes them.
    pub brokers: String,
    pub topic: String,
    pub tls: bool,
    pub user: Option<String>,
    pub password: Option<String>,
    /// The SASL mechanism, when there is a user.
    pub mechanism: String,
}

/// Whether `url` names a Kafka sink (by its scheme).
pub fn is_kafka(url: &str) -> bool {
    SCHEMES.iter().any(|s| url.starts_with(s))
}

/// The longest topic name Kafka accepts, less the offsets topic's suffix.
const TOPIC_BYTES_MAX: usize = 249 - OFFSETS_SUFFIX.len();

impl KafkaUrl {
    pub fn parse(url: &str) -> Result<KafkaUrl, DbError> {
        let bad = |why: &str| {
            DbError::Fatal(format!(
                "the sink URL {} is not valid: {why} (the form is \
                 kafka://HOST:PORT[,HOST:PORT...]/TOPIC, or kafka+ssl:// for TLS)",
                redact(url)
            ))
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("kafka+ssl://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("kafka://") {
            (false, rest)
        } else {
            return Err(bad("it does not start with kafka:// or kafka+ssl://"));
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, topic) = rest.split_once('/').ok_or_else(|| bad("no /TOPIC"))?;
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, authority),
        };
        if hosts.is_empty() {
            return Err(bad("no broker"));
        }
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("broker {host:?} has no :PORT")))?;
            if name.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(&format!("broker {host:?} is not HOST:PORT")));
            }
        }
        let topic_ok = |t: &str| {
            !t.is_empty()
                && t.len() <= TOPIC_BYTES_MAX
                && t != "."
                && t != ".."
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !topic_ok(topic) {
            return Err(bad(&format!(
                "topic {topic:?}: a Kafka topic is 1 to {TOPIC_BYTES_MAX} of [a-zA-Z0-9._-]"
            )));
        }
        let (user, password) = match credentials {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((u, p)) => (Some(u.to_string()), Some(p.to_string())),
                None => (Some(c.to_string()), None),
            },
        };
        let mut mechanism = "SCRAM-SHA-512".to_string();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sasl", m)) if ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"].contains(&m) => {
                    mechanism = m.to_string();
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown parameter {pair:?} (the one parameter is sasl=PLAIN, \
                         SCRAM-SHA-256 or SCRAM-SHA-512)"
                    )));
                }
            }
        }
        Ok(KafkaUrl {
            brokers: hosts.to_string(),
            topic: topic.to_string(),
            tls,
            user,
            password,
            mechanism,
        })
    }

    /// librdkafka's settings for the connection: brokers, security protocol, CA file, SASL.
    /// `password` (from `--sink-password-file`) wins over the URL's.
    pub fn client_settings(
        &self,
        password: Option<&str>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Vec<(&'static str, String)>, DbError> {
        let mut settings = vec![("bootstrap.servers", self.brokers.clone())];
        let protocol = match (self.tls, self.user.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        settings.push(("security.protocol", protocol.into()));
        match (self.tls, ca_file) {
            (true, Some(path)) => settings.push(("ssl.ca.location", path.display().to_string())),
            (false, Some(path)) => {
                return Err(DbError::Fatal(format!(
                    "--sink-ca-file {} is given but the sink URL asks for no TLS: use \
                     kafka+ssl://",
                    path.display()
                )));
            }
            (true, None) | (false, None) => {}
        }
        if let Some(user) = &self.user {
            let password = password
                .map(str::to_string)
                .or_else(|| self.password.clone())
                .ok_or_else(|| {
                    DbError::Fatal(format!(
                        "the Kafka user {user} has no password: give --sink-password-file \
                         (or USER:PASSWORD@ in the URL)"
                    ))
                })?;
            settings.push(("sasl.mechanism", self.mechanism.clone()));
            settings.push(("sasl.username", user.clone()));
            settings.push(("sasl.password", password));
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_and_topic_are_read() {
        let url = KafkaUrl::parse("kafka://10.0.0.1:9092,kafka-2.fleet:9093/readings").expect("ok");
        assert_eq!(url.brokers, "10.0.0.1:9092,kafka-2.fleet:9093");
        assert_eq!(url.topic, "readings");
        assert!(!url.tls && url.user.is_none());
        let settings = url.client_settings(None, None).expect("settings");
        assert!(settings.contains(&("security.protocol", "plaintext".into())));
    }

    #[test]
    fn malformed_urls_are_refused_with_the_form() {
        for (url, why) in [
            ("kafka://127.0.0.1:9092", "no /TOPIC"),
            ("kafka:///readings", "no broker"),
            ("kafka://host/readings", "has no :PORT"),
            ("kafka://host:0/readings", "not HOST:PORT"),
            ("kafka://host:9092/a/b", "topic"),
            ("kafka://host:9092/", "topic"),
            ("kafka://host:9092/t?acks=1", "unknown parameter"),
            ("postgres://host/db", "does not start with"),
        ] {
            let e = KafkaUrl::parse(url).expect_err(url).to_string();
            assert!(e.contains(why), "{url}: {e}");
            assert!(e.contains("kafka://HOST:PORT"), "{url}: {e}");
        }
    }

    #[test]
    fn tls_and_sasl_map_onto_librdkafka_settings_and_the_password_file_wins() {
        let url =
            KafkaUrl::parse("kafka+ssl://edge:inurl@b1:9093/readings?sasl=PLAIN").expect("ok");
        let ca = std::path::Path::new("/etc/roamkv/ca.pem");
        let settings = url.client_settings(Some("fromfile"), Some(ca)).expect("ok");
        for want in [
            ("security.protocol", "sasl_ssl"),
            ("ssl.ca.location", "/etc/roamkv/ca.pem"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "edge"),
            ("sasl.password", "fromfile"),
        ] {
            assert!(
                settings.contains(&(want.0, want.1.into())),
                "{want:?} in {settings:?}"
            );
        }
        let no_password = KafkaUrl::parse("kafka://edge@b1:9092/readings").expect("ok");
        assert!(no_password.client_settings(None, None).is_err());
        let plain = KafkaUrl::parse("kafka://b1:9092/readings").expect("ok");
        let e = plain
            .client_settings(None, Some(ca))
            .expect_err("CA without TLS");
        assert!(e.to_string().contains("kafka+ssl://"), "{e}");
    }
}
