//! `roamkv export` (docs/SERVER.md, "Export"): readings to a Parquet, Arrow IPC, CSV or JSON
//! lines file, from a running server (`--server`, `GET /api/roamkv/v1/export`, streamed) or
//! from a data directory no server runs on (`--data`, `roamkv_export` here). Either way memory
//! stays bounded whatever the range.
//!
//! The file is written beside its name and renamed into place once whole: an export that
//! fails or is cut leaves nothing that looks like one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use roamkv_export::limits::OUTPUT_BUFFER_BYTES;
use roamkv_export::{Export, Format, Request, Selection};
use roamkv_wire::time_arg;

use crate::reads::SourceArgs;

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// A device to export (give it again for more; none: every device here).
    #[arg(long = "device", value_name = "NAME")]
    pub devices: Vec<String>,
    /// Only this sensor of each device.
    #[arg(long)]
    pub sensor: Option<String>,
    /// First time (inclusive): RFC 3339 (with any fraction), relative (-1h), or epoch
    /// milliseconds.
    #[arg(long, allow_hyphen_values = true, value_parser = time_arg::parse_time)]
    pub start: Option<i64>,
    /// End time (exclusive), in the same forms.
    #[arg(long, allow_hyphen_values = true, value_parser = time_arg::parse_time)]
    pub end: Option<i64>,
    /// parquet, arrow (an Arrow IPC stream), csv or jsonl (default: by the file's extension,
    /// .parquet, .arrows, .csv or .jsonl; else parquet).
    #[arg(long, value_parser = parse_format)]
    pub format: Option<Format>,
    /// The file to write (`-`: standard output). Never overwritten: it must not exist.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

fn parse_format(name: &str) -> Result<Format, String> {
    Format::parse(name).map_err(|e| e.to_string())
}

/// The format a file's extension names, if one does.
fn format_of(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?;
    Format::ALL
        .into_iter()
        .find(|f| f.extension() == ext || (ext == "arrow" && *f == Format::Arrow))
}

pub fn run(args: &ExportArgs) -> Result<(), String> {
    let stdout = args.out.as_os_str() == "-";
    if !stdout && args.out.exists() {
        return Err(format!(
            "{} exists: an export never overwrites a file",
            args.out.display()
        ));
    }
    let format = args
        .format
        .or_else(|| format_of(&args.out))
        .unwrap_or(Format::Parquet);
    let request = Request {
        selection: if args.devices.is_empty() {
            Selection::All
        } else {
            Selection::Devices(args.devices.clone())
        },
        sensor: args.sensor.clone(),
        from_ns: args.start.unwrap_or(i64::MIN),
        to_ns: args.end.unwrap_or(i64::MAX),
        format,
    };
    let started = Instant::now();
    let source = args.source.open(crate::reads::Access::Read)?;
    let written = if stdout {
        let out = std::io::BufWriter::with_capacity(OUTPUT_BUFFER_BYTES, std::io::stdout());
        export(&source, request, out)?.0
    } else {
        let tmp = tmp_path(&args.out);
        let file =
            std::fs::File::create(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        let out = std::io::BufWriter::with_capacity(OUTPUT_BUFFER_BYTES, file);
        let written = export(&source, request, out).and_then(|(what, file)| {
            file.sync_all()
                .map_err(|e| format!("syncing {}: {e}", tmp.display()))?;
            Ok((what, file))
        });
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        let (what, _file) = written?;
        std::fs::rename(&tmp, &args.out)
            .map_err(|e| format!("renaming {} into place: {e}", tmp.display()))?;
        what
    };
    eprintln!(
        "roamkv: exported {} to {} as {} in {:.1} s",
        written,
        if stdout {
            "standard output".to_string()
        } else {
            args.out.display().to_string()
        },
        format.name(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn tmp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    out.with_file_name(name)
}

/// Writes the export into `out`; returns what was written (for the summary line) and the
/// output's inner writer, flushed.
fn export<W: Write + Send>(
    source: &crate::reads::Source,
    request: Request,
    mut out: std::io::BufWriter<W>,
) -> Result<(String, W), String> {
    let what = match source {
        crate::reads::Source::Local(engine) => {
            let plan = Export::plan(engine, request).map_err(|e| e.to_string())?;
            let (summary, written) = plan.write(engine, out).map_err(|e| e.to_string())?;
            out = written;
            format!(
                "{} readings of {} devices{}",
                summary.readings,
                summary.devices,
                if summary.exact {
                    ""
                } else {
                    " (not exact: see docs/SERVER.md, \"Export\")"
                }
            )
        }
        crate::reads::Source::Remote(remote) => {
            let mut answer = remote.get_streaming("/export", &query(&request))?;
            let bytes = answer
                .copy_to(&mut out)
                .map_err(|e| format!("the export was cut: {e} (the server's log says why)"))?;
            format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
        }
    };
    out.into_inner()
        .map(|inner| (what, inner))
        .map_err(|e| format!("writing the export: {}", e.error()))
}

/// The export route's query for a request.
fn query(request: &Request) -> Vec<(&'static str, String)> {
    let mut query = vec![
        ("start_ns", request.from_ns.to_string()),
        ("end_ns", request.to_ns.to_string()),
        ("format", request.format.name().to_string()),
    ];
    if let Selection::Devices(names) = &request.selection {
        query.extend(names.iter().map(|n| ("device", n.clone())));
    }
    if let Some(sensor) = &request.sensor {
        query.push(("sensor", sensor.clone()));
    }
    query
}
