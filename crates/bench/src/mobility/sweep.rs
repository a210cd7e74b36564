//! `roamkv bench mobility`: the sweep of paper 002's TPCx-IoT mobility workload over engines,
//! writer threads, durability modes and scenarios; its progress and outputs.
use std::path::PathBuf;

use clap::Args;
use roamkv_testbed::fixture::FsSpec;
use roamkv_testbed::report::MachineHeader;

use crate::error::{BenchError, Result};
use crate::mobility::engines::{self, Durability, EngineKind};
use crate::mobility::report::{self, RunRecord};
use crate::mobility::runner;
use crate::mobility::workload::WorkloadConfig;

#[derive(Args, Debug)]
pub struct MobilityArgs {
    /// A short sweep (1 and 4 threads, mobility scenario, 3 s runs) that finishes in ~3 minutes.
    #[arg(long)]
    pub quick: bool,
    /// Output directory for results.json, results.csv and report.html.
    #[arg(long, default_value = "out/bench")]
    pub out: PathBuf,
    /// Engines, comma-separated.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Option<Vec<EngineKind>>,
    /// Writer threads to sweep, comma-separated (default 1,2,4,8; quick: 1,4).
    #[arg(long, value_delimiter = ',')]
    pub threads: Option<Vec<usize>>,
    /// Durability modes, comma-separated: sync, none.
    #[arg(long, value_delimiter = ',', value_enum)]
    pub durability: Option<Vec<Durability>>,
    /// Scenarios, comma-separated: mobility (90 % leave early), stay (nobody leaves early).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Option<Vec<String>>,
    /// Measured seconds per run (default 6; quick: 3).
    #[arg(long)]
    pub seconds: Option<u64>,
    /// Unmeasured warm-up per run, in ms (default: one management time; quick: 1000).
    #[arg(long)]
    pub warmup_ms: Option<u64>,
    /// Repeats per configuration; the median by ops/s is reported.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// File system made for each run on a loop device.
    #[arg(long, default_value = "ext4")]
    pub fs: String,
    /// Memory budget per engine run, page cache included (a memory cgroup), in MiB.
    #[arg(long)]
    pub memory_mib: Option<u64>,
    #[arg(long, default_value_t = 1000)]
    pub value_bytes: usize,
    /// Management time of the two-level engines, and the time scale of device lifetimes, in ms.
    #[arg(long, default_value_t = 4000)]
    pub management_time_ms: u64,
    #[arg(long, default_value_t = 2022)]
    pub seed: u64,
}

struct Scenario {
    name: &'static str,
    depart_probability: f64,
}

fn scenario(name: &str) -> Result<Scenario> {
    match name {
        "mobility" => Ok(Scenario {
            name: "mobility",
            depart_probability: 0.9,
        }),
        "stay" => Ok(Scenario {
            name: "stay",
            depart_probability: 0.0,
        }),
        other => Err(BenchError::Usage(format!(
            "unknown scenario {other:?}; valid: mobility, stay"
        ))),
    }
}

/// A sweep's settings, from the arguments and the quick/full defaults.
struct Sweep {
    fs: FsSpec,
    quick: bool,
    engines: Vec<EngineKind>,
    threads: Vec<usize>,
    durabilities: Vec<Durability>,
    scenarios: Vec<Scenario>,
    seconds: u64,
    warmup_ms: u64,
    memory_bytes: u64,
    /// The engine's own caches get a quarter of the budget; the rest is heap and page cache.
    engine_memory_bytes: u64,
    image_bytes: u64,
}

impl Sweep {
    fn from_args(args: &MobilityArgs) -> Result<Sweep> {
        let fs: FsSpec = args.fs.parse()?;
        let quick = args.quick;
        let scenario_names = args.scenarios.clone().unwrap_or_else(|| {
            if quick {
                vec!["mobility".into()]
            } else {
                vec!["mobility".into(), "stay".into()]
            }
        });
        let memory_bytes = args.memory_mib.unwrap_or(if quick { 256 } else { 512 }) << 20;
        let sweep = Sweep {
            fs,
            quick,
            engines: args
                .engines
                .clone()
                .unwrap_or_else(|| EngineKind::all().to_vec()),
            threads: args
                .threads
                .clone()
                .unwrap_or_else(|| if quick { vec![1, 4] } else { vec![1, 2, 4, 8] }),
            durabilities: args
                .durability
                .clone()
                .unwrap_or_else(|| vec![Durability::None, Durability::Sync]),
            scenarios: scenario_names
                .iter()
                .map(|s| scenario(s))
                .collect::<Result<Vec<_>, _>>()?,
            seconds: args.seconds.unwrap_or(if quick { 3 } else { 6 }),
            warmup_ms: args
                .warmup_ms
                .unwrap_or(if quick { 1000 } else { args.management_time_ms }),
            memory_bytes,
            engine_memory_bytes: memory_bytes / 4,
            image_bytes: 16 << 30,
        };
        if sweep.threads.is_empty() || sweep.threads.contains(&0) || args.repeat == 0 {
            return Err(BenchError::Usage(
                "--threads needs values >= 1 and --repeat >= 1".into(),
            ));
        }
        Ok(sweep)
    }
}

pub fn mobility(args: &MobilityArgs) -> Result<()> {
    roamkv_testbed::prerequisite::require_root()?;
    let sweep = Sweep::from_args(args)?;
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    println!(
        "roamkv bench mobility: seed {}, {} s per run, {} repeat(s), memory budget {} MiB (cgroup), fs {}, values {} B, management time {} ms",
        args.seed,
        sweep.seconds,
        args.repeat,
        sweep.memory_bytes >> 20,
        sweep.fs.name(),
        args.value_bytes,
        args.management_time_ms
    );
    let (raw, cache_check) = physical_limits(&sweep)?;
    let (runs, failures) = run_sweep(args, &sweep, raw)?;

    // The db_bench cross-check of the plain-RocksDB configuration.
    let db_bench = runner::db_bench_crosscheck(runner::DbBenchSpec {
        fs: sweep.fs,
        image_bytes: sweep.image_bytes,
        num_per_thread: if sweep.quick { 100_000 } else { 1_000_000 },
        threads: 1,
        value_bytes: args.value_bytes,
        memory_bytes: sweep.engine_memory_bytes,
        cgroup_limit_bytes: None,
        sync: false,
    });
    println!("{}", report::terminal_table(&runs));
    let summary = summarize(&runs, raw, &db_bench);
    for line in &summary {
        println!("{line}");
    }
    write_outputs(
        args,
        &sweep,
        &header,
        Outputs {
            raw,
            cache_check,
            db_bench,
            summary,
            failures: &failures,
            runs: &runs,
        },
    )?;
    if failures.is_empty() && runs.iter().all(|r| r.read_check_failures == 0) {
        Ok(())
    } else {
        Err(BenchError::Check(format!(
            "{} run(s) failed or read back wrong data; see above",
            failures.len() + runs.iter().filter(|r| r.read_check_failures > 0).count()
        )))
    }
}

/// The physical limit (raw sequential write bandwidth), and the proof that the memory cgroup
/// caps the page cache.
fn physical_limits(sweep: &Sweep) -> Result<(f64, serde_json::Value)> {
    let raw_bytes = if sweep.quick { 512 << 20 } else { 2 << 30 };
    let raw = runner::raw_sequential_write(sweep.fs, sweep.image_bytes, raw_bytes)?;
    println!(
        "raw sequential write bandwidth ({} on a direct-I/O loop device, O_DIRECT 1 MiB): {:.0} MB/s",
        sweep.fs.name(),
        raw / 1e6
    );
    let cache_check = {
        let fixture = roamkv_testbed::fixture::Fixture::create(sweep.fs, 4 << 30)?;
        runner::check_cgroup_caps_page_cache(fixture.mount_dir(), 64 << 20).unwrap_or_else(
            |e| serde_json::json!({ "caps_page_cache": false, "error": e.to_string() }),
        )
    };
    println!(
        "memory cgroup caps the page cache: {}",
        cache_check["caps_page_cache"]
    );
    Ok((raw, cache_check))
}

/// Every (scenario, durability, engine, threads) configuration, repeated; returns the median
/// run of each and the failures.
fn run_sweep(
    args: &MobilityArgs,
    sweep: &Sweep,
    raw: f64,
) -> Result<(Vec<RunRecord>, Vec<String>)> {
    let mut combos: Vec<(&Scenario, Durability, EngineKind, usize)> = Vec::new();
    for s in &sweep.scenarios {
        for d in &sweep.durabilities {
            for e in &sweep.engines {
                for t in &sweep.threads {
                    combos.push((s, *d, *e, *t));
                }
            }
        }
    }
    let bar = indicatif::ProgressBar::new((combos.len() * args.repeat) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .map_err(|e| BenchError::Run(e.to_string()))?,
    );
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for (s, durability, kind, threads) in combos {
        let config = runner::engine_config(
            kind,
            durability,
            sweep.engine_memory_bytes,
            args.management_time_ms,
        );
        let workload = WorkloadConfig {
            value_bytes: args.value_bytes,
            depart_probability: s.depart_probability,
            management_time_ms: args.management_time_ms,
            seed: args.seed,
            ..WorkloadConfig::default()
        };
        let label = format!(
            "{} {} {} {}t",
            s.name,
            durability.name(),
            kind.name(),
            threads
        );
        let mut outcomes = Vec::new();
        for repeat in 0..args.repeat {
            bar.set_message(format!("{label} #{}", repeat + 1));
            let measurement = runner::Measurement {
                fs: sweep.fs,
                image_bytes: sweep.image_bytes,
                threads,
                warmup_ms: sweep.warmup_ms,
                duration_ms: sweep.seconds * 1000,
                memory_limit_bytes: sweep.memory_bytes,
            };
            match runner::run_one(measurement, config.clone(), workload.clone()) {
                Ok(o) => outcomes.push(o),
                Err(e) => {
                    bar.println(format!("FAILED {label}: {e}"));
                    failures.push(e.to_string());
                }
            }
            bar.inc(1);
        }
        if let Some(record) = median_record(&outcomes, (s, durability, kind, threads), &config, raw)
        {
            runs.push(record);
        }
    }
    bar.finish_and_clear();
    Ok((runs, failures))
}

/// The repeat closest to the median ops/s, as the sweep reports it (every repeat's ops/s listed).
fn median_record(
    outcomes: &[runner::RunOutcome],
    (s, durability, kind, threads): (&Scenario, Durability, EngineKind, usize),
    config: &engines::EngineConfig,
    raw: f64,
) -> Option<RunRecord> {
    let ops =
        |o: &runner::RunOutcome| (o.worker.puts + o.worker.queries) as f64 / o.worker.elapsed_s;
    let mut all_ops: Vec<f64> = outcomes.iter().map(ops).collect();
    let median_ops = roamkv_testbed::stats::median(&mut all_ops.clone());
    let chosen = outcomes.iter().min_by(|a, b| {
        (ops(a) - median_ops)
            .abs()
            .total_cmp(&(ops(b) - median_ops).abs())
    })?;
    let w = &chosen.worker;
    let device_bytes = chosen.device.bytes_written();
    all_ops.sort_by(|a, b| a.total_cmp(b));
    Some(RunRecord {
        engine: kind.name().into(),
        threads,
        durability: durability.name().into(),
        scenario: s.name.into(),
        ops_per_sec: ops(chosen),
        ops_per_sec_repeats: all_ops,
        puts: w.puts,
        queries: w.queries,
        departures: w.departures,
        put_p50_us: w.put_p50_us,
        put_p99_us: w.put_p99_us,
        put_p999_us: w.put_p999_us,
        query_p99_us: w.query_p99_us,
        user_bytes: w.user_bytes,
        device_bytes_written: device_bytes,
        device_writes: chosen.device.writes,
        device_flushes: chosen.device.flushes,
        write_amplification: report::write_amplification(device_bytes, w.user_bytes),
        user_bytes_per_sec: w.user_bytes as f64 / w.elapsed_s,
        device_write_bytes_per_sec: device_bytes as f64 / w.elapsed_s,
        ingest_fraction_of_raw: w.user_bytes as f64 / w.elapsed_s / raw,
        peak_rss_bytes: w.peak_rss_bytes,
        cgroup_peak_bytes: chosen.cgroup_peak_bytes,
        memory_capped: chosen.memory_capped,
        space_bytes_end: chosen.space_bytes_end,
        read_checks: w.read_checks,
        read_check_failures: w.read_check_failures,
        elapsed_s: w.elapsed_s,
        config: engines::describe(config),
    })
}

/// What a sweep writes besides its runs.
struct Outputs<'a> {
    raw: f64,
    cache_check: serde_json::Value,
    db_bench: Result<(String, f64)>,
    summary: Vec<String>,
    failures: &'a [String],
    runs: &'a [RunRecord],
}

fn write_outputs(
    args: &MobilityArgs,
    sweep: &Sweep,
    header: &MachineHeader,
    o: Outputs<'_>,
) -> Result<()> {
    let Sweep {
        fs,
        seconds,
        warmup_ms,
        memory_bytes,
        engine_memory_bytes,
        ..
    } = *sweep;
    let engines_list = &sweep.engines;
    let (raw, cache_check, summary, failures, runs) =
        (o.raw, &o.cache_check, &o.summary, o.failures, o.runs);
    let db_bench_json = match &o.db_bench {
        Ok((command, ops)) => serde_json::json!({ "command": command, "ops_per_sec": ops }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    };
    let notes = vec![
        format!("Each run: a fresh {} file system on a loop device ({}, direct I/O to its backing file so writes reach the disk, not the host's page cache), one engine in a child process placed in a memory cgroup of {} MiB (heap and page cache), {} writer threads for {} s, then read checks; device bytes are the loop device's own counters (/sys/block/*/stat) after sync + syncfs.", fs.name(), "sparse image on the VM disk", memory_bytes >> 20, "N", seconds),
        format!("Page-cache cap check: {cache_check}"),
        format!("Workload: TPCx-IoT keys (device, one of 160 sensors, ts +100 ms per reading), {} B random values, 16 readings per put batch, 0.005 % queries (last 5 s, and a random 5 s window of the last 30 min), 32 active devices per writer thread; mobility: 90 % of devices leave before the management time ({} ms), the rest stay 1.2-2x it; stay: none leave early. Seed {}.", args.value_bytes, args.management_time_ms, args.seed),
        format!("Each run has an unmeasured warm-up of {warmup_ms} ms (the same workload, continued; one management time by default), then a syncfs; counters, latencies and bytes cover only the measured {seconds} s that follow and the final sync. With several repeats, the run closest to the median ops/s is reported and every repeat's ops/s is listed."),
        "Ops/s counts readings written plus queries, per second. Put latency is per batch of 16.".to_string(),
        "roamkv's segments are zero-filled once when first made (so that later commits write no file-system metadata) and recycled after: in short runs that one-time write is a visible part of roamkv's sync-mode write amplification; under durability none they are fallocate'd instead.".to_string(),
    ];
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "config": {
            "fs": fs.name(), "seconds_per_run": seconds, "warmup_ms": warmup_ms, "repeat": args.repeat, "memory_budget_bytes": memory_bytes,
            "engine_memory_bytes": engine_memory_bytes, "value_bytes": args.value_bytes,
            "management_time_ms": args.management_time_ms, "seed": args.seed,
            "engines": engines_list.iter().map(|e| (e.name(), engines::describe(&runner::engine_config(*e, Durability::Sync, engine_memory_bytes, args.management_time_ms)))).collect::<std::collections::BTreeMap<_, _>>(),
        },
        "raw_seq_write_bytes_per_sec": raw,
        "page_cache_check": cache_check,
        "db_bench_crosscheck": db_bench_json,
        "summary": summary,
        "failures": failures,
        "runs": runs,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    report::write_csv(&args.out.join("results.csv"), runs)?;
    report::write_html(&args.out.join("report.html"), header, summary, &notes, runs)?;
    println!(
        "wrote {0}/results.json, {0}/results.csv, {0}/report.html",
        args.out.display()
    );
    Ok(())
}

/// The comparisons the benchmark is read for (ingest against the raw disk bandwidth, roamkv
/// against each baseline, write amplification), computed from the runs (never asserted).
fn summarize(runs: &[RunRecord], raw: f64, db_bench: &Result<(String, f64)>) -> Vec<String> {
    let best = |engine: &str, durability: &str, scenario: &str| {
        runs.iter()
            .filter(|r| r.engine == engine && r.durability == durability && r.scenario == scenario)
            .max_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec))
    };
    let mut lines = vec![format!(
        "raw sequential write bandwidth: {:.0} MB/s",
        raw / 1e6
    )];
    for scenario in ["mobility", "stay"] {
        let Some(roam) = best("roamkv", "none", scenario) else {
            continue;
        };
        lines.push(format!(
            "{scenario}/none: roamkv best {:.0} ops/s at {} threads = {:.0} % of raw bandwidth (user bytes), WA {:.2}",
            roam.ops_per_sec,
            roam.threads,
            roam.ingest_fraction_of_raw * 100.0,
            roam.write_amplification
        ));
        for other in ["roamkv-leveldb", "rocksdb", "leveldb", "sqlite"] {
            if let Some(o) = best(other, "none", scenario) {
                lines.push(format!(
                    "{scenario}/none: roamkv / {other} (each at its best thread count) = {:.1}x; {other} WA {:.2}",
                    roam.ops_per_sec / o.ops_per_sec,
                    o.write_amplification
                ));
            }
        }
        let at = |durability: &str| {
            runs.iter()
                .filter(|r| {
                    r.engine == "roamkv" && r.scenario == scenario && r.durability == durability
                })
                .max_by_key(|r| r.threads)
        };
        if let (Some(sync), Some(none)) = (at("sync"), at("none")) {
            lines.push(format!(
                "{scenario}: roamkv sync / none at {} threads = {:.0} %",
                sync.threads,
                sync.ops_per_sec / none.ops_per_sec * 100.0
            ));
        }
    }
    match db_bench {
        Ok((_, ops)) => {
            if let Some(r) = runs.iter().find(|r| {
                r.engine == "rocksdb"
                    && r.durability == "none"
                    && r.threads == 1
                    && r.scenario == "mobility"
            }) {
                lines.push(format!(
                    "cross-check: db_bench fillrandom (1 thread, no sync) {:.0} ops/s vs our plain RocksDB {:.0} readings/s at 1 thread",
                    ops, r.ops_per_sec
                ));
            }
        }
        Err(e) => lines.push(format!("cross-check: db_bench did not run: {e}")),
    }
    lines
}
