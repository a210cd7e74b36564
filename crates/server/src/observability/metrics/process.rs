//! The `process_*` metrics every Prometheus client library exports, read from /proc at each
//! scrape.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::follow::{follow_f64, set};

/// The process, by the names every Prometheus client library uses (process_*), from /proc.
#[derive(Default)]
pub(super) struct ProcessMetrics {
    pub(super) cpu_seconds: Counter<f64, AtomicU64>,
    pub(super) resident_memory_bytes: Gauge,
    pub(super) virtual_memory_bytes: Gauge,
    pub(super) open_fds: Gauge,
    pub(super) max_fds: Gauge,
    pub(super) threads: Gauge,
    pub(super) start_time_seconds: Gauge,
}

impl ProcessMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
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
    pub(super) fn update(&self) {
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
