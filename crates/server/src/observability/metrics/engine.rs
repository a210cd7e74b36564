//! The engine's metrics, read from `Engine::stats` at each scrape: counters follow the engine's
//! totals, gauges its levels.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use roamkv_engine::{DeviceTier, Engine};
use roamkv_wire::edgex::event_index::INDEX_DEVICE;

use super::follow::{TierLabels, dir_bytes, follow, set};

/// The engine's state and totals, read from `Engine::stats` at each scrape.
#[derive(Default)]
pub(super) struct EngineMetrics {
    pub(super) devices: Family<TierLabels, Gauge>,
    pub(super) records: Family<TierLabels, Gauge>,
    pub(super) index_bytes: Gauge,
    pub(super) index_limit_bytes: Gauge,
    pub(super) live_segments: Gauge,
    pub(super) data_dir_bytes: Gauge,
    pub(super) overdue_segments: Gauge,
    pub(super) overdue_log_bytes: Gauge,
    pub(super) log_bytes: Gauge,
    pub(super) log_budget_bytes: Gauge,
    pub(super) write_amplification: Gauge<f64, AtomicU64>,
    pub(super) log_written_bytes: Counter,
    pub(super) lower_written_bytes: Counter,
    pub(super) user_bytes: Counter,
    pub(super) moved_readings: Counter,
    pub(super) departures: Counter,
    pub(super) trims: Counter,
    pub(super) write_stalls: Counter,
    pub(super) no_space_errors: Counter,
    pub(super) group_commits: Counter,
    pub(super) fdatasyncs: Counter,
    pub(super) log_block_written_bytes: Counter,
}

impl EngineMetrics {
    pub(super) fn gauges(&self) -> [(&'static str, &'static str, &Gauge); 8] {
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

    pub(super) fn counters(&self) -> [(&'static str, &'static str, &Counter); 11] {
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
            (
                "group_commits",
                "Groups of batches the log committed together",
                &self.group_commits,
            ),
            (
                "fdatasyncs",
                "fdatasyncs of log segments (under sync durability, each segment a commit wrote to, once)",
                &self.fdatasyncs,
            ),
            (
                "log_block_written_bytes",
                "Bytes of whole 4 KiB log blocks written: the records, and a partly filled block's earlier bytes written again by each commit that ends in it",
                &self.log_block_written_bytes,
            ),
        ]
    }

    pub(super) fn register(&self, r: &mut Registry) {
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

    pub(super) fn update(&self, engine: &Engine) {
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
        follow(&self.group_commits, stats.group_commits);
        follow(&self.fdatasyncs, stats.fdatasyncs);
        follow(&self.log_block_written_bytes, stats.log_block_bytes_written);
    }
}
