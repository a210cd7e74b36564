//! Prometheus metrics (prometheus-client: the official Rust client's text format, so the
//! exposition is right without hand-writing it). Ingest and request metrics are counted as they
//! happen; the engine's, the sink's and the process's state is read at each scrape. Names
//! follow Prometheus's conventions: base units last in the name (`_bytes`, `_seconds`),
//! counters as counters (prometheus-client adds `_total`), `roamkv_build_info`, and the
//! `process_*` metrics every client library exports; `promtool check metrics` agrees
//! (crates/server/tests/edgex_round_trip.rs).

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
use roamkv_wire::edgex::event_index::INDEX_DEVICE;

use crate::observability::cloud_view::CloudView;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: &'static str,
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
    pub mqtt_connected: Gauge,
    /// Exports being written (export.rs), and the readings they wrote.
    pub exports_in_flight: Gauge,
    pub exported_readings: Counter,
    /// REST-posted events published to the bus, or dropped from it (republish.rs).
    pub republished: Family<OutcomeLabels, Counter>,
    engine: EngineMetrics,
    cloud: CloudMetrics,
    process: ProcessMetrics,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Carries a total kept elsewhere (the engine's, the sink's, the handoffs') into a counter:
/// a counter only goes up, by the difference since the last scrape.
fn follow(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

fn follow_f64(counter: &Counter<f64, AtomicU64>, total: f64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

fn set(gauge: &Gauge, value: u64) {
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
}

/// The cloud sink, the departures waiting for it and the handoffs, read from `CloudView` at
/// each scrape (all 0 without a sink or handoffs).
#[derive(Default)]
struct CloudMetrics {
    connected: Gauge,
    lag_bytes: Gauge,
    lag_seconds: Gauge<f64, AtomicU64>,
    lag_readings: Gauge,
    hold_bytes: Gauge,
    hold_limit_bytes: Gauge,
    departures_waiting: Gauge,
    handoffs_out_in_flight: Gauge,
    handoffs_in_in_flight: Gauge,
    rows: Counter,
    batches: Counter,
    retries: Counter,
    gaps: Counter,
    holds_released: Counter,
    handoffs_done: Counter,
    handoffs_aborted: Counter,
    handoffs_received: Counter,
    handoff_sent_bytes: Counter,
    handoff_received_bytes: Counter,
    handoff_seconds: Counter<f64, AtomicU64>,
}

impl CloudMetrics {
    fn gauges(&self) -> [(&'static str, &'static str, &Gauge); 8] {
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
                "sink_hold_bytes",
                "Log bytes kept from retiring for the sink",
                &self.hold_bytes,
            ),
            (
                "sink_hold_limit_bytes",
                "Cap on the log bytes kept for the sink: past it the hold is released (never a writer stall)",
                &self.hold_limit_bytes,
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
        ]
    }

    // Long because: one table of every counter with its name and help, read top to bottom.
    fn counters(&self) -> [(&'static str, &'static str, &Counter); 10] {
        [
            (
                "sink_rows",
                "Readings the sink committed to the cloud database",
                &self.rows,
            ),
            (
                "sink_batches",
                "Transactions the sink committed",
                &self.batches,
            ),
            (
                "sink_retries",
                "Sink errors retried (connection lost, database restarting)",
                &self.retries,
            ),
            (
                "sink_gaps",
                "Times the sink lost its hold on the log and exported the devices present by scanning",
                &self.gaps,
            ),
            (
                "sink_holds_released",
                "Sink holds released at their cap",
                &self.holds_released,
            ),
            (
                "handoffs_done",
                "Handoffs from this edge completed",
                &self.handoffs_done,
            ),
            (
                "handoffs_aborted",
                "Handoffs from this edge called off",
                &self.handoffs_aborted,
            ),
            (
                "handoffs_received",
                "Handoffs to this edge committed",
                &self.handoffs_received,
            ),
            (
                "handoff_sent_bytes",
                "Bytes of chunks handed to other edges",
                &self.handoff_sent_bytes,
            ),
            (
                "handoff_received_bytes",
                "Bytes of chunks received from other edges",
                &self.handoff_received_bytes,
            ),
        ]
    }

    fn register(&self, r: &mut Registry) {
        for (name, help, gauge) in self.gauges() {
            r.register(name, help, gauge.clone());
        }
        for (name, help, counter) in self.counters() {
            r.register(name, help, counter.clone());
        }
        r.register(
            "sink_lag_seconds",
            "Seconds since the oldest record not yet in the cloud database was written",
            self.lag_seconds.clone(),
        );
        r.register(
            "handoff_duration_seconds",
            "Seconds the completed handoffs from this edge took, summed",
            self.handoff_seconds.clone(),
        );
    }

    fn update(&self, view: &CloudView) {
        let sink = view.sink.clone().unwrap_or_default();
        set(
            &self.connected,
            u64::from(sink.state == "tailing" || sink.state == "snapshot"),
        );
        set(&self.lag_bytes, view.lag_bytes.unwrap_or(sink.lag_bytes));
        self.lag_seconds.set(sink.lag_seconds);
        set(&self.lag_readings, view.lag_readings);
        set(&self.hold_bytes, view.hold_bytes);
        set(&self.hold_limit_bytes, view.hold_bytes_max);
        set(
            &self.departures_waiting,
            view.departures_waiting.len() as u64,
        );
        let handoffs = &view.handoffs;
        set(&self.handoffs_out_in_flight, handoffs.out_in_flight);
        set(&self.handoffs_in_in_flight, handoffs.in_in_flight);
        follow(&self.rows, sink.rows_total);
        follow(&self.batches, sink.batches_total);
        follow(&self.retries, sink.retries_total);
        follow(&self.gaps, sink.gaps_total);
        follow(&self.holds_released, view.holds_released);
        follow(&self.handoffs_done, handoffs.done);
        follow(&self.handoffs_aborted, handoffs.aborted);
        follow(&self.handoffs_received, handoffs.received);
        follow(&self.handoff_sent_bytes, handoffs.bytes_sent);
        follow(&self.handoff_received_bytes, handoffs.bytes_received);
        follow_f64(&self.handoff_seconds, handoffs.seconds);
    }
}

/// The engine's state and totals, read from `Engine::stats` at each scrape.
#[derive(Default)]
struct EngineMetrics {
    devices: Family<TierLabels, Gauge>,
    records: Family<TierLabels, Gauge>,
    index_bytes: Gauge,
    index_limit_bytes: Gauge,
    live_segments: Gauge,
    data_dir_bytes: Gauge,
    overdue_segments: Gauge,
    overdue_log_bytes: Gauge,
    log_bytes: Gauge,
    log_budget_bytes: Gauge,
    write_amplification: Gauge<f64, AtomicU64>,
    log_written_bytes: Counter,
    lower_written_bytes: Counter,
    user_bytes: Counter,
    moved_readings: Counter,
    departures: Counter,
    trims: Counter,
    write_stalls: Counter,
    no_space_errors: Counter,
}

/// The process, by the names every Prometheus client library uses (process_*), from /proc.
#[derive(Default)]
struct ProcessMetrics {
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_memory_bytes: Gauge,
    virtual_memory_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    threads: Gauge,
    start_time_seconds: Gauge,
}

impl ProcessMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "process_cpu_seconds",
            "User and system CPU time spent, in seconds",
            self.cpu_seconds.clone(),
        );
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                &self.resident_memory_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                &self.virtual_memory_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                &self.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                &self.max_fds,
            ),
            ("process_threads", "Number of OS threads", &self.threads),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                &self.start_time_seconds,
            ),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
    }

    /// Reads /proc/self; a figure that cannot be read keeps its last value.
    fn update(&self) {
        let Ok(me) = procfs::process::Process::myself() else {
            return;
        };
        let ticks = procfs::ticks_per_second() as f64;
        if let Ok(stat) = me.stat() {
            follow_f64(&self.cpu_seconds, (stat.utime + stat.stime) as f64 / ticks);
            set(
                &self.resident_memory_bytes,
                stat.rss.saturating_mul(procfs::page_size()),
            );
            set(&self.virtual_memory_bytes, stat.vsize);
            set(&self.threads, stat.num_threads.max(0) as u64);
            if let Ok(boot) = procfs::boot_time_secs() {
                set(
                    &self.start_time_seconds,
                    boot + (stat.starttime as f64 / ticks) as u64,
                );
            }
        }
        if let Ok(fds) = me.fd_count() {
            set(&self.open_fds, fds as u64);
        }
        if let Ok(limits) = me.limits()
            && let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit
        {
            set(&self.max_fds, max);
        }
    }
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
            mqtt_connected: Gauge::default(),
            exports_in_flight: Gauge::default(),
            exported_readings: Counter::default(),
            republished: Family::default(),
            engine: EngineMetrics::default(),
            cloud: CloudMetrics::default(),
            process: ProcessMetrics::default(),
            scrape: parking_lot::Mutex::new(()),
            registry: Registry::default(),
        };
        metrics.process.register(&mut root);
        let roamkv = root.sub_registry_with_prefix("roamkv");
        metrics.register_traffic(roamkv);
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

impl EngineMetrics {
    fn gauges(&self) -> [(&'static str, &'static str, &Gauge); 8] {
        [
            (
                "index_bytes",
                "Memory of the upper tier's index",
                &self.index_bytes,
            ),
            (
                "index_limit_bytes",
                "Cap on the upper tier's index memory (index_memory_mib)",
                &self.index_limit_bytes,
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
                "log_budget_bytes",
                "The log budget (log_budget_mib): near it the engine settles early, then stalls writers, then refuses with NoSpace",
                &self.log_budget_bytes,
            ),
        ]
    }

    fn counters(&self) -> [(&'static str, &'static str, &Counter); 8] {
        [
            (
                "log_written_bytes",
                "Commit-log bytes written",
                &self.log_written_bytes,
            ),
            (
                "lower_written_bytes",
                "Bytes the LSM tier wrote",
                &self.lower_written_bytes,
            ),
            (
                "user_bytes",
                "Key and value bytes handed to the engine",
                &self.user_bytes,
            ),
            (
                "moved_readings",
                "Readings moved out of the log into the lower tier",
                &self.moved_readings,
            ),
            ("departures", "Devices departed", &self.departures),
            (
                "trims",
                "Trims (a device's readings older than a cutoff deleted)",
                &self.trims,
            ),
            (
                "write_stalls",
                "Writes that waited for log room",
                &self.write_stalls,
            ),
            (
                "no_space_errors",
                "Writes refused for lack of log room",
                &self.no_space_errors,
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
        for (name, help, gauge) in self.gauges() {
            r.register(name, help, gauge.clone());
        }
        for (name, help, counter) in self.counters() {
            r.register(name, help, counter.clone());
        }
        r.register(
            "write_amplification",
            "Engine bytes written per user byte since start",
            self.write_amplification.clone(),
        );
    }

    fn update(&self, engine: &Engine) {
        let stats = engine.stats();
        // Devices are the clients': the server's index of event ids is not one (its readings
        // and bytes are in the other figures: they take room).
        // Placed in the lower tier or not, as the engine's counts place it.
        let own = engine.device(INDEX_DEVICE).map(|d| {
            if d.lower_runs > 0 {
                DeviceTier::Lower
            } else {
                DeviceTier::Upper
            }
        });
        for (tier, devices, records, kind) in [
            (
                "upper",
                stats.upper.devices,
                stats.upper.records,
                DeviceTier::Upper,
            ),
            (
                "lower",
                stats.lower.devices,
                stats.lower.records,
                DeviceTier::Lower,
            ),
        ] {
            let devices = devices.saturating_sub(u64::from(own == Some(kind)));
            set(&self.devices.get_or_create(&TierLabels { tier }), devices);
            set(&self.records.get_or_create(&TierLabels { tier }), records);
        }
        set(&self.index_bytes, stats.index_bytes);
        set(&self.index_limit_bytes, stats.index_bytes_max);
        set(&self.live_segments, stats.live_segments);
        set(&self.data_dir_bytes, dir_bytes(engine.path()));
        set(&self.overdue_segments, stats.overdue_segments);
        set(&self.overdue_log_bytes, stats.overdue_bytes);
        set(&self.log_bytes, stats.log_bytes);
        set(&self.log_budget_bytes, stats.log_bytes_max);
        self.write_amplification.set(stats.write_amplification());
        follow(&self.log_written_bytes, stats.log_bytes_written);
        follow(&self.lower_written_bytes, stats.lower_bytes_written);
        follow(&self.user_bytes, stats.user_bytes);
        follow(&self.moved_readings, stats.aged_records);
        follow(&self.departures, stats.departures);
        follow(&self.trims, stats.trims);
        follow(&self.write_stalls, stats.write_stalls);
        follow(&self.no_space_errors, stats.no_space_errors);
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
