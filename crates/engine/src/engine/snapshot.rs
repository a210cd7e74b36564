//! `Engine::stats`: one snapshot of the counters, the state's sums and the lower tier's
//! figures, taken under the state lock once (the counters are atomics, read after it). Apart
//! from stats.rs, which every room writes its counters into: this reads the whole state.

use std::sync::atomic::Ordering;

use crate::model::limits;
use crate::state::{Inner, State};
use crate::stats::{Counters, Stats};

/// Sealed segments past their management time whose readings are still in the log, and their
/// bytes.
fn overdue(st: &State, now_ms: u64, management_time_ms: u64) -> (u64, u64) {
    st.log
        .segments
        .iter()
        .filter(|(seq, live)| {
            !live.aged
                && **seq < st.log.active.seq
                && live
                    .sealed_at_ms
                    .is_some_and(|at| now_ms >= at.saturating_add(management_time_ms))
        })
        .fold((0, 0), |(n, bytes), (_, live)| {
            (n + 1, bytes + live.written_end)
        })
}

/// The lower tier's space and what reclaims it: consolidations, window drops, the settled
/// space's files and their live estimate.
fn lower_space(inner: &Inner, stats: &mut Stats) {
    let c = &inner.counters;
    stats.consolidations = Counters::get(&c.consolidations);
    stats.consolidated_bytes = Counters::get(&c.consolidated_bytes);
    stats.consolidated_to_settled_bytes = Counters::get(&c.consolidated_to_settled_bytes);
    stats.windows_dropped = Counters::get(&c.windows_dropped);
    stats.windows_dropped_bytes = Counters::get(&c.windows_dropped_bytes);
    stats.settled_reclaims = Counters::get(&c.settled_reclaims);
    (stats.settled_file_bytes, stats.settled_live_bytes) = inner.lower.settled_bytes();
    stats.lower_live_bytes = stats.window_live_bytes + stats.settled_live_bytes;
    stats.lower_dead_bytes =
        (stats.window_file_bytes + stats.settled_file_bytes).saturating_sub(stats.lower_live_bytes);
}

/// The index's lag behind the acknowledgement (`IndexApply::AfterAck`): its bound and the waits.
fn index_lag(c: &Counters, stats: &mut Stats) {
    stats.index_lag_bytes_max = limits::INDEX_LAG_BYTES_MAX as u64;
    stats.index_waits = Counters::get(&c.index_waits);
    stats.index_lag_waits = Counters::get(&c.index_lag_waits);
}

/// `Engine::stats`: counters, tiers, and every limit beside its current value. Under the state
/// lock it reads kept totals and walks the log's segments and the windows, never the mapping
/// table.
pub(crate) fn stats(inner: &Inner) -> Stats {
    let now_ms = inner.options.clock.now_ms();
    let mut stats = {
        let mut st = inner.state.lock();
        // What every acknowledged write did is counted (a poisoned or closing engine reports
        // what it has).
        let _ = crate::commit::index_apply::wait_for_committed(inner, &mut st);
        let placed = st.map.placed();
        let (window_file_bytes, window_live_bytes) = st.lower.window_bytes();
        let mut stats = Stats {
            index_bytes: st.index_account.bytes,
            live_segments: st.log.segments.len() as u64,
            pending_bytes: st.log.queued_bytes as u64,
            index_lag_bytes: st.log.unapplied_bytes as u64,
            devices: st.map.len() as u64,
            mapping_table_scans: st.map.scans(),
            last_maintenance_error: st.last_maintenance_error.clone(),
            windows: st.lower.windows.len() as u64,
            window_file_bytes,
            window_live_bytes,
            ..Stats::default()
        };
        stats.upper.devices = st.map.len() as u64 - placed;
        stats.upper.records = st.index_account.readings;
        stats.upper.bytes = st.index_account.reading_bytes;
        stats.lower.devices = placed;
        (stats.overdue_segments, stats.overdue_bytes) =
            overdue(&st, now_ms, inner.options.management_time_ms);
        stats
    };
    let (lower_records, lower_bytes) = inner.lower.estimate();
    let c = &inner.counters;
    stats.user_bytes = Counters::get(&c.user_bytes);
    stats.user_records = Counters::get(&c.user_records);
    stats.log_bytes_written = Counters::get(&c.log_bytes_written);
    stats.log_block_bytes_written = Counters::get(&c.log_block_bytes_written);
    stats.log_preallocated_bytes = Counters::get(&c.log_preallocated_bytes);
    stats.lower_bytes_written = inner.lower.bytes_written();
    stats.reclaimed_bytes_without_write = Counters::get(&c.reclaimed_bytes_without_write);
    stats.lower.records = lower_records;
    stats.lower.bytes = lower_bytes;
    stats.windows_per_device_max = inner.options.windows_per_device_max as u64;
    stats.window_space_amplification_percent = (stats.window_file_bytes * 100)
        .checked_div(stats.window_live_bytes)
        .unwrap_or(100);
    stats.window_space_amplification_percent_max = limits::WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX;
    stats.index_bytes_max = inner.options.index_bytes_max;
    stats.segments_aged = Counters::get(&c.segments_aged);
    stats.early_passes = Counters::get(&c.early_passes);
    stats.aged_records = Counters::get(&c.aged_records);
    stats.moved_bytes = Counters::get(&c.moved_bytes);
    stats.pass_failures = Counters::get(&c.pass_failures);
    lower_space(inner, &mut stats);
    stats.departures = Counters::get(&c.departures);
    stats.trims = Counters::get(&c.trims);
    stats.fdatasyncs = Counters::get(&c.fdatasyncs);
    stats.group_commits = Counters::get(&c.group_commits);
    stats.log_head_reads = Counters::get(&c.log_head_reads);
    stats.log_bytes = inner.spares.log_bytes();
    stats.log_bytes_max = inner.spares.budget_bytes;
    stats.spare_segments_bytes = inner.spares.spare_bytes.load(Ordering::Relaxed);
    stats.segments_recycled = Counters::get(&c.segments_recycled);
    stats.segments_retired = Counters::get(&c.segments_retired);
    stats.pending_bytes_max = limits::PENDING_BYTES_MAX as u64;
    index_lag(c, &mut stats);
    stats.devices_max = inner.options.devices_max;
    stats.window_bytes_max = limits::WINDOW_BYTES_MAX;
    stats.log_dirty_bytes_max = 2 * inner.options.log_writeback_bytes;
    write_waits(c, &mut stats);
    stats.recovery_ms = inner.recovery.ms;
    stats.recovered_records = inner.recovery.records;
    stats.recovery_buffer_bytes_max = inner.recovery.buffer_bytes_max;
    stats.recovery_cut = inner.recovery.cut.clone();
    stats.state_lock = inner.state.hold_times();
    stats.passes = c.pass_times();
    stats.maintenance_read_bytes = Counters::get(&c.maintenance_read_bytes);
    stats.lower_diagnostics = inner.lower.diagnostics();
    stats
}

/// What writers waited for: log room (stalls, their time, the refusals past the bound), and
/// wakes of parked writers that did not come (commit_log/waiters.rs).
fn write_waits(c: &Counters, stats: &mut Stats) {
    stats.write_stalls = Counters::get(&c.write_stalls);
    stats.write_stall_ms = Counters::get(&c.write_stall_ms);
    stats.no_space_errors = Counters::get(&c.no_space_errors);
    stats.commit_wakes_missed = Counters::get(&c.commit_wakes_missed);
}
