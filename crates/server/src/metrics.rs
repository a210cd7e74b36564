//! Prometheus metrics (prometheus-client: the official Rust client's text format, so the
//! exposition is right without hand-writing it). Ingest and request metrics are counted as they
//! happen; the engine's state is read from `Engine::stats` at each scrape.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use roamkv_engine::{DeviceTier, Engine};

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
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub ingested_readings: Family<SourceLabels, Counter>,
    pub ingested_events: Family<SourceLabels, Counter>,
    pub ingested_bytes: Family<SourceLabels, Counter>,
    pub rejected: Family<RejectLabels, Counter>,
    pub requests: Family<RequestLabels, Counter>,
    pub request_seconds: Family<RouteLabels, Histogram>,
    pub mqtt_connected: Gauge,
    devices: Family<TierLabels, Gauge>,
    records: Family<TierLabels, Gauge>,
    index_bytes: Gauge,
    index_bytes_max: Gauge,
    live_segments: Gauge,
    data_dir_bytes: Gauge,
    log_bytes_written: Gauge,
    lower_bytes_written: Gauge,
    user_bytes: Gauge,
    write_amplification: Gauge<f64, AtomicU64>,
    migrations: Gauge,
    departures: Gauge,
    migration_backlog_devices: Gauge,
}

fn latency_histogram() -> Histogram {
    // 100 us .. ~3.3 s: group commits take ~1-10 ms, queries up to seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0001, 2.0, 16,
    ))
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("roamkv");
        let ingested_readings = Family::<SourceLabels, Counter>::default();
        let ingested_events = Family::<SourceLabels, Counter>::default();
        let ingested_bytes = Family::<SourceLabels, Counter>::default();
        let rejected = Family::<RejectLabels, Counter>::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let request_seconds =
            Family::<RouteLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "ingested_readings",
            "Readings written to the engine",
            ingested_readings.clone(),
        );
        registry.register(
            "ingested_events",
            "EdgeX events (or native batches) written to the engine",
            ingested_events.clone(),
        );
        registry.register(
            "ingested_bytes",
            "Request or message bytes of accepted writes",
            ingested_bytes.clone(),
        );
        registry.register(
            "rejected",
            "Writes refused (bad input, limits, engine errors)",
            rejected.clone(),
        );
        registry.register("http_requests", "HTTP requests answered", requests.clone());
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            request_seconds.clone(),
        );
        let metrics = Metrics {
            ingested_readings,
            ingested_events,
            ingested_bytes,
            rejected,
            requests,
            request_seconds,
            mqtt_connected: Gauge::default(),
            devices: Family::default(),
            records: Family::default(),
            index_bytes: Gauge::default(),
            index_bytes_max: Gauge::default(),
            live_segments: Gauge::default(),
            data_dir_bytes: Gauge::default(),
            log_bytes_written: Gauge::default(),
            lower_bytes_written: Gauge::default(),
            user_bytes: Gauge::default(),
            write_amplification: Gauge::default(),
            migrations: Gauge::default(),
            departures: Gauge::default(),
            migration_backlog_devices: Gauge::default(),
            registry: Registry::default(),
        };
        let m = &metrics;
        let r = &mut registry;
        r.register(
            "mqtt_connected",
            "1 while subscribed to the MQTT event topic",
            m.mqtt_connected.clone(),
        );
        r.register("devices", "Devices present, by tier", m.devices.clone());
        r.register(
            "records",
            "Readings held, by tier (lower tier: the LSM's estimate)",
            m.records.clone(),
        );
        r.register(
            "index_bytes",
            "Memory of the upper tier's index",
            m.index_bytes.clone(),
        );
        r.register(
            "index_bytes_max",
            "Cap on the upper tier's index memory",
            m.index_bytes_max.clone(),
        );
        r.register(
            "live_segments",
            "Commit-log segments in use",
            m.live_segments.clone(),
        );
        r.register(
            "data_dir_bytes",
            "Bytes of the files in the data directory",
            m.data_dir_bytes.clone(),
        );
        r.register(
            "log_bytes_written",
            "Commit-log bytes written since start",
            m.log_bytes_written.clone(),
        );
        r.register(
            "lower_bytes_written",
            "Bytes the LSM tier wrote since start",
            m.lower_bytes_written.clone(),
        );
        r.register(
            "user_bytes",
            "Key and value bytes handed to the engine since start",
            m.user_bytes.clone(),
        );
        r.register(
            "write_amplification",
            "Engine bytes written per user byte since start",
            m.write_amplification.clone(),
        );
        r.register(
            "migrations",
            "Devices migrated to the lower tier since start",
            m.migrations.clone(),
        );
        r.register(
            "departures",
            "Devices departed since start",
            m.departures.clone(),
        );
        r.register(
            "migration_backlog_devices",
            "Upper-tier devices past their management time, not yet settled",
            m.migration_backlog_devices.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Reads the engine's state into the gauges and renders the text exposition.
    /// Blocking (engine stats and a walk of the data directory): call it off the async threads.
    pub fn render(&self, engine: &Engine, management_time_ms: u64, now_ms: u64) -> String {
        let stats = engine.stats();
        let devices = engine.devices();
        let backlog = devices
            .iter()
            .filter(|d| {
                d.tier != DeviceTier::Lower
                    && now_ms.saturating_sub(d.registered_at_ms) > management_time_ms
            })
            .count();
        let set = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(
            &self.devices.get_or_create(&TierLabels { tier: "upper" }),
            stats.upper.devices,
        );
        set(
            &self.devices.get_or_create(&TierLabels { tier: "lower" }),
            stats.lower.devices,
        );
        set(
            &self.records.get_or_create(&TierLabels { tier: "upper" }),
            stats.upper.records,
        );
        set(
            &self.records.get_or_create(&TierLabels { tier: "lower" }),
            stats.lower.records,
        );
        set(&self.index_bytes, stats.index_bytes);
        set(&self.index_bytes_max, stats.index_bytes_max);
        set(&self.live_segments, stats.live_segments);
        set(&self.data_dir_bytes, dir_bytes(engine.path()));
        set(&self.log_bytes_written, stats.log_bytes_written);
        set(&self.lower_bytes_written, stats.lower_bytes_written);
        set(&self.user_bytes, stats.user_bytes);
        self.write_amplification.set(stats.write_amplification());
        set(&self.migrations, stats.migrations);
        set(&self.departures, stats.departures);
        set(&self.migration_backlog_devices, backlog as u64);
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

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Bytes of the regular files under `dir` (segments are preallocated, so this is space held,
/// not data written). Unreadable entries count as 0.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&entry.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
