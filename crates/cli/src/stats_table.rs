//! The human form of the engine's statistics (`roamkv stats`, and `roamkv demo` at its end):
//! what each tier holds, every bound beside its value, and what this session wrote.

use roamkv_engine::Stats;

/// The human-readable form of `stats`: what each tier holds, the engine's bounds, and what this
/// session did.
pub fn stats_table(s: &Stats) -> String {
    let mut out = tiers_table(s);
    out.push_str(&bounds_lines(s));
    out.push_str(&activity_lines(s));
    out
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// Devices, records and bytes of each tier.
fn tiers_table(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12}\n",
        "tier", "devices", "records", "MiB"
    ));
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12.2}\n",
        "upper",
        s.upper.devices,
        s.upper.records,
        mib(s.upper.bytes)
    ));
    out.push_str(&format!(
        "{:<8} {:>9} {:>12} {:>12.2}   (records: the LSM's entries, blocks of readings; both the LSM's estimates)\n",
        "lower",
        s.lower.devices,
        s.lower.records,
        mib(s.lower.bytes)
    ));
    out
}

/// Index memory, log files, devices and queued bytes, each against its bound.
fn bounds_lines(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "index memory {:.2} MiB of {:.0} MiB cap ({:.1} bytes/record)\n",
        mib(s.index_bytes),
        mib(s.index_bytes_max),
        if s.upper.records > 0 {
            s.index_bytes as f64 / s.upper.records as f64
        } else {
            0.0
        }
    ));
    out.push_str(&format!(
        "log files {:.2} MiB of {:.0} MiB budget ({:.2} MiB spares); devices {} of {} max; queued {:.2} of {:.0} MiB\n",
        mib(s.log_bytes),
        mib(s.log_bytes_max),
        mib(s.spare_segments_bytes),
        s.devices,
        s.devices_max,
        mib(s.pending_bytes),
        mib(s.pending_bytes_max)
    ));
    out
}

/// Maintenance, bytes written and write amplification, commits and recovery.
fn activity_lines(s: &Stats) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "maintenance: {} segments overdue ({:.2} MiB); {} segments left the log ({} early, {} failed passes); {} windows ({:.2} MiB, {:.2} MiB live), {} dropped, {} consolidations; {} write stalls ({} ms), {} refused for space\n",
        s.overdue_segments,
        mib(s.overdue_bytes),
        s.segments_aged,
        s.early_passes,
        s.pass_failures,
        s.windows,
        mib(s.window_file_bytes),
        mib(s.window_live_bytes),
        s.windows_dropped,
        s.consolidations,
        s.write_stalls,
        s.write_stall_ms,
        s.no_space_errors
    ));
    out.push_str(&format!(
        "this session: user {:.2} MiB in {} records; log {:.2} MiB + segment prep {:.2} MiB; lower tier {:.2} MiB\n",
        mib(s.user_bytes),
        s.user_records,
        mib(s.log_bytes_written),
        mib(s.log_preallocated_bytes),
        mib(s.lower_bytes_written)
    ));
    let without_preparation = if s.user_bytes > 0 {
        (s.log_bytes_written + s.lower_bytes_written) as f64 / s.user_bytes as f64
    } else {
        0.0
    };
    out.push_str(&format!(
        "engine write amplification {:.3} ({:.3} without the one-time zero-fill of new segments); reclaimed without a write {:.2} MiB; {} readings moved out of the log, {} departures\n",
        s.write_amplification(),
        without_preparation,
        mib(s.reclaimed_bytes_without_write),
        s.aged_records,
        s.departures
    ));
    out.push_str(&format!(
        "{} group commits, {} fdatasyncs; {} live segments, {} recycled; recovery {} ms over {} records{}\n",
        s.group_commits,
        s.fdatasyncs,
        s.live_segments,
        s.segments_recycled,
        s.recovery_ms,
        s.recovered_records,
        s.recovery_cut.as_deref().map(|c| format!(", cut torn tail at {c}")).unwrap_or_default()
    ));
    out
}
