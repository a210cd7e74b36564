//! What `lab commit` plans, measures and reports: engines, log devices, the plan, one row of
//! results.json, a log device's description. Shared by the runner (`commit`) and `render`.

use super::postgres::WalSettings;
use roamkv_testbed::fixture::FsSpec;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Postgresql,
    Sqlite,
    Roamkv,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Postgresql => "postgresql",
            Engine::Sqlite => "sqlite",
            Engine::Roamkv => "roamkv",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    Fast,
    Slow,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Fast => "fast",
            Device::Slow => "slow",
        }
    }
}

/// What to run: every engine x device x workload x session count.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub engines: Vec<Engine>,
    pub devices: Vec<Device>,
    pub sessions: Vec<u32>,
    /// (transactions per session, row bytes)
    pub workloads: Vec<(u64, usize)>,
    pub fs: FsSpec,
    pub slow_write_iops: u32,
    /// Work outside the commit per transaction (each session sleeps before each transaction).
    pub think_ms: u64,
    pub postgres: WalSettings,
}

/// One measured (or failed) run: the row of results.json.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub engine: &'static str,
    pub device: &'static str,
    pub sessions: u32,
    /// Per session.
    pub transactions: u64,
    pub row_bytes: usize,
    /// From the start of the sessions to the end of the last one.
    pub total_seconds: f64,
    /// Share of session time spent waiting for the commit to be durable (0..1).
    pub commit_wait_share: f64,
    /// Where `commit_wait_share` comes from.
    pub commit_wait_source: &'static str,
    /// The client-side measure (time inside the commit call / session time).
    pub commit_wait_share_client: f64,
    /// Transactions per log sync (PostgreSQL: per pg_stat_wal sync; roamkv: per group commit;
    /// SQLite: per fdatasync, WAL and checkpoint alike).
    pub mean_group_size: f64,
    pub log_syncs: u64,
    pub transactions_per_second: f64,
    pub commit_latency_ms_mean: f64,
    /// PostgreSQL: wal_sync_time / wal_sync (ms per WAL sync), from pg_stat_wal.
    pub log_sync_ms_mean: Option<f64>,
    /// SQLite: share of session time spent waiting for the write lock (BEGIN IMMEDIATE).
    pub lock_wait_share: Option<f64>,
    /// Engine-specific counters (pg_stat_wal, pgbench's report, roamkv's stats).
    pub detail: serde_json::Value,
    pub error: Option<String>,
}

impl Row {
    pub(crate) fn failed(
        engine: Engine,
        device: Device,
        sessions: u32,
        workload: (u64, usize),
        error: String,
    ) -> Row {
        Row {
            engine: engine.name(),
            device: device.name(),
            sessions,
            transactions: workload.0,
            row_bytes: workload.1,
            total_seconds: f64::NAN,
            commit_wait_share: f64::NAN,
            commit_wait_source: "",
            commit_wait_share_client: f64::NAN,
            mean_group_size: f64::NAN,
            log_syncs: 0,
            transactions_per_second: f64::NAN,
            commit_latency_ms_mean: f64::NAN,
            log_sync_ms_mean: None,
            lock_wait_share: None,
            detail: serde_json::Value::Null,
            error: Some(error),
        }
    }
}

/// A log device as the report describes it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceReport {
    pub device: &'static str,
    pub fs: String,
    pub block_device: String,
    pub mkfs: String,
    pub mount_options: String,
    pub throttle: Option<String>,
    /// Median of 4 KiB pwrite + fdatasync on this device, throttle on (the device's sync write cost).
    pub sync_write_ms_median: f64,
    /// The mean of the same calls (the steady-stream cost; see `sessions::SyncWriteCost`).
    pub sync_write_ms_mean: f64,
}
