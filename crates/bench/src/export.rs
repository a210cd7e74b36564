//! `roamkv bench export`: what getting data out costs (docs/SERVER.md, "Export"), against the
//! ceiling of the engine's own scan.
//!
//! A real `roamkv serve` on its own ext4 (a loop device), `--readings` written first by
//! `--clients` writers (100,000 readings a device), a management time waited so that most of
//! them are in the lower tier. Then, each `--repeat` times, the median kept:
//! - **export over HTTP**: `GET /api/roamkv/v1/export` of every device as Parquet, read and
//!   thrown away by a client here; the server's resident memory sampled every 100 ms;
//! - **the ceiling**: the server stopped, the data directory opened here: the engine's scan of
//!   the same view (`Engine::scan_page_in`, pages of 4,096, nothing formatted), and the same
//!   Parquet export in-process into nothing (`roamkv_export`): the export's rate as a share of
//!   the scan's;
//! - **ingest during exports**: the server again, `--clients` writers for `--seconds` alone and
//!   as long again with exports of everything back to back; the share of ingest lost. Twice:
//!   the server with exports unpaced (`--export-rate-mib 0`), then at its default pace while
//!   ingest runs (docs/SERVER.md, "Export");
//! - **Python** (with `--python PY`, a Python with the package, pandas and pyarrow):
//!   `Client.scan` of ten devices (1 M readings) into pandas against the native scan's JSON
//!   pages into pandas (python/bench/scan_vs_json.py).
//!
//! Every phase runs with the page cache warm (the data fits in memory): rates are the CPU's.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use roamkv_engine::{Engine, Options, ScanCursor};
use roamkv_export::{Export, Format, Request, Selection};
use roamkv_testbed::report::{Html, MachineHeader, line_chart_svg, terminal_table};

use crate::edge_rig::{Edge, Load, LoadSpec, acknowledged_chart, sample};
use crate::error::{BenchError, Result};
use crate::serve::load::scrape_metric;

/// The engine scan's page (the ceiling): the export's largest.
const SCAN_PAGE_READINGS: usize = 4096;

#[derive(Args, Debug, Clone)]
pub struct ExportBenchArgs {
    #[arg(long, default_value = "out/bench-export")]
    pub out: PathBuf,
    /// Readings written before the measured phases.
    #[arg(long, default_value_t = 10_000_000)]
    pub readings: u64,
    /// Bytes per value (a sensor reading's text).
    #[arg(long, default_value_t = 16)]
    pub value_bytes: usize,
    /// Closed-loop writers (the fill and the ingest phases), and readings per batch.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    #[arg(long, default_value_t = 500)]
    pub batch_readings: usize,
    /// Runs of each measured export and scan; the medians are reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Seconds of each ingest phase (alone, during exports).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// The server's management time: readings leave the log for the lower tier after it.
    #[arg(long, default_value_t = 20_000)]
    pub management_time_ms: u64,
    /// The server's log budget.
    #[arg(long, default_value_t = 4096)]
    pub log_budget_mib: u64,
    /// A Python with the roamkv package, pandas and pyarrow: also times `Client.scan` of 1 M
    /// readings against the JSON pages.
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// Small sizes and short phases: a functional check of the bench, not a measurement.
    #[arg(long)]
    pub quick: bool,
}

/// One timed read of every reading.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Pass {
    pub readings: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub readings_per_sec: f64,
}

impl Pass {
    fn new(readings: u64, bytes: u64, seconds: f64) -> Pass {
        Pass {
            readings,
            bytes,
            seconds,
            readings_per_sec: readings as f64 / seconds.max(1e-9),
        }
    }
}

#[derive(Debug, Default, serde::Serialize)]
pub struct ExportResults {
    pub http_exports: Vec<Pass>,
    /// The server's resident memory (MiB) every 100 ms of the first HTTP export, and its peak.
    pub http_rss_mib: Vec<(f64, f64)>,
    pub http_rss_peak_mib: f64,
    pub scans: Vec<Pass>,
    pub exports_in_process: Vec<Pass>,
    pub scan_per_sec: f64,
    pub export_in_process_per_sec: f64,
    pub http_export_per_sec: f64,
    /// The Parquet export's rate as a share of the scan's: in-process, and over HTTP.
    pub export_share_of_scan: f64,
    pub http_export_share_of_scan: f64,
    /// Ingest during exports, the server's exports unpaced, then at its default pace.
    pub unpaced: DuringExports,
    pub paced: DuringExports,
    /// python/bench/scan_vs_json.py's line, if it ran.
    pub python: Option<serde_json::Value>,
    pub python_speedup: Option<f64>,
}

/// Ingest alone, then during back-to-back exports, on one server.
#[derive(Debug, Default, serde::Serialize)]
pub struct DuringExports {
    /// Readings acknowledged each second: alone, then during the exports.
    pub alone: Vec<u64>,
    pub during: Vec<u64>,
    pub exports: usize,
    /// The server's pace for exports while ingest runs (`--export-rate-mib`, 0: none), and
    /// the seconds the exports waited to keep to it (its /metrics).
    pub export_rate_limit_mib: Option<f64>,
    pub exports_paced_s: Option<f64>,
    pub alone_per_sec: f64,
    pub during_per_sec: f64,
    /// The share of ingest lost while exports ran (1 - during / alone).
    pub cost: f64,
}

pub fn run(args: &ExportBenchArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv bench export: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The median of what `values` yields (`roamkv_testbed::stats::median`: NaN for none).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    roamkv_testbed::stats::median(&mut values.collect::<Vec<f64>>())
}

fn quick(args: &ExportBenchArgs) -> ExportBenchArgs {
    let mut args = args.clone();
    if args.quick {
        args.readings = args.readings.min(400_000);
        args.seconds = args.seconds.min(6);
        args.repeat = args.repeat.min(2);
        args.management_time_ms = args.management_time_ms.min(4_000);
    }
    args
}

fn load_spec(args: &ExportBenchArgs) -> LoadSpec {
    LoadSpec {
        clients: args.clients,
        batch_readings: args.batch_readings,
        value_bytes: args.value_bytes,
    }
}

fn bench(args: &ExportBenchArgs) -> Result<()> {
    roamkv_testbed::prerequisite::require_root()?;
    let args = &quick(args);
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    println!(
        "roamkv bench export: roamkv serve on an ext4 of its own; {} readings of {} bytes first, then {} runs of each export and scan, {} s of {} writers alone and during exports",
        args.readings, args.value_bytes, args.repeat, args.seconds, args.clients
    );
    let mut r = ExportResults::default();
    let edge = Edge::start(args.management_time_ms, args.log_budget_mib, &args.out)?;
    let devices = fill(&edge, args)?;
    for run in 0..args.repeat {
        let (pass, rss) = http_export(&edge, "format=parquet")?;
        println!(
            "export over HTTP {run}: {:.0} readings/s, {:.0} MiB",
            pass.readings_per_sec,
            pass.bytes as f64 / 1_048_576.0
        );
        if run == 0 {
            r.http_rss_mib = rss;
        }
        r.http_exports.push(pass);
    }
    if let Some(python) = &args.python {
        r.python = Some(python_scan(python, &edge, &devices)?);
    }
    let fixture = edge.stop();
    ceiling(&fixture.mount_dir().join("data"), args, &mut r)?;
    let edge = Edge::start_on_with(
        fixture,
        args.management_time_ms,
        args.log_budget_mib,
        &args.out,
        &[("ROAMKV_EXPORT_RATE_MIB", "0")],
    )?;
    r.unpaced = ingest_during_exports(&edge, args, 1 << 40)?;
    let edge = Edge::start_on(
        edge.stop(),
        args.management_time_ms,
        args.log_budget_mib,
        &args.out,
    )?;
    r.paced = ingest_during_exports(&edge, args, 1 << 42)?;
    drop(edge);
    summarize(&mut r);
    report(args, &header, &r)
}

/// Writes `--readings` and waits a management time and a half: most of them are in the lower
/// tier when the exports run. Returns the devices written, by name.
fn fill(edge: &Edge, args: &ExportBenchArgs) -> Result<Vec<String>> {
    let load = Load::start(edge.addr, &load_spec(args), 0, false);
    let started = Instant::now();
    while load.acked.load(Ordering::Relaxed) < args.readings && !load.ended() {
        std::thread::sleep(Duration::from_millis(100));
    }
    load.stop()?;
    println!(
        "filled {} readings in {:.0} s; waiting a management time",
        args.readings,
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_millis(args.management_time_ms * 3 / 2));
    let answer = crate::serve::load::HttpClient::new(edge.addr).request(
        "GET",
        "/api/roamkv/v1/devices",
        "application/json",
        b"",
    )?;
    let list: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::Run(format!("the device list: {e}")))?;
    Ok(list["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["device"].as_str().map(str::to_string))
        .collect())
}

/// The server's resident memory, MiB.
fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One export of everything over HTTP, read and thrown away; the server's memory beside it.
fn http_export(edge: &Edge, query: &str) -> Result<(Pass, Vec<(f64, f64)>)> {
    let done = Arc::new(AtomicBool::new(false));
    let pid = edge.pid();
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut series = Vec::new();
            while !done.load(Ordering::Relaxed) {
                series.push((started.elapsed().as_secs_f64(), rss_mib(pid)));
                std::thread::sleep(Duration::from_millis(100));
            }
            series
        })
    };
    let started = Instant::now();
    let read = read_export(edge.addr, query);
    done.store(true, Ordering::Relaxed);
    let series = sampler
        .join()
        .map_err(|_| BenchError::Run("the memory sampler panicked".into()))?;
    let (bytes, readings) = read?;
    Ok((
        Pass::new(readings, bytes, started.elapsed().as_secs_f64()),
        series,
    ))
}

/// GET the export over a plain connection, counting its bytes; the readings it held come from
/// the server's counter (`roamkv_exported_readings_total`, before and after).
fn read_export(addr: std::net::SocketAddr, query: &str) -> Result<(u64, u64)> {
    let exported = |addr| -> Result<u64> {
        Ok(scrape_metric(addr, "roamkv_exported_readings_total")?.unwrap_or(0.0) as u64)
    };
    let before = exported(addr)?;
    let mut stream =
        std::net::TcpStream::connect(addr).map_err(|e| BenchError::os("connecting", e))?;
    write!(
        stream,
        "GET /api/roamkv/v1/export?{query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| BenchError::os("asking for the export", e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    let mut head = Vec::new();
    loop {
        let n = stream
            .read(&mut buf)
            .map_err(|e| BenchError::os("reading the export", e))?;
        if n == 0 {
            break;
        }
        if head.len() < 64 {
            head.extend_from_slice(&buf[..n.min(64)]);
        }
        bytes += n as u64;
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(BenchError::Run(format!(
            "the export answered {}",
            String::from_utf8_lossy(&head)
        )));
    }
    // The counter moves when the server's writer ends, just after the body's last byte.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut after = exported(addr)?;
    while after == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        after = exported(addr)?;
    }
    Ok((bytes, after - before))
}

/// The server stopped: the engine's scan of every device in one view, and the Parquet export
/// in-process, `--repeat` times each.
fn ceiling(data: &Path, args: &ExportBenchArgs, r: &mut ExportResults) -> Result<()> {
    let engine = Engine::open(data, Options::default())
        .map_err(|e| BenchError::Run(format!("opening {}: {e}", data.display())))?;
    let engine_err = |e: roamkv_engine::Error| BenchError::Run(e.to_string());
    for run in 0..args.repeat {
        let started = Instant::now();
        let view = engine.read_view().map_err(engine_err)?;
        let (mut readings, mut bytes) = (0u64, 0u64);
        for device in view.devices() {
            let mut after: Option<ScanCursor> = None;
            loop {
                let page = engine
                    .scan_page_in(
                        &view,
                        &device.name,
                        None,
                        i64::MIN,
                        i64::MAX,
                        after.as_ref(),
                        SCAN_PAGE_READINGS,
                    )
                    .map_err(engine_err)?;
                readings += page.readings.len() as u64;
                bytes += page
                    .readings
                    .iter()
                    .map(|r| r.value.len() as u64)
                    .sum::<u64>();
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        let scan = Pass::new(readings, bytes, started.elapsed().as_secs_f64());
        let started = Instant::now();
        let request = Request {
            selection: Selection::All,
            sensor: None,
            from_ns: i64::MIN,
            to_ns: i64::MAX,
            format: Format::Parquet,
        };
        let plan = Export::plan(&engine, request).map_err(|e| BenchError::Run(e.to_string()))?;
        let out = CountingSink::default();
        let (summary, out) = plan
            .write(&engine, std::io::BufWriter::with_capacity(1 << 20, out))
            .map_err(|e| BenchError::Run(e.to_string()))?;
        let bytes = out.into_inner().map_or(0, |c| c.0);
        let export = Pass::new(summary.readings, bytes, started.elapsed().as_secs_f64());
        println!(
            "in-process {run}: scan {:.0} readings/s, Parquet export {:.0} readings/s",
            scan.readings_per_sec, export.readings_per_sec
        );
        r.scans.push(scan);
        r.exports_in_process.push(export);
    }
    Ok(())
}

/// Bytes written into it, and nothing kept.
#[derive(Default)]
struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Ingest alone for `--seconds`, then as long again with exports of everything back to back;
/// the writers' timestamps from `first_ts`.
fn ingest_during_exports(
    edge: &Edge,
    args: &ExportBenchArgs,
    first_ts: i64,
) -> Result<DuringExports> {
    let mut r = DuringExports::default();
    let load = Load::start(edge.addr, &load_spec(args), first_ts, true);
    r.alone = sample(&load, args.seconds, None);
    load.stop()?;
    let load = Load::start(edge.addr, &load_spec(args), first_ts * 2, true);
    let (addr, seconds) = (edge.addr, args.seconds);
    let exporter = std::thread::spawn(move || -> Result<usize> {
        let started = Instant::now();
        let mut exports = 0;
        while started.elapsed() < Duration::from_secs(seconds) {
            read_export(addr, "format=parquet")?;
            exports += 1;
        }
        Ok(exports)
    });
    r.during = sample(&load, args.seconds, None);
    load.stop()?;
    r.exports = exporter
        .join()
        .map_err(|_| BenchError::Run("the exporter panicked".into()))??;
    r.export_rate_limit_mib =
        scrape_metric(edge.addr, "roamkv_export_rate_limit_bytes_per_second")?
            .map(|bytes| bytes / 1_048_576.0);
    r.exports_paced_s = scrape_metric(edge.addr, "roamkv_export_paced_seconds_total")?;
    r.alone_per_sec = median(r.alone.iter().map(|v| *v as f64));
    r.during_per_sec = median(r.during.iter().map(|v| *v as f64));
    r.cost = 1.0 - r.during_per_sec / r.alone_per_sec.max(1e-9);
    Ok(r)
}

/// python/bench/scan_vs_json.py on ten devices (1 M readings at the default fill).
fn python_scan(python: &Path, edge: &Edge, devices: &[String]) -> Result<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/bench/scan_vs_json.py");
    let output = Command::new(python)
        .arg(&script)
        .arg(format!("http://{}", edge.addr))
        .args(devices.iter().take(10))
        .output()
        .map_err(|e| BenchError::os("running python/bench/scan_vs_json.py", e))?;
    if !output.status.success() {
        return Err(BenchError::Run(format!(
            "python/bench/scan_vs_json.py: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| BenchError::Run(format!("python/bench/scan_vs_json.py's line: {e}")))
}

fn summarize(r: &mut ExportResults) {
    r.scan_per_sec = median(r.scans.iter().map(|p| p.readings_per_sec));
    r.export_in_process_per_sec = median(r.exports_in_process.iter().map(|p| p.readings_per_sec));
    r.http_export_per_sec = median(r.http_exports.iter().map(|p| p.readings_per_sec));
    r.export_share_of_scan = r.export_in_process_per_sec / r.scan_per_sec.max(1e-9);
    r.http_export_share_of_scan = r.http_export_per_sec / r.scan_per_sec.max(1e-9);
    r.http_rss_peak_mib = r.http_rss_mib.iter().map(|(_, m)| *m).fold(0.0, f64::max);
    r.python_speedup = r
        .python
        .as_ref()
        .and_then(|p| Some(p["json_seconds"].as_f64()? / p["arrow_seconds"].as_f64()?.max(1e-9)));
}

fn summary_line(r: &ExportResults) -> String {
    let python = match (&r.python, r.python_speedup) {
        (Some(p), Some(x)) => format!(
            "; Python scan of {} readings into pandas {:.2} s through Arrow, {:.2} s through JSON pages: {:.1}x",
            p["readings"],
            p["arrow_seconds"].as_f64().unwrap_or(0.0),
            p["json_seconds"].as_f64().unwrap_or(0.0),
            x
        ),
        _ => String::new(),
    };
    format!(
        "engine scan {:.0} readings/s; Parquet export in-process {:.0} ({:.0} % of the scan), over HTTP {:.0} ({:.0} %), server memory peak {:.0} MiB; ingest during back-to-back exports: {}; {}{python}",
        r.scan_per_sec,
        r.export_in_process_per_sec,
        r.export_share_of_scan * 100.0,
        r.http_export_per_sec,
        r.http_export_share_of_scan * 100.0,
        r.http_rss_peak_mib,
        during_line("unpaced", &r.unpaced),
        during_line("paced", &r.paced),
    )
}

/// "unpaced: alone N readings/s, during M exports K (cost C %)", and the pace kept.
fn during_line(name: &str, d: &DuringExports) -> String {
    let pace = match (d.export_rate_limit_mib, d.exports_paced_s) {
        (Some(mib), Some(s)) if mib > 0.0 => format!(" at {mib:.0} MiB/s, {s:.1} s of waits"),
        (Some(_), _) => " at no limit".to_string(),
        _ => String::new(),
    };
    format!(
        "{name}{pace}: alone {:.0} readings/s, during {} exports {:.0} (cost {:.1} %)",
        d.alone_per_sec,
        d.exports,
        d.during_per_sec,
        d.cost * 100.0
    )
}

fn report(args: &ExportBenchArgs, header: &MachineHeader, r: &ExportResults) -> Result<()> {
    let row = |name: &str, passes: &[Pass]| -> Vec<String> {
        let mut cells = vec![name.to_string()];
        cells.extend(passes.iter().map(|p| format!("{:.0}", p.readings_per_sec)));
        cells.push(format!(
            "{:.0}",
            median(passes.iter().map(|p| p.readings_per_sec))
        ));
        cells
    };
    let rows = vec![
        row("engine scan (ceiling)", &r.scans),
        row("Parquet export, in-process", &r.exports_in_process),
        row("Parquet export over HTTP", &r.http_exports),
    ];
    let mut columns: Vec<String> = vec!["readings/s".into()];
    columns.extend((0..r.scans.len()).map(|i| format!("run {}", i + 1)));
    columns.push("median".into());
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    println!("{}", terminal_table(&columns, &rows));
    let summary = summary_line(r);
    println!("{summary}");
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "args": format!("{args:?}"),
        "results": r,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    let mut html = Html::new(
        "roamkv bench export: data out, against the engine's scan",
        header,
    );
    html.paragraph(&summary);
    html.table(&columns, &rows);
    html.svg(&acknowledged_chart(
        &r.unpaced.alone,
        &r.unpaced.during,
        "during unpaced exports",
    ));
    html.svg(&acknowledged_chart(
        &r.paced.alone,
        &r.paced.during,
        "during paced exports",
    ));
    html.svg(&line_chart_svg(
        "The server's resident memory during an export over HTTP",
        "s",
        "MiB",
        &[("VmRSS".to_string(), r.http_rss_mib.clone())],
    ));
    html.write(&args.out.join("report.html"))?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}
