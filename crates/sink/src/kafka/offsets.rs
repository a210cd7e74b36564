//! The offsets topic (`<topic>.roamkv-offsets`): made when missing (compacted, replicated as
//! the cluster allows), and read back at start, the way Kafka Connect's exactly-once source
//! connectors keep their offsets: the sink's transactional producer fences any earlier one of
//! this edge first (`init_transactions` also finishes or aborts its open transaction), then a
//! `read_committed` consumer reads the edge's partition to its end; the last record keyed by
//! the edge id is where the data topic is.
//!
//! Simplification: "its end" is the partition's last stable offset. Another edge's transaction
//! open on the same partition holds that offset back for as long as it is open (milliseconds; up
//! to `transaction.timeout.ms` if that edge died mid-transaction), and a record of this edge
//! committed after that transaction began would be missed. The partition is chosen by the edge
//! id's hash among `OFFSETS_PARTITIONS`, so only edges sharing a partition share the risk; the
//! sink reads again (up to `READ_ROUNDS` times) while the partition's high watermark is ahead of
//! what it read, which covers the common, short case.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;

use super::classify::classify;
use super::record::Offsets;
use crate::error::DbError;

/// Partitions of an offsets topic the sink makes (Kafka Connect makes 25 for a whole cluster of
/// connectors; an edge writes one small record per transaction).
pub const OFFSETS_PARTITIONS: i32 = 5;
/// How long the offsets topic may take to have a leader for every partition after it is made.
const TOPIC_READY_MAX: Duration = Duration::from_secs(15);
/// How long reading the offsets back may take before the attempt is retried.
const READ_MAX: Duration = Duration::from_secs(30);
/// Reads of the partition while its high watermark is ahead of the stable end.
const READ_ROUNDS: usize = 20;

/// The partition of `topic`'s `partitions` that holds `edge_id`'s offsets: FNV-1a of the id (a
/// hash fixed here, not the client's partitioner, so that the reader knows where to look).
pub fn partition_of(edge_id: &str, partitions: i32) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in edge_id.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % partitions.max(1) as u32) as i32
}

/// Makes `topic` compacted with `OFFSETS_PARTITIONS` partitions and replication
/// min(3, brokers) if it is missing, then waits until every partition has a leader. Returns its
/// partition count (an existing topic keeps its own).
pub async fn ensure_topic(
    settings: &ClientConfig,
    topic: &str,
    metadata: impl Fn() -> Result<(usize, Option<i32>), DbError>,
) -> Result<i32, DbError> {
    let (brokers, partitions) = metadata()?;
    if let Some(partitions) = partitions {
        return Ok(partitions);
    }
    let replication = brokers.clamp(1, 3) as i32;
    let min_isr = replication.min(2).to_string();
    let admin: AdminClient<DefaultClientContext> = settings
        .create()
        .map_err(|e| classify("making an admin client", &e))?;
    let new = NewTopic::new(
        topic,
        OFFSETS_PARTITIONS,
        TopicReplication::Fixed(replication),
    )
    .set("cleanup.policy", "compact")
    .set("min.insync.replicas", &min_isr);
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics([&new], &options)
        .await
        .map_err(|e| classify(&format!("making the offsets topic {topic}"), &e))?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(classify(
                    &format!("making the offsets topic {topic}"),
                    &KafkaError::AdminOp(code),
                ));
            }
        }
    }
    tracing::info!(%topic, replication, "cloud sink: made the Kafka offsets topic");
    let deadline = Instant::now() + TOPIC_READY_MAX;
    loop {
        if let Ok((_, Some(partitions))) = metadata() {
            return Ok(partitions);
        }
        if Instant::now() > deadline {
            return Err(DbError::Retryable(format!(
                "the offsets topic {topic} has no leader for every partition yet"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last offsets record of `edge_id` in `partition` of `topic`, read committed (blocking).
pub fn read_last(
    settings: &ClientConfig,
    topic: &str,
    partition: i32,
    edge_id: &str,
) -> Result<Option<Offsets>, DbError> {
    let context = format!("reading the sink's offsets from {topic}");
    let consumer: BaseConsumer = settings
        .clone()
        .set("group.id", "roamkv-sink-offsets-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| classify(&context, &e))?;
    let deadline = Instant::now() + READ_MAX;
    let mut last = None;
    let mut from = Offset::Beginning;
    for _ in 0..READ_ROUNDS {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, partition, from)
            .map_err(|e| classify(&context, &e))?;
        consumer
            .assign(&assignment)
            .map_err(|e| classify(&context, &e))?;
        let read_to = read_to_end(&consumer, partition, edge_id, deadline, &mut last)
            .map_err(|e| classify(&context, &e))?;
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(5))
            .map_err(|e| classify(&context, &e))?;
        // Where the consumer stands after its end-of-partition (past aborted records and
        // markers, which no consumer sees); else after the last record it saw, and then the
        // last record of a partition a transaction wrote is its commit marker: one short of
        // the high watermark is the end.
        let position = consumer.position().ok().and_then(|list| {
            match list.find_partition(topic, partition)?.offset() {
                Offset::Offset(at) => Some(at),
                _ => None,
            }
        });
        tracing::debug!(?position, ?read_to, high, "cloud sink: offsets read to");
        if position.is_some_and(|at| at >= high) || read_to.map_or(high, |next| next + 1) >= high {
            return Ok(last);
        }
        from = Offset::Offset(read_to.unwrap_or(0));
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(last)
}

/// Polls until the partition's end; keeps the last record keyed `edge_id` in `last`. Returns
/// the offset after the last record read (None: none read).
fn read_to_end(
    consumer: &BaseConsumer,
    partition: i32,
    edge_id: &str,
    deadline: Instant,
    last: &mut Option<Offsets>,
) -> Result<Option<i64>, KafkaError> {
    let mut next = None;
    loop {
        if Instant::now() > deadline {
            return Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) if p == partition => return Ok(next),
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => return Err(e),
            Some(Ok(message)) => {
                next = Some(message.offset() + 1);
                if message.key() != Some(edge_id.as_bytes()) {
                    continue;
                }
                *last = match message.payload() {
                    // A tombstone: the edge's offsets were deleted on purpose.
                    None => None,
                    Some(bytes) => Some(Offsets::decode(bytes).map_err(|e| {
                        tracing::error!(offset = message.offset(), "{e}");
                        KafkaError::MessageConsumption(RDKafkaErrorCode::InvalidRecord)
                    })?),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_always_maps_to_one_partition_in_range() {
        assert_eq!(partition_of("edge-a", 5), partition_of("edge-a", 5));
        for id in ["", "edge-a", "edge-b", "9f0c"] {
            assert!((0..5).contains(&partition_of(id, 5)));
        }
        assert_eq!(partition_of("edge-a", 1), 0);
    }
}
