//! Counting what the Kafka topic holds after a run, two ways: a `read_committed` consumer reads
//! every record from the beginning and counts each reading (device, sensor, ts_ns) once, and the
//! twice-found; and the brokers' own offsets (each partition's high watermark) are set against
//! the records that consumer was given. With transactions an offset is not a record: each
//! transaction leaves a commit (or abort) marker on every partition it wrote, and an aborted
//! transaction's records keep their offsets while a `read_committed` consumer skips them; so the
//! offsets are an account (records + markers and aborted records = the end offsets), and the
//! consumer's count is the one held against the clients' acknowledgements.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::error::{BenchError, Result};

/// How long reading the whole topic back may take.
const READ_MAX: Duration = Duration::from_secs(900);
/// How long a metadata or offsets request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What the topic holds, as results.json has it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct TopicCount {
    /// Reading records the read_committed consumer was given (each copy counted).
    pub reading_records: u64,
    /// Distinct readings among them.
    pub distinct_readings: u64,
    /// Reading records beyond the first of their reading.
    pub duplicated: u64,
    /// Departure records.
    pub departures: u64,
    /// The partitions' high watermarks, summed: every offset the brokers gave out.
    pub end_offsets: u64,
    /// End offsets minus the records the consumer was given: transaction markers and records of
    /// aborted transactions.
    pub markers_and_aborted: u64,
    /// The same counts for each edge that wrote the topic, by its edge id (a fleet's edges use
    /// the same device names: a reading is (edge, device, sensor, ts_ns)).
    pub by_edge: BTreeMap<String, EdgeCount>,
}

/// One edge's readings in the topic.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct EdgeCount {
    pub distinct_readings: u64,
    pub duplicated: u64,
}

/// One record as the sink writes it (docs/SERVER.md, "The record format"); only what counting
/// needs is read.
#[derive(serde::Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    edge_id: Cow<'a, str>,
    #[serde(borrow, default)]
    device: Cow<'a, str>,
    #[serde(borrow, default)]
    sensor: Cow<'a, str>,
    #[serde(default)]
    ts_ns: i64,
}

/// Readings as small keys: edge ids, device and sensor names numbered as they are first seen.
#[derive(Default)]
struct Seen {
    names: HashMap<String, u32>,
    readings: HashSet<(u32, u32, u32, i64)>,
}

impl Seen {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.names.get(name) {
            return *id;
        }
        let id = self.names.len() as u32;
        self.names.insert(name.to_string(), id);
        id
    }

    /// Notes a reading; false if it was seen before.
    fn first(&mut self, edge_id: &str, device: &str, sensor: &str, ts_ns: i64) -> bool {
        let key = (self.id(edge_id), self.id(device), self.id(sensor), ts_ns);
        self.readings.insert(key)
    }
}

/// Reads `topic` of the cluster at `bootstrap` whole and counts it.
pub fn count_topic(bootstrap: &str, topic: &str) -> Result<TopicCount> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "roamkv-bench-count")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| kafka_error("a consumer", e))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .map_err(|e| kafka_error("the topic's metadata", e))?;
    let partitions = metadata
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len() as i32);
    let mut count = TopicCount::default();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
            .map_err(|e| kafka_error("a partition's offsets", e))?;
        count.end_offsets += high as u64;
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| kafka_error("assigning", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| kafka_error("assigning", e))?;
    let records = read_all(&consumer, topic, partitions, &mut count)?;
    count.markers_and_aborted = count.end_offsets.saturating_sub(records);
    Ok(count)
}

/// Polls until every partition is at its end; returns the records given (readings and
/// departures), counting them into `count`.
fn read_all(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: i32,
    count: &mut TopicCount,
) -> Result<u64> {
    let mut seen = Seen::default();
    let mut at_end = vec![false; partitions as usize];
    let mut records = 0u64;
    let begun = Instant::now();
    while !at_end.iter().all(|e| *e) {
        if begun.elapsed() > READ_MAX {
            return Err(BenchError::Run(format!(
                "reading {topic} back took over {READ_MAX:?}"
            )));
        }
        let message = match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end[p as usize] = true;
                continue;
            }
            Some(Err(e)) => return Err(kafka_error("consuming", e)),
            Some(Ok(message)) => message,
        };
        at_end[message.partition() as usize] = false;
        records += 1;
        let record: Record<'_> = serde_json::from_slice(message.payload().unwrap_or_default())?;
        if record.kind == "departure" {
            count.departures += 1;
            continue;
        }
        count.reading_records += 1;
        let edge = count.by_edge.entry(record.edge_id.to_string()).or_default();
        if seen.first(
            &record.edge_id,
            &record.device,
            &record.sensor,
            record.ts_ns,
        ) {
            count.distinct_readings += 1;
            edge.distinct_readings += 1;
        } else {
            count.duplicated += 1;
            edge.duplicated += 1;
        }
    }
    Ok(records)
}

fn kafka_error(what: &str, e: KafkaError) -> BenchError {
    BenchError::Run(format!("counting the topic, {what}: {e}"))
}
