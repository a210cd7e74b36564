//! The settings of `roamkv bench steady`: its command-line arguments, and how a run states them
//! (a line on the terminal, an object in results.json). Every other part of the command reads
//! them from here.

use std::path::PathBuf;

use clap::Args;
use roamkv_testbed::fixture::FsSpec;

use crate::mobility::engines::{Durability, EngineKind};

#[derive(Args, Debug)]
pub struct SteadyArgs {
    /// Output directory for results.json, timeseries.csv and report.html.
    #[arg(long, default_value = "out/steady")]
    pub out: PathBuf,
    /// Engines, comma-separated (default: roamkv, rocksdb, leveldb).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Option<Vec<EngineKind>>,
    /// Measured seconds per engine (TPCx-IoT asks for at least 1800).
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Unmeasured warm-up per engine, in seconds (same workload, continued).
    #[arg(long, default_value_t = 120)]
    pub warmup_seconds: u64,
    /// Writer threads; a list (`1,2,4,8`) runs every engine at each: the sweep of paper 002's
    /// Fig. 7 and 8, at steady state.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub threads: Vec<usize>,
    /// Probability that a device leaves before its management time ends (the workload's 0.9).
    #[arg(long, default_value_t = 0.9)]
    pub depart_probability: f64,
    /// Also run roamkv with every device leaving before its management time
    /// (`roamkv-log-only`): nothing ever leaves the log, so its rate is the ceiling roamkv's own
    /// run is measured against, in the same harness.
    #[arg(long)]
    pub with_log_only: bool,
    /// After the RocksDB engine's run, run RocksDB's own db_bench fillrandom with the same
    /// volume, threads, buffers, file system and memory cgroup (a cross-check of the adapter).
    #[arg(long)]
    pub db_bench: bool,
    #[arg(long, value_enum, default_value = "none")]
    pub durability: Durability,
    /// File system made for each engine on a loop device.
    #[arg(long, default_value = "ext4")]
    pub fs: String,
    /// Size of that file system, in GiB: data far beyond memory, but a leak fills it.
    #[arg(long, default_value_t = 16)]
    pub disk_gib: u64,
    /// Memory budget per engine, page cache included (a memory cgroup), in MiB.
    #[arg(long, default_value_t = 512)]
    pub memory_mib: u64,
    #[arg(long, default_value_t = 1000)]
    pub value_bytes: usize,
    /// Management time of the two-level engines, and the time scale of device lifetimes, in ms.
    #[arg(long, default_value_t = 4000)]
    pub management_time_ms: u64,
    /// roamkv's move rule (docs/ENGINE.md): `management-time` (a reading leaves the log about
    /// one management time after it was written) or `lazy` (only under log or memory pressure).
    #[arg(long, default_value = "management-time", value_parser = ["management-time", "lazy"])]
    pub move_rule: String,
    /// When roamkv applies a committed group to its in-memory index (docs/ENGINE.md): before
    /// its writers return (`before-ack`, the default) or after (`after-ack`: reads wait for
    /// their device's acknowledged writes).
    #[arg(long, default_value = "before-ack", value_parser = ["before-ack", "after-ack"])]
    pub index_apply: String,
    #[arg(long, default_value_t = 2022)]
    pub seed: u64,
}

/// The run's settings, in a line.
pub(super) fn describe_config(args: &SteadyArgs, fs: FsSpec) -> String {
    format!(
        "{} s warm-up + {} s measured per engine, {:?} threads, departure probability {}, durability {}, {} GiB {} file system, memory budget {} MiB (cgroup), values {} B, management time {} ms, move rule {}, index apply {}, seed {}",
        args.warmup_seconds,
        args.seconds,
        args.threads,
        args.depart_probability,
        args.durability.name(),
        args.disk_gib,
        fs.name(),
        args.memory_mib,
        args.value_bytes,
        args.management_time_ms,
        args.move_rule,
        args.index_apply,
        args.seed
    )
}

/// The run's settings, for results.json.
pub(super) fn config_json(args: &SteadyArgs, fs: FsSpec) -> serde_json::Value {
    serde_json::json!({
        "fs": fs.name(), "disk_bytes": args.disk_gib << 30, "seconds": args.seconds,
        "warmup_seconds": args.warmup_seconds, "threads": args.threads,
        "depart_probability": args.depart_probability,
        "durability": args.durability.name(), "memory_budget_bytes": args.memory_mib << 20,
        "value_bytes": args.value_bytes, "management_time_ms": args.management_time_ms,
        "move_rule": args.move_rule, "index_apply": args.index_apply, "seed": args.seed,
    })
}
