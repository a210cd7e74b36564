//! The connection to the cloud database and the sink's transactions (schema.rs has the SQL).
//! Errors are sorted into those a retry may cure (the connection, a restart, serialization
//! conflicts, too many connections) and those it cannot (schema, permissions, data), and the
//! one that must stop the sink: another process moved this edge's cursor.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::SinkConfig;
pub use crate::error::{DbError, redact};
use crate::explain::{self, Dialed, Peer};
pub use crate::rows::Rows;
use crate::schema;

/// Longest wait for a connection to be set up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the error is TLS refusing the server (a certificate not trusted, a name that does
/// not match): every retry would meet the same certificate.
fn is_tls_refusal(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map_or(e, |inner| inner as &(dyn std::error::Error + 'static));
        if inner.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        source = e.source();
    }
    false
}

/// What was dialed, for explaining a failed connection (roamkv_sink::explain); None for a Unix
/// socket (no TLS, no host to name).
fn dialed(config: &tokio_postgres::Config, tls: bool) -> Option<Dialed> {
    let host = match config.get_hosts().first()? {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        tokio_postgres::config::Host::Unix(_) => return None,
    };
    Some(Dialed {
        host,
        port: config.get_ports().first().copied().unwrap_or(5432),
        tls,
        peer: Peer::Database,
        ca_setting: "--sink-ca-file".into(),
    })
}

/// A failed connection: `classify`'s kinds, said as a user can act on it (explain.rs) when the
/// error is one explain knows (a certificate refused, a refused or timed-out connection).
fn classify_connect(
    context: &str,
    error: &tokio_postgres::Error,
    dialed: Option<&Dialed>,
) -> DbError {
    let sorted = classify(context, error);
    let Some(sentence) = dialed.and_then(|d| explain::explain(error, d)) else {
        return sorted;
    };
    let message = format!("{context}: {sentence} ({})", explain::chain(error));
    match sorted {
        DbError::Retryable(_) => DbError::Retryable(message),
        DbError::Fatal(_) => DbError::Fatal(message),
        other => other,
    }
}

fn classify(context: &str, error: &tokio_postgres::Error) -> DbError {
    let message = format!("{context}: {error}");
    if is_tls_refusal(error) {
        let why = std::error::Error::source(error)
            .map(|e| e.to_string())
            .unwrap_or_default();
        return DbError::Fatal(format!("{message}: {why}"));
    }
    let Some(code) = error.code() else {
        // No SQLSTATE: the connection itself (closed, refused, timed out).
        return DbError::Retryable(message);
    };
    let retryable = code.code().starts_with("08")
        || [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
        ]
        .contains(code);
    if retryable {
        DbError::Retryable(message)
    } else {
        DbError::Fatal(format!("{message} (SQLSTATE {})", code.code()))
    }
}

/// Checks the sink's URL, of either destination (`kafka://`, `kafka+ssl://`: kafka/url.rs;
/// anything else: PostgreSQL's); a malformed one is an error naming it (without its password).
pub fn parse_url(url: &str) -> Result<(), DbError> {
    if crate::kafka::url::is_kafka(url) {
        return crate::kafka::url::KafkaUrl::parse(url).map(|_| ());
    }
    postgres_config(url).map(|_| ())
}

/// A PostgreSQL sink URL, parsed.
fn postgres_config(url: &str) -> Result<tokio_postgres::Config, DbError> {
    url.parse()
        .map_err(|e| DbError::Fatal(format!("the sink URL {} is not valid: {e}", redact(url))))
}

/// The TLS set-up for `sslmode=require`: rustls with the system's CA certificates and those of
/// `ca_file`; the server's certificate chain and name are always verified (stricter than libpq's
/// `require`, which encrypts without checking who answers).
fn tls_connector(sink: &SinkConfig) -> Result<MakeRustlsConnect, DbError> {
    crate::tls::client_config(sink.ca_file.as_deref(), "the sink CA file")
        .map(MakeRustlsConnect::new)
        .map_err(DbError::Fatal)
}

pub struct Db {
    client: Client,
    edge_id: String,
    /// The per-batch statements, prepared once per connection (a statement sent as text is
    /// parsed and planned again on every execution: one more round trip per statement).
    insert_readings: Statement,
    insert_departures: Statement,
    advance_cursor: Statement,
}

impl Db {
    /// Connects (TLS when the URL asks for it), sets synchronous_commit on (the log's hold is
    /// released on the strength of a commit) and makes the tables if they are missing.
    pub async fn connect(sink: &SinkConfig) -> Result<Db, DbError> {
        let url = &sink.url;
        let mut config = postgres_config(url)?;
        if let Some(password) = &sink.password {
            config.password(password.as_bytes());
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("roamkv-sink");
        let context = format!("connecting to {}", redact(url));
        let dialed = dialed(&config, sink.wants_tls());
        let client = if sink.wants_tls() {
            let (client, connection) = config
                .connect(tls_connector(sink)?)
                .await
                .map_err(|e| classify_connect(&context, &e, dialed.as_ref()))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "sink connection ended");
                }
            });
            client
        } else {
            let (client, connection) = config
                .connect(NoTls)
                .await
                .map_err(|e| classify_connect(&context, &e, dialed.as_ref()))?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "sink connection ended");
                }
            });
            client
        };
        client
            .batch_execute("SET synchronous_commit = on")
            .await
            .map_err(|e| classify("setting synchronous_commit", &e))?;
        for statement in schema::CREATE_ALL {
            client
                .batch_execute(statement)
                .await
                .map_err(|e| classify("creating the sink's tables", &e))?;
        }
        let prepare = |sql: &'static str| {
            let client = &client;
            async move {
                client
                    .prepare(sql)
                    .await
                    .map_err(|e| classify("preparing the sink's statements", &e))
            }
        };
        let insert_readings = prepare(schema::INSERT_READINGS).await?;
        let insert_departures = prepare(schema::INSERT_DEPARTURES).await?;
        let advance_cursor = prepare(schema::ADVANCE_CURSOR).await?;
        Ok(Db {
            client,
            edge_id: sink.edge_id.clone(),
            insert_readings,
            insert_departures,
            advance_cursor,
        })
    }

    /// This edge's cursor row: (generation, position, snapshot pending).
    pub async fn cursor(&self) -> Result<Option<(i64, String, bool)>, DbError> {
        let rows = self
            .client
            .query(schema::READ_CURSOR, &[&self.edge_id])
            .await
            .map_err(|e| classify("reading the sink cursor", &e))?;
        Ok(rows.first().map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    /// Starts generation `generation` at `position` (snapshot pending), replacing `replaces`.
    pub async fn start_generation(
        &self,
        generation: i64,
        position: &str,
        replaces: i64,
    ) -> Result<(), DbError> {
        let changed = self
            .client
            .execute(
                schema::START_GENERATION,
                &[&self.edge_id, &generation, &position, &replaces],
            )
            .await
            .map_err(|e| classify("starting a sink generation", &e))?;
        if changed != 1 {
            return Err(DbError::Fenced(format!(
                "another process started a generation of edge {} first",
                self.edge_id
            )));
        }
        Ok(())
    }

    /// One transaction: the rows (ON CONFLICT DO NOTHING), the departures, and the cursor
    /// moved from `from` to `to` (`None`: rows only, the cursor untouched — snapshot chunks).
    pub async fn write(
        &mut self,
        generation: i64,
        rows: &Rows,
        cursor: Option<(&str, &str, bool)>,
    ) -> Result<(), DbError> {
        let tx = self
            .client
            .transaction()
            .await
            .map_err(|e| classify("beginning a transaction", &e))?;
        if !rows.devices.is_empty() {
            tx.execute(
                &self.insert_readings,
                &[
                    &rows.devices,
                    &rows.sensors,
                    &rows.ts_ns,
                    &rows.values,
                    &self.edge_id,
                ],
            )
            .await
            .map_err(|e| classify("inserting readings", &e))?;
        }
        if !rows.departures.is_empty() {
            let (devices, positions): (Vec<&str>, Vec<&str>) = rows
                .departures
                .iter()
                .map(|(d, p)| (d.as_str(), p.as_str()))
                .unzip();
            tx.execute(
                &self.insert_departures,
                &[&self.edge_id, &devices, &positions],
            )
            .await
            .map_err(|e| classify("inserting departures", &e))?;
        }
        if let Some((from, to, pending)) = cursor {
            let changed = tx
                .execute(
                    &self.advance_cursor,
                    &[&self.edge_id, &generation, &to, &pending, &from],
                )
                .await
                .map_err(|e| classify("advancing the sink cursor", &e))?;
            if changed != 1 {
                return Err(DbError::Fenced(format!(
                    "the cursor of edge {} (generation {generation}) is not at {from}: another \
                     process is writing under this edge's identity (a copied data directory?)",
                    self.edge_id
                )));
            }
        }
        roamkv_engine::crash_point("sink.before_commit");
        tx.commit()
            .await
            .map_err(|e| classify("committing a batch", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_password() {
        assert_eq!(
            redact("postgres://edge:s3cret@db.example:5432/fleet"),
            "postgres://edge:***@db.example:5432/fleet"
        );
        assert_eq!(redact("postgres://db/fleet"), "postgres://db/fleet");
        assert_eq!(redact("host=/tmp user=x"), "host=/tmp user=x");
    }

    #[test]
    fn a_key_written_twice_in_one_batch_is_one_row_with_the_last_value() {
        let mut rows = Rows::default();
        rows.push("car".into(), "speed".into(), 1, b"10".to_vec());
        rows.push("car".into(), "speed".into(), 2, b"20".to_vec());
        rows.push("car".into(), "speed".into(), 1, b"11".to_vec());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.ts_ns, vec![1, 2]);
        assert_eq!(rows.values, vec![b"11".to_vec(), b"20".to_vec()]);
    }
}
