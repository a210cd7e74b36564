//! `roamkv bench steady`: the long run. Each engine ingests the mobility workload for a warm-up
//! and a measured phase far longer than its memory lasts, on its own loop file system sized so
//! that a correct engine fits and a leaking one runs out of disk; every second the run records
//! throughput, device writes, bytes on disk against the bytes still live, the engine's own view
//! of itself, and memory. What counts is the curve, not the average: space must go flat.
//!
//! The parts, in the order a run uses them: `args` (the settings), `run` (one engine's run:
//! fixture, worker, record), `series` (a point per second), `diagnose` (where the work went),
//! `verdict` (is space flat and bounded), `crosscheck` (db_bench beside RocksDB), `table` (the
//! terminal), `page` (report.html); `results` holds the types they share. This file runs the
//! variants in turn and writes the outputs.

mod args;
pub(crate) mod ceilings;
mod crosscheck;
mod diagnose;
mod page;
mod results;
mod run;
mod series;
mod table;
mod verdict;

use std::path::Path;
use std::process::ExitCode;

use roamkv_testbed::fixture::FsSpec;
use roamkv_testbed::report::MachineHeader;

use crate::error::{BenchError, Result};
use crate::mobility::engines::EngineKind;

use args::{config_json, describe_config};
use crosscheck::db_bench_beside;
use page::write_report;
use run::{run_engine, variants};
use table::{ceiling_table, describe_run, diagnosis_table, terminal_table};

pub use args::SteadyArgs;
pub use results::{Diagnosis, Point, SteadyRun};
pub use verdict::SPACE_TREND_PERCENT_PER_MIN_MAX;

/// results.json, timeseries.csv and report.html for the engines run so far.
fn write_outputs(
    (args, fs): (&SteadyArgs, FsSpec),
    header: &MachineHeader,
    ceilings: &ceilings::Ceilings,
    (runs, points): (&[SteadyRun], &[Point]),
    db_bench: &[String],
) -> Result<()> {
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "config": config_json(args, fs),
        "ceilings": ceilings,
        "runs": runs,
        "db_bench": db_bench,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    write_timeseries(&args.out.join("timeseries.csv"), points)?;
    write_report(
        &args.out.join("report.html"),
        header,
        args,
        (runs, ceilings),
        points,
    )
}

pub fn run(args: &SteadyArgs) -> Result<ExitCode> {
    roamkv_testbed::prerequisite::require_root()?;
    let fs: FsSpec = args.fs.parse()?;
    if args.threads.contains(&0) || args.seconds == 0 {
        return Err(BenchError::Usage(
            "--threads and --seconds must be at least 1".into(),
        ));
    }
    if !(0.0..=1.0).contains(&args.depart_probability) {
        return Err(BenchError::Usage(
            "--depart-probability must be within 0..=1".into(),
        ));
    }
    let engines_list = args
        .engines
        .clone()
        .unwrap_or_else(|| vec![EngineKind::Roamkv, EngineKind::Rocksdb, EngineKind::Leveldb]);
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    println!("roamkv bench steady: {}", describe_config(args, fs));
    println!("measuring the ceilings (disk probe, fdatasync latency)…");
    let ceilings = ceilings::measure(fs, args.disk_gib << 30)?;
    println!("{}", ceilings::describe(&ceilings));
    let mut runs = Vec::new();
    let mut points = Vec::new();
    let mut db_bench = Vec::new();
    for variant in variants(args, &engines_list) {
        let (run, series) = run_engine(args, fs, &variant)?;
        println!("{}", describe_run(&run));
        if args.db_bench && variant.kind == EngineKind::Rocksdb {
            let (puts, seconds) = series.last().map_or((0, 0.0), |p| (p.puts, p.t_s));
            db_bench.push(db_bench_beside(args, fs, &run, puts, seconds));
        }
        runs.push(run);
        points.extend(series);
        // After every engine, not only at the end: a run of hours that is stopped keeps the
        // engines it finished.
        write_outputs((args, fs), &header, &ceilings, (&runs, &points), &db_bench)?;
    }
    println!("{}", terminal_table(&runs));
    for line in &db_bench {
        println!("{line}");
    }
    println!("{}", diagnosis_table(&runs));
    println!("{}", ceiling_table(&runs, &ceilings, args.seconds));
    println!(
        "wrote {0}/results.json, {0}/timeseries.csv, {0}/report.html",
        args.out.display()
    );
    // Another engine's failure is a result; roamkv's own is a failure of this command.
    let roamkv_failed = runs.iter().any(|r| {
        r.engine.starts_with("roamkv")
            && (!r.completed || r.read_check_failures > 0 || r.space_failure.is_some())
    });
    Ok(if roamkv_failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn write_timeseries(path: &Path, points: &[Point]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| BenchError::io("creating", path, e))?;
    let mut writer = csv::Writer::from_writer(file);
    for p in points {
        writer.serialize(p)?;
    }
    writer
        .flush()
        .map_err(|e| BenchError::io("writing", path, e))
}
