//! What `roamkv bench serve` measured: one run of one system, the medians of a configuration's
//! repeats, and the server's decode costs timed in-process.

/// One run of one system.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeRun {
    pub target: String,
    pub readings_per_event: usize,
    /// "peak" (closed loop) or "half-peak" (open loop at half the median peak).
    pub phase: &'static str,
    pub repeat: usize,
    pub clients: usize,
    pub offered_readings_per_sec: Option<f64>,
    pub readings_per_sec: f64,
    pub events: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// CPU seconds of the system under test over the run (server process; in-process engine:
    /// this process), and of this process (the load generator) for HTTP systems.
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
    pub server_cpu_us_per_reading: f64,
    pub acked_readings: u64,
    pub stored_readings: u64,
    pub check: String,
    pub measured_s: f64,
    /// Bus rows (bus.rs): the broker's CPU seconds over the run, and the seconds the
    /// subscriber took after the publishers stopped to take every message (its backlog).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_s: Option<f64>,
    /// roamkv (server or in-process engine): readings acknowledged per group commit over the
    /// run (under `sync` each commit is one fdatasync and one rewrite of the log's last block:
    /// what the server's gathering trades against latency). None for the peers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readings_per_commit: Option<f64>,
}

/// Medians of a configuration's repeats.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServeSummary {
    pub target: String,
    pub readings_per_event: usize,
    pub readings_per_sec: f64,
    pub readings_per_sec_repeats: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub server_cpu_us_per_reading: f64,
    pub half_peak_offered: Option<f64>,
    pub half_peak_achieved: Option<f64>,
    pub half_peak_p50_ms: Option<f64>,
    pub half_peak_p99_ms: Option<f64>,
    /// roamkv: readings per group commit at the peak and at half of it (medians).
    pub readings_per_commit: Option<f64>,
    pub half_peak_readings_per_commit: Option<f64>,
    pub checks_ok: bool,
    /// Bus rows: the broker's CPU per reading, and the subscriber's drain after the
    /// publishers stopped (medians).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_cpu_us_per_reading: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_s: Option<f64>,
}

/// CPU cost of the server's decoding steps for one event, measured in this process.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DecodeCost {
    pub readings_per_event: usize,
    pub json_parse_us_per_reading: f64,
    pub checks_and_cbor_us_per_reading: f64,
    pub binary_decode_us_per_reading: f64,
}

/// The device under the systems' data directories, probed before the runs: one fdatasync of a
/// 4 KiB write, repeated (what one `sync` commit costs at the least). Its tail bounds every
/// system's p99: a request waiting behind a stalled flush waits as long as the flush.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceProbe {
    pub probes: u64,
    pub fdatasync_p50_us: u64,
    pub fdatasync_p99_us: u64,
    pub fdatasync_p999_us: u64,
    pub fdatasync_max_us: u64,
    /// Flushes that took over 50 ms (a stall a request at half the peak would see whole).
    pub stalls_over_50ms: u64,
}
