//! `roamkv lab queries`: paper 000's search queries on SQLite, per file system, cold and warm
//! cache; and the same questions on sensor data asked of roamkv and SQLite (`sensor`).
//!
//! This file drives a run: the tables generated once, then per file system a fresh fixture, the
//! query set in each cache state and the sensor comparison, then the results written. The parts:
//! `args` (the command line, resolved into a `QueriesConfig`), `measure` (the tables loaded, the
//! query set timed, the ratios between file systems), `render` (the terminal tables and the HTML
//! report), `schema` and `sqlquery` (the tables and the queries), `sensor`, `roamkv_store` and
//! `compare` (the sensor comparison), `guest` (the `--vm` route).
mod args;
pub mod compare;
pub mod guest;
mod measure;
mod render;
pub mod roamkv_store;
pub mod schema;
pub mod sensor;
pub mod sqlquery;

pub use args::{Cache, QueriesArgs, QueriesConfig};
pub use measure::{
    QueryRun, QuerySet, Ratio, Tables, generate_tables, load_database, ratios, run_query_set,
};

use crate::LabError;
use roamkv_testbed::fixture::{self, Fixture, FsSpec};
use roamkv_testbed::report::say;
use std::process::ExitCode;
use std::time::Instant;

pub fn run(args: &QueriesArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv lab queries: {e}");
            ExitCode::FAILURE
        }
    }
}

fn image_bytes_for(rows: usize, sensor: Option<&sensor::SensorSpec>) -> u64 {
    // ~150 B per items row and ~130 B per owners row on disk with B-tree overhead; room for the
    // sensor data (SQLite + roamkv) and slack for the file system.
    let tables = rows as u64 * 300;
    let sensor_bytes = sensor.map(|s| s.total_readings() as u64 * 200).unwrap_or(0);
    ((tables + sensor_bytes) * 2).max(512 << 20)
}

fn run_inner(args: &QueriesArgs) -> Result<(), LabError> {
    let config = args.resolve()?;
    roamkv_testbed::prerequisite::require_root()?;
    let started = Instant::now();
    std::fs::create_dir_all(&args.out).map_err(|e| LabError::io(&args.out, e))?;
    eprintln!(
        "roamkv lab queries: {} rows per table, {} warm / {} cold repetitions, file systems: {}",
        config.rows,
        config.warm_repetitions,
        config.cold_repetitions,
        config
            .fs
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(",")
    );
    let t = Instant::now();
    let tables = generate_tables(&config).map_err(|e| LabError::Unsupported(e.to_string()))?;
    eprintln!("generated tables in {:.1} s", t.elapsed().as_secs_f64());

    let bar = progress_bar(&config);
    let mut results = Results::default();
    for &spec in &config.fs {
        measure_file_system(spec, &config, &tables, &bar, &mut results)?;
    }
    bar.finish_and_clear();
    write_results(args, &config, started, &results)
}

/// What the file systems measured so far gave.
#[derive(Default)]
struct Results {
    runs: Vec<QueryRun>,
    sensor_runs: Vec<sensor::SensorRun>,
    fixtures_info: Vec<serde_json::Value>,
}

/// One step per timed query (warm) or per cache drop (cold), over every file system.
fn progress_bar(config: &QueriesConfig) -> indicatif::ProgressBar {
    let kinds = sqlquery::query_kinds(config.rows).len() as u64;
    let per_fs: u64 = config.caches.iter().map(|c| if *c == Cache::Warm { config.warm_repetitions } else { config.cold_repetitions } as u64).sum::<u64>() * kinds;
    let bar = indicatif::ProgressBar::new(per_fs * config.fs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Loads the tables into a fresh file system of kind `spec`, runs the query set in each cache
/// state, then (if configured) the sensor comparison.
fn measure_file_system(
    spec: FsSpec,
    config: &QueriesConfig,
    tables: &Tables,
    bar: &indicatif::ProgressBar,
    results: &mut Results,
) -> Result<(), LabError> {
    let fx = Fixture::create(spec, image_bytes_for(config.rows, config.sensor.as_ref()))?;
    results.fixtures_info.push(serde_json::json!({
        "fs": spec.name(), "mkfs": fx.mkfs_command(), "mount_options": fx.mount_options(), "image_bytes": fx.image_bytes(),
    }));
    bar.set_message(format!("{} loading", spec.name()));
    let t = Instant::now();
    let db = load_database(fx.mount_dir(), tables)?;
    fx.quiesce()?;
    say(
        bar,
        format!(
            "{}: loaded {} + {} rows in {:.1} s",
            spec.name(),
            config.rows,
            config.owner_rows,
            t.elapsed().as_secs_f64()
        ),
    );
    for &cache in &config.caches {
        let reps = if cache == Cache::Warm {
            config.warm_repetitions
        } else {
            config.cold_repetitions
        };
        let progress = |m: &str| bar.set_message(m.to_string());
        let before_cold = || {
            bar.inc(1);
            fixture::drop_caches()
        };
        let query_set = QuerySet {
            db: &db,
            fs_name: spec.name(),
            cache,
            repetitions: reps,
            rows: config.rows,
            seed: config.seed,
        };
        let set = run_query_set(&query_set, &before_cold, &progress)?;
        if cache == Cache::Warm {
            bar.inc((set.len() * reps) as u64);
        }
        results.runs.extend(set);
    }
    if let Some(sensor_spec) = &config.sensor {
        bar.set_message(format!("{} sensor data", spec.name()));
        let dir = fx.mount_dir().join("sensor");
        std::fs::create_dir_all(&dir).map_err(|e| LabError::io(&dir, e))?;
        let quiesce = || fx.quiesce();
        match compare::compare(
            &dir,
            spec.name(),
            sensor_spec,
            config.warm_repetitions,
            &quiesce,
        ) {
            Ok(r) => results.sensor_runs.extend(r),
            Err(e) => say(
                bar,
                format!("{}: sensor comparison failed: {e}", spec.name()),
            ),
        }
    }
    drop(fx);
    Ok(())
}

/// The tables on the terminal, results.json and report.html.
fn write_results(
    args: &QueriesArgs,
    config: &QueriesConfig,
    started: Instant,
    results: &Results,
) -> Result<(), LabError> {
    let Results {
        runs,
        sensor_runs,
        fixtures_info,
    } = results;
    let fs_names: Vec<String> = config.fs.iter().map(|f| f.name().to_string()).collect();
    let ratio_list = ratios(runs, &fs_names);
    render::print_tables(runs, &ratio_list, sensor_runs);
    let header = roamkv_testbed::report::MachineHeader::collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let value = serde_json::json!({
        "tool": "roamkv lab queries",
        "command": command,
        "machine": header,
        "config": config,
        "fixtures": fixtures_info,
        "elapsed_s": started.elapsed().as_secs_f64(),
        "runs": runs,
        "ratios": ratio_list,
        "sensor_runs": sensor_runs,
        "roamkv_measured": roamkv_store::AVAILABLE,
        "paper_000": {
            "indexed_xfs_to_fat": "1:1.04",
            "full_scan_xfs_to_fat": "1.004:1",
            "note": "FAT is not mountable by this host kernel; compare ratios between the file systems measured here",
        },
    });
    let json = roamkv_testbed::report::write_json(&args.out, "results", &value)?;
    let html_path = args.out.join("report.html");
    render::write_html(
        &html_path,
        &header,
        &command,
        config,
        runs,
        &ratio_list,
        sensor_runs,
    )?;
    eprintln!("wrote {} and {}", json.display(), html_path.display());
    Ok(())
}
