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
use roamkv_engine::Engine;

use crate::cloud_view::CloudView;

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
    engine: EngineGauges,
    cloud: CloudGauges,
}

/// The cloud sink and the departures waiting for it, read from `CloudView` at each scrape
/// (all 0 without a sink).
#[derive(Default)]
struct CloudGauges {
    connected: Gauge,
    lag_bytes: Gauge,
    lag_seconds: Gauge<f64, AtomicU64>,
    lag_readings: Gauge,
    rows: Gauge,
    batches: Gauge,
    retries: Gauge,
    gaps: Gauge,
    hold_bytes: Gauge,
    hold_bytes_max: Gauge,
    holds_released: Gauge,
    departures_waiting: Gauge,
    handoffs_out_in_flight: Gauge,
    handoffs_in_in_flight: Gauge,
    handoffs_done: Gauge,
    handoffs_aborted: Gauge,
    handoffs_received: Gauge,
    handoff_bytes_sent: Gauge,
    handoff_bytes_received: Gauge,
    handoff_seconds: Gauge<f64, AtomicU64>,
}

impl CloudGauges {
    // Long because: one table of every plain gauge with its name and help, read top to bottom.
    fn plain(&self) -> [(&'static str, &'static str, &Gauge); 18] {
        [
            (
                "sink_connected",
                "1 while the cloud sink is connected and tailing or exporting",
                &self.connected,
            ),
            (
                "sink_lag_bytes",
                "Commit-log bytes not yet in the cloud database",
                &self.lag_bytes,
            ),
            (
                "sink_lag_readings",
                "Readings not yet in the cloud database (estimated from the bytes)",
                &self.lag_readings,
            ),
            (
                "sink_rows",
                "Readings the sink committed to the cloud database since start",
                &self.rows,
            ),
            (
                "sink_batches",
                "Transactions the sink committed since start",
                &self.batches,
            ),
            (
                "sink_retries",
                "Sink errors retried (connection lost, database restarting) since start",
                &self.retries,
            ),
            (
                "sink_gaps",
                "Times the sink lost its hold on the log and exported the devices present by scanning",
                &self.gaps,
            ),
            (
                "sink_hold_bytes",
                "Log bytes kept from retiring for the sink",
                &self.hold_bytes,
            ),
            (
                "sink_hold_bytes_max",
                "Cap on the log bytes kept for the sink: past it the hold is released (never a writer stall)",
                &self.hold_bytes_max,
            ),
            (
                "sink_holds_released",
                "Holds released at their cap since start",
                &self.holds_released,
            ),
            (
                "departures_waiting",
                "Departures waiting for the cloud sink (--on-depart cloud)",
                &self.departures_waiting,
            ),
            (
                "handoffs_out_in_flight",
                "Handoffs of devices from this edge not finished",
                &self.handoffs_out_in_flight,
            ),
            (
                "handoffs_in_in_flight",
                "Handoffs of devices to this edge not committed",
                &self.handoffs_in_in_flight,
            ),
            (
                "handoffs_done",
                "Handoffs from this edge completed since start",
                &self.handoffs_done,
            ),
            (
                "handoffs_aborted",
                "Handoffs from this edge called off since start",
                &self.handoffs_aborted,
            ),
            (
                "handoffs_received",
                "Handoffs to this edge committed since start",
                &self.handoffs_received,
            ),
            (
                "handoff_bytes_sent",
                "Bytes of chunks handed to other edges since start",
                &self.handoff_bytes_sent,
            ),
            (
                "handoff_bytes_received",
                "Bytes of chunks received from other edges since start",
                &self.handoff_bytes_received,
            ),
        ]
    }

    fn register(&self, r: &mut Registry) {
        for (name, help, gauge) in self.plain() {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "sink_lag_seconds",
            "Seconds since the oldest record not yet in the cloud database was written",
            self.lag_seconds.clone(),
        );
        r.register(
            "handoff_seconds",
            "Seconds the completed handoffs from this edge took, summed",
            self.handoff_seconds.clone(),
        );
    }

    fn update(&self, view: &CloudView) {
        let set = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        let sink = view.sink.clone().unwrap_or_default();
        set(
            &self.connected,
            u64::from(sink.state == "tailing" || sink.state == "snapshot"),
        );
        set(&self.lag_bytes, view.lag_bytes.unwrap_or(sink.lag_bytes));
        self.lag_seconds.set(sink.lag_seconds);
        set(&self.lag_readings, view.lag_readings);
        set(&self.rows, sink.rows_total);
        set(&self.batches, sink.batches_total);
        set(&self.retries, sink.retries_total);
        set(&self.gaps, sink.gaps_total);
        set(&self.hold_bytes, view.hold_bytes);
        set(&self.hold_bytes_max, view.hold_bytes_max);
        set(&self.holds_released, view.holds_released);
        set(
            &self.departures_waiting,
            view.departures_waiting.len() as u64,
        );
    }
}

/// The engine's state, read from `Engine::stats` at each scrape.
#[derive(Default)]
struct EngineGauges {
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
    moved_readings: Gauge,
    departures: Gauge,
    trims: Gauge,
    overdue_segments: Gauge,
    overdue_log_bytes: Gauge,
    log_bytes: Gauge,
    log_bytes_max: Gauge,
    write_stalls: Gauge,
    no_space_errors: Gauge,
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
        let metrics = Metrics {
            ingested_readings: Family::default(),
            ingested_events: Family::default(),
            ingested_bytes: Family::default(),
            rejected: Family::default(),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(latency_histogram as fn() -> _),
            mqtt_connected: Gauge::default(),
            engine: EngineGauges::default(),
            cloud: CloudGauges::default(),
            registry: Registry::default(),
        };
        metrics.register_traffic(&mut registry);
        metrics.engine.register(&mut registry);
        metrics.cloud.register(&mut registry);
        Metrics {
            registry,
            ..metrics
        }
    }

    /// What the server counts itself: ingest, refusals, requests and their latency, MQTT.
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
            "mqtt_connected",
            "1 while subscribed to the MQTT event topic",
            self.mqtt_connected.clone(),
        );
    }

    /// Reads the engine's state and the sink's into the gauges and renders the text exposition.
    /// Blocking (engine stats and a walk of the data directory): call it off the async threads.
    pub fn render(&self, engine: &Engine, cloud: &CloudView) -> String {
        self.engine.update(engine);
        self.cloud.update(cloud);
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

impl EngineGauges {
    /// The plain gauges, with their names and help: one table for registering them.
    fn plain(&self) -> [(&'static str, &'static str, &Gauge); 15] {
        [
            (
                "index_bytes",
                "Memory of the upper tier's index",
                &self.index_bytes,
            ),
            (
                "index_bytes_max",
                "Cap on the upper tier's index memory",
                &self.index_bytes_max,
            ),
            (
                "live_segments",
                "Commit-log segments in use",
                &self.live_segments,
            ),
            (
                "data_dir_bytes",
                "Bytes of the files in the data directory",
                &self.data_dir_bytes,
            ),
            (
                "log_bytes_written",
                "Commit-log bytes written since start",
                &self.log_bytes_written,
            ),
            (
                "lower_bytes_written",
                "Bytes the LSM tier wrote since start",
                &self.lower_bytes_written,
            ),
            (
                "user_bytes",
                "Key and value bytes handed to the engine since start",
                &self.user_bytes,
            ),
            (
                "moved_readings",
                "Readings moved out of the log into the lower tier since start",
                &self.moved_readings,
            ),
            (
                "departures",
                "Devices departed since start",
                &self.departures,
            ),
            (
                "trims",
                "Trims (a device's readings older than a cutoff deleted) since start",
                &self.trims,
            ),
            (
                "overdue_segments",
                "Log segments past their management time whose readings have not left the log",
                &self.overdue_segments,
            ),
            (
                "overdue_log_bytes",
                "Bytes of log segments past their management time whose readings have not left the log",
                &self.overdue_log_bytes,
            ),
            (
                "log_bytes",
                "Bytes of the commit log's files (live segments and spares)",
                &self.log_bytes,
            ),
            (
                "log_bytes_max",
                "The log budget: near it the engine settles early, then stalls writers, then refuses with NoSpace",
                &self.log_bytes_max,
            ),
            (
                "write_stalls",
                "Writes that waited for log room since start",
                &self.write_stalls,
            ),
        ]
    }

    fn register(&self, r: &mut Registry) {
        r.register("devices", "Devices present, by tier", self.devices.clone());
        r.register(
            "records",
            "Readings held, by tier (lower tier: the LSM's estimate)",
            self.records.clone(),
        );
        for (name, help, gauge) in self.plain() {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "write_amplification",
            "Engine bytes written per user byte since start",
            self.write_amplification.clone(),
        );
        r.register(
            "no_space_errors",
            "Writes refused for lack of log room since start",
            self.no_space_errors.clone(),
        );
    }

    fn update(&self, engine: &Engine) {
        let stats = engine.stats();
        let set = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        for (tier, devices, records) in [
            ("upper", stats.upper.devices, stats.upper.records),
            ("lower", stats.lower.devices, stats.lower.records),
        ] {
            set(&self.devices.get_or_create(&TierLabels { tier }), devices);
            set(&self.records.get_or_create(&TierLabels { tier }), records);
        }
        set(&self.index_bytes, stats.index_bytes);
        set(&self.index_bytes_max, stats.index_bytes_max);
        set(&self.live_segments, stats.live_segments);
        set(&self.data_dir_bytes, dir_bytes(engine.path()));
        set(&self.log_bytes_written, stats.log_bytes_written);
        set(&self.lower_bytes_written, stats.lower_bytes_written);
        set(&self.user_bytes, stats.user_bytes);
        self.write_amplification.set(stats.write_amplification());
        set(&self.moved_readings, stats.aged_records);
        set(&self.departures, stats.departures);
        set(&self.trims, stats.trims);
        set(&self.overdue_segments, stats.overdue_segments);
        set(&self.overdue_log_bytes, stats.overdue_bytes);
        set(&self.log_bytes, stats.log_bytes);
        set(&self.log_bytes_max, stats.log_bytes_max);
        set(&self.write_stalls, stats.write_stalls);
        set(&self.no_space_errors, stats.no_space_errors);
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
