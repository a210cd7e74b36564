//! The connection to the cloud database and the sink's transactions (schema.rs has the SQL).
//! Errors are sorted into those a retry may cure (the connection, a restart, serialization
//! conflicts, too many connections) and those it cannot (schema, permissions, data), and the
//! one that must stop the sink: another process moved this edge's cursor.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::schema;

/// Longest wait for a connection to be set up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbError {
    /// Worth retrying: the database is down, restarting, overloaded, or a transaction lost a
    /// serialization conflict.
    Retryable(String),
    /// A retry will fail the same way (schema, permissions, bad data): the sink stops and says
    /// so; the log's hold keeps the backlog up to its cap.
    Fatal(String),
    /// Another process moved this edge's cursor: two writers under one identity.
    Fenced(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Retryable(m) => write!(f, "{m} (retrying)"),
            DbError::Fatal(m) => write!(f, "{m}"),
            DbError::Fenced(m) => write!(f, "{m}"),
        }
    }
}

fn classify(context: &str, error: &tokio_postgres::Error) -> DbError {
    let message = format!("{context}: {error}");
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

/// The URL with its password hidden, for messages and the status page.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Rows of one transaction.
#[derive(Debug, Default)]
pub struct Rows {
    pub devices: Vec<String>,
    pub sensors: Vec<String>,
    pub ts_ns: Vec<i64>,
    pub values: Vec<Vec<u8>>,
    /// (device, position after its DEPART).
    pub departures: Vec<(String, String)>,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.devices.len()
    }
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty() && self.departures.is_empty()
    }
}

pub struct Db {
    client: Client,
    edge_id: String,
}

impl Db {
    /// Connects, sets synchronous_commit on (the log's hold is released on the strength of a
    /// commit) and makes the tables if they are missing.
    pub async fn connect(url: &str, edge_id: &str) -> Result<Db, DbError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            DbError::Fatal(format!("the sink URL {} is not valid: {e}", redact(url)))
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("roamkv-sink");
        let (client, connection) = config
            .connect(NoTls)
            .await
            .map_err(|e| classify(&format!("connecting to {}", redact(url)), &e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "sink connection ended");
            }
        });
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
        Ok(Db {
            client,
            edge_id: edge_id.to_string(),
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
                schema::INSERT_READINGS,
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
                schema::INSERT_DEPARTURES,
                &[&self.edge_id, &devices, &positions],
            )
            .await
            .map_err(|e| classify("inserting departures", &e))?;
        }
        if let Some((from, to, pending)) = cursor {
            let changed = tx
                .execute(
                    schema::ADVANCE_CURSOR,
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
}
