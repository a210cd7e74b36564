//! report.html: the runs, the diagnosis, the thread sweep and every series over time as charts,
//! and the method. The JSON and CSV beside it are written by mod.rs from the same records.

use std::path::Path;

use roamkv_testbed::report::{Html, MachineHeader, line_chart_svg};

use crate::error::Result;

use super::args::SteadyArgs;
use super::ceilings::Ceilings;
use super::results::{LOG_ONLY_LABEL, Point, SteadyRun};
use super::table::{ceiling_table, describe_run, diagnosis_table};

pub(super) fn write_report(
    path: &Path,
    header: &MachineHeader,
    args: &SteadyArgs,
    (runs, ceilings): (&[SteadyRun], &Ceilings),
    points: &[Point],
) -> Result<()> {
    let mut html = Html::new("roamkv bench steady: the long run", header);
    html.heading("Runs");
    for run in runs {
        html.paragraph(&describe_run(run));
    }
    html.heading("Where the work went (measured phase)");
    html.preformatted(&diagnosis_table(runs));
    html.heading("Against the ceilings (CPU, disk, fdatasync; measured in this run)");
    html.preformatted(&ceiling_table(runs, ceilings, args.seconds));
    if args.threads.len() > 1 {
        html.heading("Writer threads at steady state (cf. paper 002, Fig. 7 and 8)");
        sweep_charts(&mut html, runs, args.seconds);
    }
    html.heading("Over time");
    over_time_charts(&mut html, runs, points);
    for run in runs.iter().filter(|r| r.engine.starts_with("roamkv")) {
        html.svg(&space_bound_chart(&run.engine, points));
        html.svg(&lower_tier_chart(&run.engine, points));
    }
    html.heading("Configuration and method");
    html.paragraph(&method(args));
    for run in runs {
        html.paragraph(&format!("{}: {}", run.engine, run.config));
    }
    Ok(html.write(path)?)
}

/// Throughput and device writes against writer threads, one line per engine.
fn sweep_charts(html: &mut Html, runs: &[SteadyRun], seconds: u64) {
    let mut names: Vec<String> = Vec::new();
    let series_name = |r: &SteadyRun| {
        if r.depart_probability >= 1.0 && r.engine_kind == "roamkv" {
            LOG_ONLY_LABEL.to_string()
        } else {
            r.engine_kind.clone()
        }
    };
    for r in runs.iter().filter(|r| r.completed) {
        if !names.contains(&series_name(r)) {
            names.push(series_name(r));
        }
    }
    let series = |y: &dyn Fn(&SteadyRun) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        names
            .iter()
            .map(|name| {
                let line = runs
                    .iter()
                    .filter(|r| r.completed && series_name(r) == *name)
                    .map(|r| (r.threads as f64, y(r)))
                    .collect();
                (name.clone(), line)
            })
            .collect()
    };
    html.svg(&line_chart_svg(
        "Throughput at steady state",
        "writer threads",
        "operations/s",
        &series(&|r| r.ops_per_sec),
    ));
    html.svg(&line_chart_svg(
        "Device writes at steady state",
        "writer threads",
        "MB/s",
        &series(&|r| r.device_bytes_written as f64 / seconds.max(1) as f64 / 1e6),
    ));
    html.svg(&line_chart_svg(
        "Write amplification at steady state",
        "writer threads",
        "device bytes / user bytes",
        &series(&|r| r.write_amplification),
    ));
}

/// A chart over the run's seconds.
fn time_chart(title: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    line_chart_svg(
        title,
        "seconds since start (warm-up first)",
        y_label,
        series,
    )
}

/// One series per engine of `y` over time.
fn per_engine(
    runs: &[SteadyRun],
    points: &[Point],
    y: &dyn Fn(&Point) -> f64,
) -> Vec<(String, Vec<(f64, f64)>)> {
    runs.iter()
        .map(|r| {
            let series = points
                .iter()
                .filter(|p| p.engine == r.engine)
                .map(|p| (p.t_s, y(p)))
                .collect();
            (r.engine.clone(), series)
        })
        .collect()
}

/// Throughput, space, device writes, memory and maintenance debt of every engine over time.
fn over_time_charts(html: &mut Html, runs: &[SteadyRun], points: &[Point]) {
    let per_engine = |y: &dyn Fn(&Point) -> f64| per_engine(runs, points, y);
    html.svg(&time_chart(
        "Throughput",
        "operations/s",
        &per_engine(&|p| p.ops_per_sec),
    ));
    html.svg(&time_chart(
        "Bytes on disk",
        "GB",
        &per_engine(&|p| p.space_bytes as f64 / 1e9),
    ));
    html.svg(&time_chart(
        "Device writes",
        "MB/s",
        &per_engine(&|p| p.device_write_bytes_per_sec / 1e6),
    ));
    html.svg(&time_chart(
        "Device reads",
        "MB/s",
        &per_engine(&|p| p.device_read_bytes_per_sec / 1e6),
    ));
    html.svg(&time_chart(
        "Lower tier's own writes: flushes + compactions",
        "MB/s",
        &per_engine(&|p| (p.flush_write_bytes_per_sec + p.compaction_write_bytes_per_sec) / 1e6),
    ));
    html.svg(&time_chart(
        "roamkv: longest state-lock hold in each second (histogram bucket bound)",
        "ms",
        &per_engine(&|p| p.lock_hold_max_us / 1e3),
    ));
    html.svg(&time_chart(
        "Memory (cgroup: heap + page cache)",
        "MiB",
        &per_engine(&|p| p.cgroup_bytes as f64 / 1048576.0),
    ));
    html.svg(&time_chart(
        "Maintenance debt (roamkv: overdue log bytes; RocksDB: pending compaction)",
        "MB",
        &per_engine(&|p| p.backlog_bytes as f64 / 1e6),
    ));
}

/// A roamkv run's bytes on disk against what it must keep and against its bound.
fn space_bound_chart(engine: &str, points: &[Point]) -> String {
    let mine: Vec<&Point> = points.iter().filter(|p| p.engine == engine).collect();
    let line = |name: &str, y: &dyn Fn(&Point) -> f64| {
        (
            name.to_string(),
            mine.iter().map(|p| (p.t_s, y(p))).collect::<Vec<_>>(),
        )
    };
    time_chart(
        &format!("{engine}: bytes on disk against what must be kept"),
        "GB",
        &[
            line("on disk", &|p| p.space_bytes as f64 / 1e9),
            line("live user bytes", &|p| p.live_user_bytes as f64 / 1e9),
            line("bound: 1.3 x live + log budget", &|p| {
                (1.3 * p.live_user_bytes as f64 + p.log_bytes_max as f64) / 1e9
            }),
            line("log files", &|p| p.log_bytes as f64 / 1e9),
            line("lower tier", &|p| p.lower_bytes as f64 / 1e9),
        ],
    )
}

/// The lower tier of one roamkv run: its live and dead bytes, and how fast it reclaims (window
/// files dropped whole) and rewrites (consolidation).
fn lower_tier_chart(engine: &str, points: &[Point]) -> String {
    let mine: Vec<&Point> = points.iter().filter(|p| p.engine == engine).collect();
    let line = |name: &str, y: &dyn Fn(&Point) -> f64| {
        (
            name.to_string(),
            mine.iter().map(|p| (p.t_s, y(p))).collect::<Vec<_>>(),
        )
    };
    time_chart(
        &format!("{engine}: the lower tier (MB), and MB/s reclaimed and rewritten"),
        "MB or MB/s",
        &[
            line("live", &|p| p.lower_live_bytes as f64 / 1e6),
            line("dead", &|p| p.lower_dead_bytes as f64 / 1e6),
            line("reclaimed (files dropped) /s", &|p| {
                p.lower_reclaim_bytes_per_sec / 1e6
            }),
            line("rewritten (consolidation) /s", &|p| {
                p.consolidation_write_bytes_per_sec / 1e6
            }),
        ],
    )
}

/// The report's paragraph on how the run was made.
fn method(args: &SteadyArgs) -> String {
    format!(
        "Each engine: a fresh {} GiB {} file system on a direct-I/O loop device, the engine in a child process inside a {} MiB memory cgroup (heap and page cache), {:?} writer threads, {} s warm-up then {} s measured, durability {}. Every second: ops/s and device write bandwidth (the loop device's counters), bytes on disk (statvfs, minus what the empty file system used), live user bytes (key + value bytes of readings of devices that have not departed), the engine's own figures, the cgroup's usage. Throughput and write amplification cover the measured phase (device bytes after a syncfs at its start, through the final sync). Queries: TPCx-IoT's pair at 0.005 % of operations: the last 30 s of one sensor, and a random 30 s window in the 1800 s before.",
        args.disk_gib,
        args.fs,
        args.memory_mib,
        args.threads,
        args.warmup_seconds,
        args.seconds,
        args.durability.name()
    )
}
