//! Prometheus metrics (prometheus-client: the official Rust client's text format, so the
//! exposition is right without hand-writing it). Ingest and request metrics are counted as they
//! happen; the engine's, the sink's and the process's state is read at each scrape. Names
//! follow Prometheus's conventions: base units last in the name (`_bytes`, `_seconds`),
//! counters as counters (prometheus-client adds `_total`), `roamkv_build_info`, and the
//! `process_*` metrics every client library exports; `promtool check metrics` agrees with the
//! classic text a scraper gets unless it asks for OpenMetrics (`exposition`;
//! crates/server/tests/edgex_round_trip.rs).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use roamkv_engine::Engine;

use crate::observability::cloud_view::CloudView;

mod cloud;
mod engine;
pub mod exposition;
mod follow;
mod mqtt;
mod process;

use cloud::CloudMetrics;
use engine::EngineMetrics;
use mqtt::MqttMetrics;
use process::ProcessMetrics;

pub use follow::{TierLabels, dir_bytes};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// "http", "mqtt" or "native".
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub source: &'static str,
    /// The HTTP status the request got (for MQTT: the one it would have got).
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    /// The route pattern, e.g. /api/v3/event/device/name/{name}.
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

pub struct Metrics {
    registry: Registry,
    /// One scrape at a time: totals kept elsewhere are carried into counters by difference
    /// (`follow`), which two scrapes at once would count twice.
    scrape: parking_lot::Mutex<()>,
    pub ingested_readings: Family<SourceLabels, Counter>,
    pub ingested_events: Family<SourceLabels, Counter>,
    pub ingested_bytes: Family<SourceLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Family<RouteLabels, Histogram>,
    /// MQTT ingest: the connection, the queue and the write slots (routes/mqtt).
    pub mqtt: MqttMetrics,
    /// Exports being written (export.rs), the readings they wrote, their output's budget while
    /// ingest runs, and the time they slept to keep to it.
    pub exports_in_flight: Gauge,
    pub exported_readings: Counter,
    pub export_rate_limit_bytes_per_second: Gauge,
    pub export_paced_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// REST-posted events published to the bus, or dropped from it (ingest/republish.rs).
    pub republished: Family<OutcomeLabels, Counter>,
    /// Backups (routes/backup.rs): their read budget, what they read, the time they slept to
    /// keep to it, and how they ended.
    pub backup: BackupMetrics,
    engine: EngineMetrics,
    cloud: CloudMetrics,
    process: ProcessMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

fn latency_histogram() -> Histogram {
    // 100 us .. ~3.3 s: group commits take ~1-10 ms, queries up to seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0001, 2.0, 16,
    ))
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        let metrics = Metrics {
            ingested_readings: Family::default(),
            ingested_events: Family::default(),
            ingested_bytes: Family::default(),
            rejected: Family::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency_histogram as fn() -> _),
            mqtt: MqttMetrics::default(),
            exports_in_flight: Gauge::default(),
            exported_readings: Counter::default(),
            export_rate_limit_bytes_per_second: Gauge::default(),
            export_paced_seconds: Counter::default(),
            republished: Family::default(),
            backup: BackupMetrics::default(),
            engine: EngineMetrics::default(),
            cloud: CloudMetrics::default(),
            process: ProcessMetrics::default(),
            scrape: parking_lot::Mutex::new(()),
            registry: Registry::default(),
        };
        metrics.process.register(&mut root);
        let roamkv = root.sub_registry_with_prefix("roamkv");
        metrics.register_traffic(roamkv);
        metrics.mqtt.register(roamkv);
        metrics.backup.register(roamkv);
        metrics.engine.register(roamkv);
        metrics.cloud.register(roamkv);
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        roamkv.register(
            "build_info",
            "The running build: 1, with its version as a label",
            build,
        );
        Metrics {
            registry: root,
            ..metrics
        }
    }

    /// What the server counts itself: ingest, refusals, requests and their latency.
    fn register_traffic(&self, r: &mut Registry) {
        let counters = [
            (
                "ingested_readings",
                "Readings written to the engine",
                &self.ingested_readings,
            ),
            (
                "ingested_events",
                "EdgeX events (or native batches) written to the engine",
                &self.ingested_events,
            ),
            (
                "ingested_bytes",
                "Request or message bytes of accepted writes",
                &self.ingested_bytes,
            ),
        ];
        for (name, help, family) in counters {
            r.register(name, help, family.clone());
        }
        r.register(
            "rejected",
            "Writes refused (bad input, limits, engine errors)",
            self.rejected.clone(),
        );
        r.register(
            "http_requests",
            "HTTP requests answered",
            self.requests.clone(),
        );
        r.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            self.request_seconds.clone(),
        );
        r.register(
            "exports_in_flight",
            "Exports being written (GET /api/roamkv/v1/export)",
            self.exports_in_flight.clone(),
        );
        r.register(
            "exported_readings",
            "Readings written by exports that finished",
            self.exported_readings.clone(),
        );
        r.register(
            "export_rate_limit_bytes_per_second",
            "What an export writes per second at most while ingest runs (--export-rate-mib; 0: no limit)",
            self.export_rate_limit_bytes_per_second.clone(),
        );
        r.register(
            "export_paced_seconds",
            "Time exports waited to keep to their rate while ingest ran",
            self.export_paced_seconds.clone(),
        );
        r.register(
            "republished_events",
            "Events POSTed over HTTP published to the MQTT bus (outcome=published), or dropped from it with its queue full (outcome=dropped)",
            self.republished.clone(),
        );
    }

    /// Reads the engine's, the sink's and the process's state and renders the text exposition.
    /// Blocking (engine stats and a walk of the data directory): call it off the async threads.
    pub fn render(&self, engine: &Engine, cloud: &CloudView) -> String {
        let _one_at_a_time = self.scrape.lock();
        self.engine.update(engine);
        self.cloud.update(cloud);
        self.process.update();
        let mut text = String::new();
        if let Err(e) = encode(&mut text, &self.registry) {
            text = format!("# encoding metrics failed: {e}\n");
        }
        text
    }

    pub fn readings_total(&self) -> u64 {
        ["http", "mqtt", "native"]
            .iter()
            .map(|source| {
                self.ingested_readings
                    .get_or_create(&SourceLabels { source })
                    .get()
            })
            .sum()
    }
}

/// What backups take (routes/backup.rs), against their budget (`--backup-rate-mib`).
#[derive(Default)]
pub struct BackupMetrics {
    pub rate_limit_bytes_per_second: Gauge,
    pub read_bytes: Counter,
    pub paced_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    pub finished: Family<OutcomeLabels, Counter>,
}

impl BackupMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "backup_rate_limit_bytes_per_second",
            "The rate a backup reads the data directory at, at most (--backup-rate-mib; 0: no limit)",
            self.rate_limit_bytes_per_second.clone(),
        );
        r.register(
            "backup_read_bytes",
            "Bytes backups read of the data directory (sent, or read for a checksum)",
            self.read_bytes.clone(),
        );
        r.register(
            "backup_paced_seconds",
            "Time backups waited to keep to their rate",
            self.paced_seconds.clone(),
        );
        r.register(
            "backups",
            "Backups that ended: outcome=sent or outcome=failed",
            self.finished.clone(),
        );
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
