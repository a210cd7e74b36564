//! The diagnosis: where the measured phase's work went (maintenance reads, the lower tier's
//! writes, the state lock, the passes), from the engine's counters at its first and last tick.

use crate::mobility::worker::Tick;

use super::results::Diagnosis;
use super::series::{engine_delta, lock_hold_times};

/// The measured phase's diagnosis, from its first and last ticks.
pub(super) fn diagnose(first: &Tick, last: &Tick, user_bytes: u64) -> Diagnosis {
    let delta = |name: &str| engine_delta(last, first, name);
    let holds = lock_hold_times(&last.engine).since(&lock_hold_times(&first.engine));
    let passes = delta("passes");
    let pass_us = delta("pass_us_total");
    let steps = ["snapshot", "read", "write", "catalog", "commit", "retire"];
    let wall_ns = ((last.t_s - first.t_s) * 1e9).max(1.0);
    Diagnosis {
        maintenance_read_bytes: delta("maintenance_read_bytes"),
        maintenance_read_per_user_byte: delta("maintenance_read_bytes") as f64
            / user_bytes.max(1) as f64,
        flush_write_bytes: delta("lower_flush_write_bytes"),
        compaction_read_bytes: delta("lower_compaction_read_bytes"),
        compaction_write_bytes: delta("lower_compaction_write_bytes"),
        lower_write_stall_us: delta("lower_write_stall_us"),
        group_commits: delta("group_commits"),
        fdatasyncs: delta("fdatasyncs"),
        log_head_reads: delta("log_head_reads"),
        ingested_files_by_level: last
            .engine
            .get("ingested_files_by_level")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
        lock_holds: holds.holds,
        lock_hold_p50_us: holds.percentile_ns(0.5) as f64 / 1e3,
        lock_hold_p99_us: holds.percentile_ns(0.99) as f64 / 1e3,
        lock_hold_p999_us: holds.percentile_ns(0.999) as f64 / 1e3,
        lock_hold_max_us: holds.max_bucket_ns() as f64 / 1e3,
        lock_held_share: holds.total_ns as f64 / wall_ns,
        lock_long_holds: holds
            .long_holds
            .iter()
            .map(|(site, n, max)| format!("{site} {n} holds, max {} us", max / 1000))
            .collect(),
        passes,
        pass_ms_mean: pass_us as f64 / passes.max(1) as f64 / 1e3,
        pass_ms_max: last
            .engine
            .get("pass_us_max")
            .and_then(|v| v.as_u64())
            .unwrap_or(0) as f64
            / 1e3,
        pass_step_shares: steps
            .iter()
            .map(|s| {
                let us = delta(&format!("pass_{s}_us"));
                (s.to_string(), us as f64 / pass_us.max(1) as f64)
            })
            .collect(),
        ..Diagnosis::default()
    }
}
