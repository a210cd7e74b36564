//! Where the sink writes, chosen by the URL's scheme: a PostgreSQL-protocol database (db.rs) or
//! a Kafka topic (kafka/). Both keep the one contract the tail (tail.rs) relies on: this edge's
//! cursor (generation, position, snapshot pending) read back at each connection, and one atomic
//! write of a batch's readings and departures with the cursor moved from where the sink
//! believes it is (or a scan's chunk, without the cursor), refused as `Fenced` when another
//! process moved it.

use crate::config::SinkConfig;
use crate::db::Db;
use crate::error::DbError;
use crate::kafka::Kafka;
use crate::rows::Rows;

pub(crate) enum Destination {
    Postgres(Db),
    Kafka(Box<Kafka>),
}

impl Destination {
    pub(crate) async fn connect(sink: &SinkConfig) -> Result<Destination, DbError> {
        if crate::kafka::url::is_kafka(&sink.url) {
            Ok(Destination::Kafka(Box::new(Kafka::connect(sink).await?)))
        } else {
            Ok(Destination::Postgres(Db::connect(sink).await?))
        }
    }

    /// This edge's cursor: (generation, position, snapshot pending).
    pub(crate) async fn cursor(&self) -> Result<Option<(i64, String, bool)>, DbError> {
        match self {
            Destination::Postgres(db) => db.cursor().await,
            Destination::Kafka(kafka) => Ok(kafka.cursor()),
        }
    }

    /// Starts generation `generation` at `position` (snapshot pending), replacing `replaces`.
    pub(crate) async fn start_generation(
        &mut self,
        generation: i64,
        position: &str,
        replaces: i64,
    ) -> Result<(), DbError> {
        match self {
            Destination::Postgres(db) => db.start_generation(generation, position, replaces).await,
            Destination::Kafka(kafka) => {
                kafka.start_generation(generation, position, replaces).await
            }
        }
    }

    /// One atomic write: `rows`, and the cursor moved from `from` to `to` (`None`: a scan's
    /// chunk, the cursor untouched).
    pub(crate) async fn write(
        &mut self,
        generation: i64,
        rows: &Rows,
        cursor: Option<(&str, &str, bool)>,
    ) -> Result<(), DbError> {
        match self {
            Destination::Postgres(db) => db.write(generation, rows, cursor).await,
            Destination::Kafka(kafka) => kafka.write(generation, rows, cursor).await,
        }
    }

    /// A scan begins, reading the engine as of a view that ends at `view_end`
    /// ([segment, offset]). A keyed table needs nothing of it (a reading exported twice is
    /// one row); Kafka records it to leave out of the tail what the scan exported.
    pub(crate) fn scan_began(&mut self, view_end: [u64; 2]) {
        if let Destination::Kafka(kafka) = self {
            kafka.scan_began(view_end);
        }
    }

    /// Whether the last scan exported the reading `key` the log holds in a batch ending at
    /// `batch_end`, so that the tail must leave it out (never, for a keyed table).
    pub(crate) fn exported_by_scan(&self, batch_end: [u64; 2], key: (&str, &str, i64)) -> bool {
        match self {
            Destination::Postgres(_) => false,
            Destination::Kafka(kafka) => kafka.exported_by_scan(batch_end, key),
        }
    }
}
