//! The Kafka destination (`--sink kafka://HOST:PORT[,…]/TOPIC`): the same contract as the
//! PostgreSQL one (db.rs), on Kafka's exactly-once machinery:
//!
//! - one producer per connection, idempotent and transactional, its `transactional.id`
//!   `roamkv-sink.<edge id>`: starting it fences any earlier producer of this edge (a crashed
//!   process, or a session the sink gave up on) and finishes or aborts its open transaction;
//! - one Kafka transaction per batch holds its records (data topic, keyed by device) and the
//!   sink's new position (offsets topic, keyed by edge id), so a `read_committed` consumer sees
//!   a batch whole or not at all, and the position never disagrees with the data;
//! - at each connection the position is read back from the offsets topic (offsets.rs): the tail
//!   resumes from what Kafka committed, whatever this process believed;
//! - a scan (first start, gap, new generation) is not idempotent here as it is in a keyed
//!   table: each chunk's transaction also records the last key it exported, and a scan that
//!   starts again skips up to it; and the tail leaves out what a scan exported (a scan reads
//!   the engine as of a read view, which may end past the position the tail starts from:
//!   `Offsets::snapshot_runs`).
//!
//! Another process under this edge's identity fences this one (ProducerFenced): the sink stops,
//! as it does when another process moves the PostgreSQL cursor. Every other Kafka error ends
//! the connection and is retried with a new producer, which reads the position again.

mod classify;
pub mod offsets;
pub mod record;
pub mod url;

use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;

use crate::config::SinkConfig;
use crate::error::{DbError, redact};
use crate::rows::Rows;
use classify::classify;
use record::Offsets;
use url::KafkaUrl;
pub use url::OFFSETS_SUFFIX;

/// The prefix of the producer's transactional id; the edge id follows.
pub const TRANSACTIONAL_ID_PREFIX: &str = "roamkv-sink.";
/// How long the cluster may take to answer a metadata request before the connection is
/// retried: as long as the PostgreSQL sink waits for a connection, which `Sink::start` (and so
/// the server's start) waits for when the brokers are away.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
/// How long starting the transactional producer (finding its coordinator, fencing an earlier
/// one, which waits for that one's open transaction to end) may take.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a commit may take (its records delivered to every in-sync replica): a leader's
/// failover takes a few seconds.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(30);
/// The broker aborts a transaction of this producer left open this long (a process that died
/// mid-transaction); librdkafka caps each record's delivery time at it too.
const TRANSACTION_TIMEOUT_MS: &str = "60000";
/// The producer's compression of record batches (every Kafka client reads lz4).
const COMPRESSION: &str = "lz4";
/// A full producer queue waits this long before a record is offered again.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(10);

/// A connection to the cluster: the transactional producer and the position Kafka holds.
pub struct Kafka {
    producer: Arc<ThreadedProducer<DefaultProducerContext>>,
    url: KafkaUrl,
    edge_id: String,
    offsets_topic: String,
    offsets_partition: i32,
    /// What the offsets topic holds for this edge (None: nothing yet): read at connection,
    /// then moved by each commit this producer makes (it is the only writer: fenced otherwise).
    offsets: Option<Offsets>,
    /// A scan's run begun (`scan_began`), recorded with its first chunk.
    run_begun: Option<record::SnapshotRun>,
}

impl Kafka {
    /// Checks the data topic exists, makes the offsets topic if missing, starts the
    /// transactional producer (fencing earlier ones) and reads the edge's committed position.
    pub async fn connect(sink: &SinkConfig) -> Result<Kafka, DbError> {
        let url = KafkaUrl::parse(&sink.url)?;
        let mut settings = ClientConfig::new();
        for (key, value) in
            url.client_settings(sink.password.as_deref(), sink.ca_file.as_deref())?
        {
            settings.set(key, value);
        }
        settings.set("client.id", format!("roamkv-sink.{}", sink.edge_id));
        let mut producer_settings = settings.clone();
        producer_settings
            .set(
                "transactional.id",
                format!("{TRANSACTIONAL_ID_PREFIX}{}", sink.edge_id),
            )
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
            // Java's default partitioner: a Java producer of the same key picks the same
            // partition.
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            // The records are JSON with the value in base64: lz4 shrinks what the brokers write,
            // replicate and keep, for little CPU here (docs/BENCHMARKS.md: the drain about 1.2x
            // faster with it on the test cluster, whose brokers share the machine's cores).
            .set("compression.type", COMPRESSION);
        let producer: ThreadedProducer<DefaultProducerContext> = producer_settings
            .create()
            .map_err(|e| classify("making a Kafka producer", &e))?;
        let producer = Arc::new(producer);
        let offsets_topic = format!("{}{OFFSETS_SUFFIX}", url.topic);
        let context = format!("connecting to {}", redact(&sink.url));

        let data_topic = url.topic.clone();
        let (brokers, partitions) = topic_metadata(&producer, &data_topic, &context).await?;
        if partitions.is_none() {
            return Err(DbError::Fatal(format!(
                "{context}: the topic {data_topic} does not exist on the cluster ({brokers} \
                 brokers answered); create it, e.g. `kafka-topics.sh --create --topic \
                 {data_topic} --partitions 6 --replication-factor 3 --config \
                 min.insync.replicas=2` (the sink makes only its offsets topic)"
            )));
        }
        let lookup = {
            let producer = Arc::clone(&producer);
            let (topic, context) = (offsets_topic.clone(), context.clone());
            move || blocking_topic_metadata(&producer, &topic, &context)
        };
        let offsets_partitions = offsets::ensure_topic(&settings, &offsets_topic, lookup).await?;
        let offsets_partition = offsets::partition_of(&sink.edge_id, offsets_partitions);

        let (edge_id, topic) = (sink.edge_id.clone(), offsets_topic.clone());
        let init = Arc::clone(&producer);
        let offsets = tokio::task::spawn_blocking(move || {
            init.init_transactions(INIT_TIMEOUT)
                .map_err(|e| classify("starting the transactional producer", &e))?;
            offsets::read_last(&settings, &topic, offsets_partition, &edge_id)
        })
        .await
        .map_err(|e| DbError::Fatal(format!("the Kafka set-up task failed: {e}")))??;
        Ok(Kafka {
            producer,
            url,
            edge_id: sink.edge_id.clone(),
            offsets_topic,
            offsets_partition,
            offsets,
            run_begun: None,
        })
    }

    /// A scan (or a scan started again) reads the engine as of a view that ends at
    /// `view_end` ([segment, offset]).
    pub fn scan_began(&mut self, view_end: [u64; 2]) {
        self.run_begun = Some(record::SnapshotRun {
            view_end,
            through: None,
        });
    }

    /// Whether a scan exported the reading `key` that the log holds in a batch ending at
    /// `batch_end`: the tail from the scan's position leaves it out (`Offsets::exported_by_scan`).
    pub fn exported_by_scan(&self, batch_end: [u64; 2], key: (&str, &str, i64)) -> bool {
        self.offsets
            .as_ref()
            .is_some_and(|o| o.exported_by_scan(batch_end, key))
    }

    /// This edge's position as Kafka holds it: (generation, position, snapshot pending).
    pub fn cursor(&self) -> Option<(i64, String, bool)> {
        self.offsets
            .as_ref()
            .map(|o| (o.generation, o.position.clone(), o.snapshot_pending))
    }

    /// Starts generation `generation` at `position` (snapshot pending), replacing `replaces`.
    pub async fn start_generation(
        &mut self,
        generation: i64,
        position: &str,
        replaces: i64,
    ) -> Result<(), DbError> {
        let held = self.offsets.as_ref().map_or(0, |o| o.generation);
        if held != replaces {
            return Err(DbError::Fenced(format!(
                "edge {} is at generation {held} in Kafka, not {replaces}",
                self.edge_id
            )));
        }
        let next = Offsets {
            generation,
            position: position.to_string(),
            snapshot_pending: true,
            snapshot_runs: Vec::new(),
        };
        self.commit(Vec::new(), next).await
    }

    /// One transaction: the readings and departures of `rows`, and the position moved from
    /// `from` to `to` (`None`: a scan's chunk; the position stays, the chunk's last key is
    /// recorded and the keys a previous run of the scan exported are skipped).
    pub async fn write(
        &mut self,
        generation: i64,
        rows: &Rows,
        cursor: Option<(&str, &str, bool)>,
    ) -> Result<(), DbError> {
        let held = self.offsets.clone().ok_or_else(|| {
            DbError::Fatal(format!(
                "edge {} has no position in Kafka yet",
                self.edge_id
            ))
        })?;
        let mut next = held.clone();
        let mut skip_to = None;
        match cursor {
            Some((from, to, pending)) => {
                if held.generation != generation || held.position != from {
                    return Err(DbError::Fenced(format!(
                        "the position of edge {} in Kafka (generation {}, {}) is not \
                         (generation {generation}, {from}): another process is writing under \
                         this edge's identity",
                        self.edge_id, held.generation, held.position
                    )));
                }
                next.position = to.to_string();
                next.snapshot_pending = pending;
                if pending {
                    // A gap: a scan from a new position follows; the old runs say nothing of it.
                    next.snapshot_runs.clear();
                }
            }
            None => {
                skip_to = held.snapshot_through().cloned();
                if let Some(run) = self.run_begun.take() {
                    next.snapshot_runs.push(run);
                }
            }
        }
        let mut records = Vec::with_capacity(rows.len() + rows.departures.len());
        for i in 0..rows.len() {
            let key = (&rows.devices[i], &rows.sensors[i], rows.ts_ns[i]);
            if skip_to.as_ref().is_some_and(|(d, s, t)| key <= (d, s, *t)) {
                continue;
            }
            if cursor.is_none()
                && let Some(run) = next.snapshot_runs.last_mut()
            {
                run.through = Some((key.0.clone(), key.1.clone(), key.2));
            }
            let value = record::reading(&self.edge_id, key.0, key.1, key.2, &rows.values[i]);
            records.push((key.0.clone(), value));
        }
        for (device, position) in &rows.departures {
            records.push((
                device.clone(),
                record::departure(&self.edge_id, device, position),
            ));
        }
        if cursor.is_none() && records.is_empty() {
            // Nothing new in this chunk: the run (if it begins here) is recorded with the next
            // commit; until then it exported nothing, which is what Kafka says.
            self.offsets = Some(next);
            return Ok(());
        }
        self.commit(records, next).await
    }

    /// Sends `records` (key, value) to the data topic and `next` to the offsets topic in one
    /// transaction, on the blocking pool (librdkafka's transaction calls block).
    async fn commit(
        &mut self,
        records: Vec<(String, Vec<u8>)>,
        next: Offsets,
    ) -> Result<(), DbError> {
        let producer = Arc::clone(&self.producer);
        let topic = self.url.topic.clone();
        let (offsets_topic, partition) = (self.offsets_topic.clone(), self.offsets_partition);
        let key = self.edge_id.clone();
        let value = next.encode();
        tokio::task::spawn_blocking(move || {
            let outcome = transaction(&producer, &topic, &records, |p| {
                send(
                    p,
                    BaseRecord::to(&offsets_topic)
                        .partition(partition)
                        .key(&key)
                        .payload(&value),
                )
            });
            if let Err(e) = &outcome {
                // An abortable error leaves the transaction open; the connection ends either way
                // (a new producer reads the position again), so an abort that fails is moot.
                if let KafkaError::Transaction(t) = e
                    && t.txn_requires_abort()
                {
                    let _ = producer.abort_transaction(COMMIT_TIMEOUT);
                }
            }
            outcome.map_err(|e| classify("committing a batch to Kafka", &e))
        })
        .await
        .map_err(|e| DbError::Fatal(format!("the Kafka commit task failed: {e}")))??;
        self.offsets = Some(next);
        Ok(())
    }
}

/// begin, the records, `last` (the offsets record), the crash point, commit.
fn transaction(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    records: &[(String, Vec<u8>)],
    last: impl FnOnce(&ThreadedProducer<DefaultProducerContext>) -> Result<(), KafkaError>,
) -> Result<(), KafkaError> {
    producer.begin_transaction()?;
    for (key, value) in records {
        send(
            producer,
            BaseRecord::to(topic).key(key.as_bytes()).payload(value),
        )?;
    }
    last(producer)?;
    roamkv_engine::crash_point("sink.before_commit");
    producer.commit_transaction(COMMIT_TIMEOUT)
}

/// Enqueues one record, waiting while the producer's queue is full.
fn send<K: rdkafka::message::ToBytes + ?Sized, P: rdkafka::message::ToBytes + ?Sized>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, K, P>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(QUEUE_FULL_WAIT);
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// The brokers that answered and `topic`'s partition count (None: no such topic; a partition
/// without a leader is an error worth retrying), on the blocking pool.
async fn topic_metadata(
    producer: &Arc<ThreadedProducer<DefaultProducerContext>>,
    topic: &str,
    context: &str,
) -> Result<(usize, Option<i32>), DbError> {
    let producer = Arc::clone(producer);
    let (topic, context) = (topic.to_string(), context.to_string());
    tokio::task::spawn_blocking(move || blocking_topic_metadata(&producer, &topic, &context))
        .await
        .map_err(|e| DbError::Fatal(format!("the Kafka metadata task failed: {e}")))?
}

fn blocking_topic_metadata(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    context: &str,
) -> Result<(usize, Option<i32>), DbError> {
    let metadata = producer
        .client()
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|e| classify(context, &e))?;
    let brokers = metadata.brokers().len();
    let Some(found) = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
    else {
        return Ok((brokers, None));
    };
    if found.partitions().iter().any(|p| p.leader() < 0) {
        return Err(DbError::Retryable(format!(
            "{context}: a partition of {topic} has no leader now"
        )));
    }
    Ok((brokers, Some(found.partitions().len() as i32)))
}
