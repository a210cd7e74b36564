//! `roamkv lab queries`: paper 000's search queries on SQLite, per file system, cold and warm
//! cache; and the same questions on sensor data asked of roamkv and SQLite (`sensor`).
pub mod compare;
pub mod guest;
pub mod roamkv_store;
pub mod schema;
pub mod sensor;
pub mod sqlquery;

use roamkv_testbed::report::say;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use rusqlite::Connection;

use crate::LabError;
use roamkv_testbed::fixture::{self, Fixture, FsSpec};
use schema::{GenSpec, Generated};
use sqlquery::{ParamGen, TimingUs, sqlite_err};

#[derive(clap::Args, Debug, Clone)]
pub struct QueriesArgs {
    /// Small tables (20,000 rows) and few repetitions: a run of a few minutes.
    #[arg(long)]
    pub quick: bool,
    /// File systems, comma-separated ("all" for every one the lab knows). Default: xfs,ext4
    /// (paper 000 also had FAT, which this host kernel cannot mount).
    #[arg(long)]
    pub fs: Option<String>,
    /// Rows of each table (paper 000: 1,000,000).
    #[arg(long)]
    pub rows: Option<usize>,
    /// Timed repetitions per query with a warm cache (paper 000: 100).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Timed repetitions per query with a cold cache (caches dropped and the database reopened
    /// before each one). Default: same as --repetitions.
    #[arg(long)]
    pub cold_repetitions: Option<usize>,
    /// Cache states: cold, warm, or both (comma-separated).
    #[arg(long, default_value = "warm,cold")]
    pub cache: String,
    /// Skip the sensor-data comparison (roamkv vs SQLite).
    #[arg(long)]
    pub no_sensor: bool,
    /// Sensor comparison: devices x 4 sensors x readings per sensor.
    #[arg(long)]
    pub sensor_devices: Option<usize>,
    #[arg(long)]
    pub sensor_readings: Option<usize>,
    /// Seed of the table generator and query parameters.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "lab-results/queries")]
    pub out: PathBuf,
}

/// Cache state of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cache {
    /// Page cache dropped (echo 3 > drop_caches) and SQLite reopened before every repetition.
    Cold,
    /// Same connection; one untimed run of the query first.
    Warm,
}

impl Cache {
    pub fn name(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::Warm => "warm",
        }
    }
    pub fn parse_list(s: &str) -> Result<Vec<Cache>, LabError> {
        let mut out = Vec::new();
        for part in s
            .split(',')
            .map(|p| p.trim().to_ascii_lowercase())
            .filter(|p| !p.is_empty())
        {
            let c = match part.as_str() {
                "cold" => Cache::Cold,
                "warm" => Cache::Warm,
                other => {
                    return Err(LabError::Parse {
                        what: "cache state".into(),
                        detail: format!("{other:?}; valid: cold, warm"),
                    });
                }
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        if out.is_empty() {
            return Err(LabError::Parse {
                what: "cache state".into(),
                detail: "empty; valid: cold, warm".into(),
            });
        }
        Ok(out)
    }
}

/// The resolved configuration of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueriesConfig {
    pub fs: Vec<FsSpec>,
    pub rows: usize,
    pub owner_rows: usize,
    pub warm_repetitions: usize,
    pub cold_repetitions: usize,
    pub caches: Vec<Cache>,
    pub duplicate_fraction: f64,
    pub seed: u64,
    pub sensor: Option<sensor::SensorSpec>,
}

impl QueriesArgs {
    pub fn resolve(&self) -> Result<QueriesConfig, LabError> {
        let fs = fixture::parse_fs_list(self.fs.as_deref().unwrap_or("xfs,ext4"))?;
        let rows = self
            .rows
            .unwrap_or(if self.quick { 20_000 } else { 1_000_000 });
        let warm = self
            .repetitions
            .unwrap_or(if self.quick { 10 } else { 100 });
        let cold = self
            .cold_repetitions
            .unwrap_or(if self.quick { 5 } else { warm });
        if rows < 100 || warm == 0 {
            return Err(LabError::Parse {
                what: "--rows/--repetitions".into(),
                detail: "need at least 100 rows and 1 repetition".into(),
            });
        }
        let sensor = (!self.no_sensor).then(|| sensor::SensorSpec {
            devices: self
                .sensor_devices
                .unwrap_or(if self.quick { 20 } else { 100 }),
            sensors_per_device: 4,
            readings_per_sensor: self.sensor_readings.unwrap_or(if self.quick {
                250
            } else {
                1_000
            }),
            value_bytes: 16,
            seed: self.seed,
        });
        Ok(QueriesConfig {
            fs,
            rows,
            owner_rows: rows,
            warm_repetitions: warm,
            cold_repetitions: cold,
            caches: Cache::parse_list(&self.cache)?,
            duplicate_fraction: schema::DUPLICATE_FRACTION_DEFAULT,
            seed: self.seed,
            sensor,
        })
    }
}

/// One (file system, cache, query) measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueryRun {
    pub fs: String,
    pub cache: Cache,
    pub query: String,
    pub indexed: bool,
    pub range_rows: Option<usize>,
    pub timing_us: TimingUs,
    pub result_rows_mean: f64,
}

/// Both tables, generated once and loaded into every file system.
pub struct Tables {
    pub items: Generated,
    pub owners: Generated,
}

pub fn generate_tables(config: &QueriesConfig) -> Result<Tables, schema::SchemaError> {
    let owners = schema::generate(
        schema::OWNERS,
        GenSpec {
            rows: config.owner_rows,
            foreign_rows: config.owner_rows,
            duplicate_fraction: config.duplicate_fraction,
            seed: config.seed ^ 0x0B,
        },
    )?;
    let items = schema::generate(
        schema::ITEMS,
        GenSpec {
            rows: config.rows,
            foreign_rows: config.owner_rows,
            duplicate_fraction: config.duplicate_fraction,
            seed: config.seed ^ 0x1A,
        },
    )?;
    Ok(Tables { items, owners })
}

/// Creates `dir/queries.db` with both tables (plain SQLite defaults: DELETE journal, FULL sync).
pub fn load_database(dir: &Path, tables: &Tables) -> Result<PathBuf, LabError> {
    let path = dir.join("queries.db");
    let conn = Connection::open(&path).map_err(sqlite_err)?;
    tables
        .owners
        .load(&conn)
        .map_err(|e| LabError::Unsupported(format!("loading owners: {e}")))?;
    tables
        .items
        .load(&conn)
        .map_err(|e| LabError::Unsupported(format!("loading items: {e}")))?;
    conn.close().map_err(|(_, e)| sqlite_err(e))?;
    Ok(path)
}

/// Where and how to run the query set once.
#[derive(Clone, Copy, Debug)]
pub struct QuerySet<'a> {
    pub db: &'a Path,
    pub fs_name: &'a str,
    pub cache: Cache,
    pub repetitions: usize,
    /// Rows of `items` (sets the range sizes).
    pub rows: usize,
    pub seed: u64,
}

/// Runs every query type `repetitions` times against `db` in one cache state. `before_cold` is
/// called before each cold repetition (drop caches); tests pass a no-op.
pub fn run_query_set(
    set: &QuerySet<'_>,
    before_cold: &dyn Fn() -> Result<(), LabError>,
    progress: &dyn Fn(&str),
) -> Result<Vec<QueryRun>, LabError> {
    let QuerySet {
        db,
        fs_name,
        cache,
        repetitions,
        rows,
        seed,
    } = *set;
    let mut out = Vec::new();
    let setup = Connection::open(db).map_err(sqlite_err)?;
    for kind in sqlquery::query_kinds(rows) {
        progress(&format!("{fs_name} {} {}", cache.name(), kind.name));
        // Same parameter sequence on every file system: the seed depends on the query only.
        let mut params =
            ParamGen::new(&setup, rows, seed ^ hash_name(&kind.name)).map_err(sqlite_err)?;
        let mut times = Vec::with_capacity(repetitions);
        let mut result_rows = 0u64;
        let warm_conn = if cache == Cache::Warm {
            Some(Connection::open(db).map_err(sqlite_err)?)
        } else {
            None
        };
        if let Some(conn) = &warm_conn {
            let p = params.next(kind.range_rows.unwrap_or(100));
            sqlquery::execute(conn, &kind, &p).map_err(sqlite_err)?;
        }
        for _ in 0..repetitions {
            if fixture::interrupted() {
                return Err(LabError::Interrupted);
            }
            let p = params.next(kind.range_rows.unwrap_or(100));
            let exec = match &warm_conn {
                Some(conn) => sqlquery::execute(conn, &kind, &p).map_err(sqlite_err)?,
                None => {
                    before_cold()?;
                    let conn = Connection::open(db).map_err(sqlite_err)?;
                    // Opening reads the schema; the query is timed from here, as on a freshly
                    // started app whose first statement has been prepared once.
                    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                        r.get::<_, i64>(0)
                    })
                    .map_err(sqlite_err)?;
                    sqlquery::execute(&conn, &kind, &p).map_err(sqlite_err)?
                }
            };
            times.push(exec.elapsed);
            result_rows += exec.rows;
        }
        out.push(QueryRun {
            fs: fs_name.to_string(),
            cache,
            query: kind.name.clone(),
            indexed: kind.indexed,
            range_rows: kind.range_rows,
            timing_us: TimingUs::of(&times),
            result_rows_mean: result_rows as f64 / repetitions.max(1) as f64,
        });
    }
    Ok(out)
}

fn hash_name(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Ratio of mean times between two file systems for each query and cache (b / a: > 1 means a is
/// faster), plus the geometric mean over the indexed and the scanning queries (paper 000's groups).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ratio {
    pub cache: Cache,
    pub query: String,
    pub fs_a: String,
    pub fs_b: String,
    /// mean(fs_b) / mean(fs_a); paper 000 writes this as "a:b = 1:ratio".
    pub ratio: f64,
}

pub fn ratios(runs: &[QueryRun], fs: &[String]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let Some(a) = fs.first() else { return out };
    for b in fs.iter().skip(1) {
        for cache in [Cache::Warm, Cache::Cold] {
            let mut groups: [(f64, usize); 2] = [(0.0, 0), (0.0, 0)];
            for ra in runs.iter().filter(|r| &r.fs == a && r.cache == cache) {
                let Some(rb) = runs
                    .iter()
                    .find(|r| &r.fs == b && r.cache == cache && r.query == ra.query)
                else {
                    continue;
                };
                if ra.timing_us.mean <= 0.0 {
                    continue;
                }
                let ratio = rb.timing_us.mean / ra.timing_us.mean;
                let g = &mut groups[usize::from(!ra.indexed)];
                g.0 += ratio.ln();
                g.1 += 1;
                out.push(Ratio {
                    cache,
                    query: ra.query.clone(),
                    fs_a: a.clone(),
                    fs_b: b.clone(),
                    ratio,
                });
            }
            for (i, label) in ["indexed (geo-mean)", "full scan (geo-mean)"]
                .iter()
                .enumerate()
            {
                if groups[i].1 > 0 {
                    let ratio = (groups[i].0 / groups[i].1 as f64).exp();
                    out.push(Ratio {
                        cache,
                        query: label.to_string(),
                        fs_a: a.clone(),
                        fs_b: b.clone(),
                        ratio,
                    });
                }
            }
        }
    }
    out
}

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
    print_tables(runs, &ratio_list, sensor_runs);
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
    write_html(
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

const ROAMKV_MISSING: &str = "roamkv was not measured: this build of roamkv-lab lacks the feature `engine` \
(cargo build --release -p roamkv-lab --features engine, or the roamkv CLI built with it).";

fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.1} us")
    }
}

fn run_rows(runs: &[QueryRun]) -> Vec<Vec<String>> {
    runs.iter()
        .map(|r| {
            vec![
                r.fs.clone(),
                r.cache.name().to_string(),
                r.query.clone(),
                format!("{:.0}", r.result_rows_mean),
                fmt_us(r.timing_us.mean),
                fmt_us(r.timing_us.median),
                fmt_us(r.timing_us.p95),
                r.timing_us.repetitions.to_string(),
            ]
        })
        .collect()
}

const RUN_COLUMNS: [&str; 8] = [
    "fs", "cache", "query", "rows", "mean", "median", "p95", "reps",
];

fn print_tables(runs: &[QueryRun], ratio_list: &[Ratio], sensor_runs: &[sensor::SensorRun]) {
    let mut t = comfy_table::Table::new();
    t.set_header(RUN_COLUMNS.to_vec());
    for row in run_rows(runs) {
        t.add_row(row);
    }
    println!("{t}");
    if !ratio_list.is_empty() {
        let mut t = comfy_table::Table::new();
        t.set_header(vec!["cache", "query", "a:b", "ratio (1:x)"]);
        for r in ratio_list {
            t.add_row(vec![
                r.cache.name().to_string(),
                r.query.clone(),
                format!("{}:{}", r.fs_a, r.fs_b),
                format!("1:{:.3}", r.ratio),
            ]);
        }
        println!("{t}");
    }
    if !sensor_runs.is_empty() {
        let mut t = comfy_table::Table::new();
        t.set_header(sensor::RUN_COLUMNS.to_vec());
        for row in sensor::run_rows(sensor_runs) {
            t.add_row(row);
        }
        println!("{t}");
    }
    if !sensor_runs.is_empty() && !roamkv_store::AVAILABLE {
        println!("{ROAMKV_MISSING}");
    }
}

fn write_html(
    path: &Path,
    header: &roamkv_testbed::report::MachineHeader,
    command: &str,
    config: &QueriesConfig,
    runs: &[QueryRun],
    ratio_list: &[Ratio],
    sensor_runs: &[sensor::SensorRun],
) -> Result<(), LabError> {
    use roamkv_testbed::report::{Html, bar_chart_svg};
    let mut html = Html::new(
        "roamkv lab queries — SQLite search queries per file system (paper 000)",
        header,
    );
    html.paragraph(&format!(
        "Command: {command}. Tables: items (10 fields, {} B declared) and owners (8 fields, {} B), {} rows each, \
         non-key duplicates {:.0} % (paper 000: at most 20 %). Warm: one connection, one untimed run first, {} \
         repetitions. Cold: caches dropped and SQLite reopened before each of {} repetitions.",
        schema::ITEMS.record_bytes(),
        schema::OWNERS.record_bytes(),
        config.rows,
        config.duplicate_fraction * 100.0,
        config.warm_repetitions,
        config.cold_repetitions
    ));
    cache_charts(&mut html, config, runs);
    html.heading("All measurements");
    html.table(&RUN_COLUMNS, &run_rows(runs));
    if !ratio_list.is_empty() {
        html.heading(
            "Ratios between file systems (paper 000: indexed XFS:FAT = 1:1.04, full scan 1.004:1)",
        );
        let rows: Vec<Vec<String>> = ratio_list
            .iter()
            .map(|r| {
                vec![
                    r.cache.name().to_string(),
                    r.query.clone(),
                    format!("{}:{}", r.fs_a, r.fs_b),
                    format!("1:{:.3}", r.ratio),
                ]
            })
            .collect();
        html.table(&["cache", "query", "a:b", "ratio"], &rows);
    }
    if !sensor_runs.is_empty() {
        html.heading("Sensor data: the same questions asked of roamkv and SQLite");
        html.paragraph(sensor::DESCRIPTION);
        if !roamkv_store::AVAILABLE {
            html.paragraph(ROAMKV_MISSING);
        }
        html.table(&sensor::RUN_COLUMNS, &sensor::run_rows(sensor_runs));
        let (cats, series) = sensor::chart_series(sensor_runs);
        html.svg(&bar_chart_svg(
            "Sensor queries (warm), median",
            "us (median)",
            &cats,
            &series,
        ));
    }
    html.write(path)
}

/// One chart per cache state: mean time per query, one bar per file system.
fn cache_charts(
    html: &mut roamkv_testbed::report::Html,
    config: &QueriesConfig,
    runs: &[QueryRun],
) {
    use roamkv_testbed::report::bar_chart_svg;
    let fs_names: Vec<String> = config.fs.iter().map(|f| f.name().to_string()).collect();
    for &cache in &config.caches {
        let queries: Vec<String> = runs
            .iter()
            .filter(|r| r.cache == cache && r.fs == fs_names[0])
            .map(|r| r.query.clone())
            .collect();
        let series: Vec<(String, Vec<f64>)> = fs_names
            .iter()
            .map(|fs| {
                let v = queries
                    .iter()
                    .map(|q| {
                        runs.iter()
                            .find(|r| &r.fs == fs && r.cache == cache && &r.query == q)
                            .map(|r| r.timing_us.mean / 1000.0)
                            .unwrap_or(0.0)
                    })
                    .collect();
                (fs.clone(), v)
            })
            .collect();
        html.heading(&format!("{} cache: mean time per query (ms)", cache.name()));
        html.svg(&bar_chart_svg(
            &format!("SQLite queries, {} cache", cache.name()),
            "ms (mean)",
            &queries,
            &series,
        ));
    }
}
