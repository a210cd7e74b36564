//! The terminal's view of a steady run: a line per run, the table of runs with roamkv's ratios,
//! and the diagnosis table (the HTML page repeats the lines and the diagnosis).

use super::ceilings::Ceilings;
use super::results::SteadyRun;

pub(super) fn describe_run(run: &SteadyRun) -> String {
    let gb = |b: u64| b as f64 / 1e9;
    match &run.failure {
        None => format!(
            "{}: completed, {:.0} ops/s, WA {:.2}, disk end {:.2} GB / max {:.2} GB (live {:.2} GB, trend {:+.1} MB/min){}, memory max {:.0} of {:.0} MiB, query p50/p99 {}/{} µs; space: {}",
            run.engine,
            run.ops_per_sec,
            run.write_amplification,
            gb(run.space_bytes_end),
            gb(run.space_bytes_max),
            gb(run.live_user_bytes_end),
            run.space_trend_bytes_per_min / 1e6,
            run.lower_dead_bytes_max.map_or(String::new(), |d| format!(
                ", lower tier dead max {:.3} GB",
                gb(d)
            )),
            run.memory_bytes_max as f64 / 1048576.0,
            run.memory_limit_bytes as f64 / 1048576.0,
            run.query_p50_us,
            run.query_p99_us,
            run.space_failure
                .as_deref()
                .unwrap_or("flat, within its bounds")
        ),
        Some(why) => format!(
            "{}: DID NOT COMPLETE ({why}); disk max {:.2} GB, memory max {:.0} MiB",
            run.engine,
            gb(run.space_bytes_max),
            run.memory_bytes_max as f64 / 1048576.0
        ),
    }
}

pub(super) fn terminal_table(runs: &[SteadyRun]) -> String {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "engine",
        "completed",
        "ops/s",
        "WA",
        "disk end GB",
        "disk max GB",
        "live end GB",
        "trend MB/min",
        "space",
        "log budget GB",
        "mem max MiB",
        "query p50/p99 µs",
    ]);
    for r in runs {
        table.add_row(vec![
            r.engine.clone(),
            if r.completed {
                "yes".into()
            } else {
                "NO".into()
            },
            format!("{:.0}", r.ops_per_sec),
            format!("{:.2}", r.write_amplification),
            format!("{:.2}", r.space_bytes_end as f64 / 1e9),
            format!("{:.2}", r.space_bytes_max as f64 / 1e9),
            format!("{:.2}", r.live_user_bytes_end as f64 / 1e9),
            format!("{:+.1}", r.space_trend_bytes_per_min / 1e6),
            if r.space_failure.is_some() {
                "FAILED".into()
            } else {
                "flat".into()
            },
            r.log_budget_bytes
                .map_or("-".into(), |b| format!("{:.2}", b as f64 / 1e9)),
            format!("{:.0}", r.memory_bytes_max as f64 / 1048576.0),
            format!("{}/{}", r.query_p50_us, r.query_p99_us),
        ]);
    }
    let mut text = table.to_string();
    text.push_str(&ratio_lines(runs));
    text
}

/// roamkv against each baseline at the same thread count, against its own log-only rate, and
/// against its space bound; and any run that went without a memory cap.
fn ratio_lines(runs: &[SteadyRun]) -> String {
    let mut text = String::new();
    let best_baseline = runs
        .iter()
        .filter(|r| !r.engine.starts_with("roamkv") && r.completed)
        .map(|r| r.ops_per_sec)
        .fold(0.0, f64::max);
    let completed = |r: &&SteadyRun| r.completed;
    for r in runs
        .iter()
        .filter(completed)
        .filter(|r| r.engine_kind == "roamkv")
    {
        let log_only = r.depart_probability >= 1.0;
        for other in runs
            .iter()
            .filter(completed)
            .filter(|o| o.threads == r.threads && o.engine_kind != "roamkv" && !log_only)
        {
            text.push_str(&format!(
                "\n{} / {}: {:.2}x ops/s",
                r.engine,
                other.engine,
                r.ops_per_sec / other.ops_per_sec.max(1e-9)
            ));
        }
        if let Some(ceiling) = runs.iter().filter(completed).find(|o| {
            o.engine_kind == "roamkv" && o.depart_probability >= 1.0 && o.threads == r.threads
        }) && !log_only
        {
            text.push_str(&format!(
                "\n{} / {}: {:.2} of the log-only rate",
                r.engine,
                ceiling.engine,
                r.ops_per_sec / ceiling.ops_per_sec.max(1e-9)
            ));
        }
        if best_baseline > 0.0 || log_only {
            text.push_str(&format!(
                "\n{}: space bound (1.3 x live + log budget) exceeded in {} second(s)",
                r.engine,
                r.space_bound_violations.unwrap_or(0)
            ));
        }
    }
    for r in runs.iter().filter(|r| !r.memory_capped) {
        text.push_str(&format!(
            "\n*** {}: NO MEMORY CAP (no usable memory cgroup): its figures include an unbounded page cache ***",
            r.engine
        ));
    }
    text
}

/// Each run against what bounds it (measured in the same command, `ceilings.rs`): the cores its
/// worker kept busy of the machine's, CPU per operation, the device's write rate against the
/// disk probe's, what the device read per byte written, and a batch's round trip (put p50)
/// beside one fdatasync's.
pub(super) fn ceiling_table(runs: &[SteadyRun], ceilings: &Ceilings, seconds: u64) -> String {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "engine",
        "ops/s",
        "CPU µs/op",
        "cores busy",
        "of the CPUs",
        "device write MB/s",
        "of the disk",
        "device read/written",
        "put p50 µs",
        "put p50 / fdatasync p50",
    ]);
    let disk_mb_s = ceilings.disk_write_bytes_per_sec / 1e6;
    for r in runs.iter().filter(|r| r.completed) {
        let write_mb_s = r.device_bytes_written as f64 / 1e6 / seconds.max(1) as f64;
        table.add_row(vec![
            r.engine.clone(),
            format!("{:.0}", r.ops_per_sec),
            format!("{:.2}", r.cpu_us_per_op),
            format!("{:.2}", r.cpu_cores),
            format!("{:.0} %", 100.0 * r.cpu_cores / ceilings.cpus.max(1) as f64),
            format!("{write_mb_s:.0}"),
            format!("{:.0} %", 100.0 * write_mb_s / disk_mb_s.max(1e-9)),
            format!("{:.3}", r.diagnosis.read_write_ratio),
            format!("{}", r.diagnosis.put_p50_us),
            format!(
                "{:.1}",
                r.diagnosis.put_p50_us as f64 / ceilings.fdatasync_p50_us.max(1) as f64
            ),
        ]);
    }
    format!(
        "{}
{}",
        super::ceilings::describe(ceilings),
        table
    )
}

/// The measured phase's diagnosis of each engine, as a table.
pub(super) fn diagnosis_table(runs: &[SteadyRun]) -> String {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "engine",
        "device read/written",
        "maintenance read / user",
        "flush + compaction MB",
        "ingested per level",
        "lock p50/p99/max µs",
        "lock held",
        "passes (mean/max ms)",
        "put p50/p99/p99.9 µs",
    ]);
    for r in runs.iter().filter(|r| r.completed) {
        let d = &r.diagnosis;
        table.add_row(vec![
            r.engine.clone(),
            format!(
                "{:.2} ({:.0} MB)",
                d.read_write_ratio,
                d.device_bytes_read as f64 / 1e6
            ),
            format!("{:.2}", d.maintenance_read_per_user_byte),
            format!(
                "{:.0} + {:.0}",
                d.flush_write_bytes as f64 / 1e6,
                d.compaction_write_bytes as f64 / 1e6
            ),
            format!("{:?}", d.ingested_files_by_level),
            format!(
                "{:.0}/{:.0}/{:.0}",
                d.lock_hold_p50_us, d.lock_hold_p99_us, d.lock_hold_max_us
            ),
            format!("{:.1} %", d.lock_held_share * 100.0),
            format!("{} ({:.1}/{:.1})", d.passes, d.pass_ms_mean, d.pass_ms_max),
            format!("{}/{}/{}", d.put_p50_us, r.put_p99_us, d.put_p999_us),
        ]);
    }
    let mut text = table.to_string();
    for r in runs
        .iter()
        .filter(|r| !r.diagnosis.lock_long_holds.is_empty())
    {
        text.push_str(&format!(
            "\n{}: state-lock holds over 1 ms by site: {}",
            r.engine,
            r.diagnosis.lock_long_holds.join("; ")
        ));
    }
    for r in runs.iter().filter(|r| r.diagnosis.passes > 0) {
        let steps: Vec<String> = r
            .diagnosis
            .pass_step_shares
            .iter()
            .map(|(s, share)| format!("{s} {:.0} %", share * 100.0))
            .collect();
        text.push_str(&format!(
            "\n{}: pass time by step: {}",
            r.engine,
            steps.join(", ")
        ));
    }
    text
}
