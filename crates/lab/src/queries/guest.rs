//! `roamkv lab queries --vm`: paper 000's query types on the file systems this kernel lacks (FAT,
//! exFAT, F2FS), run inside the qemu guest of the `--vm` route (see `vm`), with ext4 in the same
//! guest as the control. This gives paper 000's table its FAT column.
//!
//! The guest's /init formats one disk per file system and runs this binary with the words the
//! host passes as its command prefix, then `guest-fs --fs-name NAME --mount DIR ... --json FILE`.
//! The host passes `lab guest-queries <options> --`, so the guest runs `guest-queries`, which
//! reads the file-system name, mount point and result file from those trailing words.
use crate::LabError;
use crate::queries::{
    Cache, QueriesArgs, QueriesConfig, QueryRun, QuerySet, generate_tables, load_database,
    run_query_set,
};
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, write_json};
use std::process::ExitCode;

/// `lab queries` with the guest route added.
#[derive(clap::Args, Debug)]
pub struct QueriesCommand {
    #[command(flatten)]
    pub args: QueriesArgs,
    /// Run in a qemu guest with Debian's stock kernel (for vfat, exfat, f2fs; ext4 in the same
    /// guest is the control). --fs then names guest file systems (default: ext4,vfat,exfat,f2fs).
    #[arg(long)]
    pub vm: bool,
    /// Guest memory for --vm.
    #[arg(long, default_value_t = 1024)]
    pub vm_memory_mib: u32,
}

/// Inside the guest (hidden): one file system, already mounted.
#[derive(clap::Args, Debug)]
pub struct GuestQueriesArgs {
    #[arg(long)]
    pub rows: usize,
    #[arg(long)]
    pub repetitions: usize,
    #[arg(long)]
    pub cold_repetitions: usize,
    #[arg(long)]
    pub seed: u64,
    /// The words the guest's /init appends: guest-fs --fs-name N --mount DIR --device D --json F.
    #[arg(last = true)]
    pub init_words: Vec<String>,
}

/// Guest file systems measured by default (nilfs2 is left out: without its cleaner it fills up).
const GUEST_DEFAULT_FS: &str = "ext4,vfat,exfat,f2fs";
/// The guest is 8-9x slower than the host (software emulation): smaller tables by default.
const GUEST_ROWS_QUICK: usize = 10_000;
const GUEST_ROWS_FULL: usize = 100_000;

pub fn run_queries(command: &QueriesCommand) -> ExitCode {
    if !command.vm {
        return crate::queries::run(&command.args);
    }
    match run_in_guest(command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab queries --vm: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_in_guest(command: &QueriesCommand) -> Result<ExitCode, LabError> {
    let args = &command.args;
    let names = crate::vm::parse_guest_fs_list(args.fs.as_deref().unwrap_or(GUEST_DEFAULT_FS))?;
    roamkv_testbed::prerequisite::require_root()?;
    let rows = args.rows.unwrap_or(if args.quick {
        GUEST_ROWS_QUICK
    } else {
        GUEST_ROWS_FULL
    });
    let repetitions = args.repetitions.unwrap_or(if args.quick { 5 } else { 20 });
    let cold = args
        .cold_repetitions
        .unwrap_or(if args.quick { 2 } else { repetitions });
    if rows < 100 || repetitions == 0 || cold == 0 {
        return Err(LabError::Unsupported(
            "need at least 100 rows and 1 repetition".into(),
        ));
    }
    let mut prefix = crate::vm::command_prefix("queries");
    prefix.extend([
        "guest-queries".to_string(),
        "--rows".into(),
        rows.to_string(),
        "--repetitions".into(),
        repetitions.to_string(),
        "--cold-repetitions".into(),
        cold.to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--".into(),
    ]);
    let guest = crate::vm::run_guest(
        &prefix,
        &names,
        &crate::vm::plain_options(command.vm_memory_mib),
    )?;
    let mut runs: Vec<QueryRun> = Vec::new();
    let mut errors = Vec::new();
    for fs in &guest.file_systems {
        if let Some(e) = &fs.error {
            errors.push(format!("{}: {e}", fs.fs));
        }
        for m in &fs.measurements {
            match query_run_from_json(m) {
                Some(run) => runs.push(run),
                None => errors.push(format!("{}: unreadable measurement {m}", fs.fs)),
            }
        }
    }
    render(command, &guest.kernel, rows, &names, &runs, &errors)?;
    // Every file system must report every query type in every cache state.
    let kinds = crate::queries::sqlquery::query_kinds(rows).len();
    let complete = names.iter().all(|fs| {
        runs.iter()
            .filter(|r| r.fs == format!("{fs} (guest)"))
            .count()
            == kinds * 2
    });
    Ok(if errors.is_empty() && complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn query_run_from_json(value: &serde_json::Value) -> Option<QueryRun> {
    let text = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let timing = value.get("timing_us")?;
    Some(QueryRun {
        fs: format!("{} (guest)", text("fs")?),
        cache: match text("cache")?.as_str() {
            "warm" => Cache::Warm,
            "cold" => Cache::Cold,
            _ => return None,
        },
        query: text("query")?,
        indexed: value.get("indexed")?.as_bool()?,
        range_rows: value
            .get("range_rows")
            .and_then(|v| v.as_u64())
            .map(|v| v as usize),
        timing_us: {
            let f = |k: &str| timing.get(k).and_then(serde_json::Value::as_f64);
            crate::queries::sqlquery::TimingUs {
                repetitions: timing.get("repetitions")?.as_u64()? as usize,
                mean: f("mean")?,
                median: f("median")?,
                p95: f("p95")?,
                min: f("min")?,
                max: f("max")?,
            }
        },
        result_rows_mean: value.get("result_rows_mean")?.as_f64()?,
    })
}

fn render(
    command: &QueriesCommand,
    kernel: &str,
    rows: usize,
    names: &[&str],
    runs: &[QueryRun],
    errors: &[String],
) -> Result<(), LabError> {
    let table_rows: Vec<Vec<String>> = runs.iter().map(run_row).collect();
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&RUN_COLUMNS, &table_rows)
    );
    for e in errors {
        eprintln!("guest: {e}");
    }
    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "guest_kernel": kernel, "rows": rows, "file_systems": names,
        "runs": runs, "errors": errors,
    });
    let out = &command.args.out;
    let json_path = write_json(out, "results-vm", &json)?;
    let mut html = Html::new(
        &format!(
            "roamkv lab queries --vm (guest kernel {kernel}, software emulation: compare guest rows with each other only)"
        ),
        &header,
    );
    html.paragraph(&format!(
        "Paper 000's query types on {rows}-row tables inside a qemu guest; ext4 in the same guest \
         is the control. Errors: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("; ")
        }
    ));
    let fs_labels: Vec<String> = names.iter().map(|n| format!("{n} (guest)")).collect();
    for cache in [Cache::Warm, Cache::Cold] {
        html.svg(&cache_chart(runs, &fs_labels, cache));
    }
    html.table(&RUN_COLUMNS, &table_rows);
    let html_path = out.join("report-vm.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

/// The columns of the table of runs, one `run_row` each.
const RUN_COLUMNS: [&str; 6] = ["fs", "cache", "query", "mean us", "median us", "rows"];

fn run_row(r: &QueryRun) -> Vec<String> {
    vec![
        r.fs.clone(),
        r.cache.name().to_string(),
        r.query.clone(),
        format!("{:.0}", r.timing_us.mean),
        format!("{:.0}", r.timing_us.median),
        format!("{:.0}", r.result_rows_mean),
    ]
}

/// Mean query time of each query type on each file system, with a warm or a cold cache.
fn cache_chart(runs: &[QueryRun], fs_labels: &[String], cache: Cache) -> String {
    let mut queries: Vec<String> = Vec::new();
    for r in runs.iter().filter(|r| r.cache == cache) {
        if !queries.contains(&r.query) {
            queries.push(r.query.clone());
        }
    }
    let series: Vec<(String, Vec<f64>)> = fs_labels
        .iter()
        .map(|fs| {
            let values = queries
                .iter()
                .map(|q| {
                    runs.iter()
                        .find(|r| &r.fs == fs && r.cache == cache && &r.query == q)
                        .map_or(f64::NAN, |r| r.timing_us.mean)
                })
                .collect();
            (fs.clone(), values)
        })
        .collect();
    bar_chart_svg(
        &format!("{} cache: mean query time", cache.name()),
        "microseconds",
        &queries,
        &series,
    )
}

/// In the guest: generate the tables, load them on the mounted file system, run every query
/// type warm and cold, write the runs as a JSON array where /init collects them.
pub fn run_guest_queries(args: &GuestQueriesArgs) -> ExitCode {
    match guest_queries(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("guest-queries: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn guest_queries(args: &GuestQueriesArgs) -> Result<(), LabError> {
    let init = crate::vm::InitWords::parse(&args.init_words)?;
    let (fs_name, mount) = (init.fs_name.clone(), init.mount.clone());
    let config = QueriesConfig {
        fs: Vec::new(),
        rows: args.rows,
        owner_rows: args.rows,
        warm_repetitions: args.repetitions,
        cold_repetitions: args.cold_repetitions,
        caches: vec![Cache::Warm, Cache::Cold],
        duplicate_fraction: crate::queries::schema::DUPLICATE_FRACTION_DEFAULT,
        seed: args.seed,
        sensor: None,
    };
    eprintln!("guest: {fs_name}: generating {} rows", args.rows);
    let tables =
        generate_tables(&config).map_err(|e| LabError::Unsupported(format!("tables: {e}")))?;
    let db = load_database(&mount, &tables)?;
    let mut runs = Vec::new();
    for (cache, repetitions) in [
        (Cache::Warm, args.repetitions),
        (Cache::Cold, args.cold_repetitions),
    ] {
        let set = QuerySet {
            db: &db,
            fs_name: &fs_name,
            cache,
            repetitions,
            rows: args.rows,
            seed: args.seed,
        };
        runs.extend(run_query_set(
            &set,
            &roamkv_testbed::fixture::drop_caches,
            &|what| eprintln!("guest: {what}"),
        )?);
    }
    init.write_results(&runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_run_survives_the_trip_through_json() {
        let json = serde_json::json!({
            "fs": "vfat", "cache": "cold", "query": "point", "indexed": true, "range_rows": null,
            "timing_us": {"repetitions": 3, "mean": 10.0, "median": 9.0, "p95": 12.0, "min": 8.0, "max": 20.0},
            "result_rows_mean": 1.0
        });
        let parsed = query_run_from_json(&json).expect("complete run");
        assert_eq!(parsed.fs, "vfat (guest)");
        assert_eq!(parsed.cache, Cache::Cold);
        assert_eq!(parsed.timing_us.repetitions, 3);
        assert!((parsed.timing_us.median - 9.0).abs() < 1e-12);
        // What the guest writes is what the host reads.
        let back = serde_json::to_value(&parsed).expect("json");
        assert_eq!(back.get("timing_us"), json.get("timing_us"));
        let bad = serde_json::json!({"fs": "vfat", "cache": "lukewarm"});
        assert!(query_run_from_json(&bad).is_none());
    }
}
