//! `roamkv bench handoff`: two real `roamkv serve` processes on loopback, each on its own fresh
//! ext4 on a loop device, and devices handed from A to B (docs/SERVER.md, "Handoff"):
//!
//! - **latency**: a device of `--readings` readings of `--value-bytes` (still in the upper tier:
//!   written just before) handed over, `--rounds` times; from the request to A's record `done`:
//!   p50, p99, max;
//! - **bulk**: one device of `--bulk-mib` MiB (part of it moved to the lower tier first) handed
//!   over: MB/s of readings moved, and what A's block device wrote meanwhile (a handoff writes at
//!   A only its record files and one DEPART) as a share of the bytes moved.
//!
//! Every handoff is checked: B holds each reading A held, once, and A none. What bounds the rate
//! (CPU of the two servers, fsync at B) is reported with the servers' CPU seconds.

use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, FsSpec};
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg};

use crate::error::{BenchError, Result};
use crate::serve::load::HttpClient;
use roamkv_testbed::command::process_cpu_seconds;

#[derive(Args, Debug)]
pub struct HandoffBenchArgs {
    #[arg(long, default_value = "out/bench-handoff")]
    pub out: PathBuf,
    /// Handoffs of the latency phase.
    #[arg(long, default_value_t = 30)]
    pub rounds: usize,
    /// Readings of each latency-phase device.
    #[arg(long, default_value_t = 6_000)]
    pub readings: usize,
    #[arg(long, default_value_t = 1_000)]
    pub value_bytes: usize,
    /// Size of the bulk phase's device, in MiB of values.
    #[arg(long, default_value_t = 512)]
    pub bulk_mib: u64,
    /// Seconds, not minutes.
    #[arg(long)]
    pub quick: bool,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct HandoffResults {
    pub latency_ms: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub bulk_readings: u64,
    pub bulk_bytes: u64,
    pub bulk_seconds: f64,
    pub bulk_mb_per_sec: f64,
    /// Bytes A's block device wrote during the bulk handoff, and as a share of the bytes moved.
    pub bulk_sender_device_bytes: u64,
    pub bulk_sender_write_share: f64,
    /// CPU seconds of A and B during the bulk handoff.
    pub bulk_sender_cpu_s: f64,
    pub bulk_receiver_cpu_s: f64,
}

/// A server on its own file system.
struct Edge {
    child: Child,
    addr: std::net::SocketAddr,
    fixture: Fixture,
}

impl Drop for Edge {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

impl Edge {
    fn start() -> Result<Edge> {
        let fixture = Fixture::create(FsSpec::Ext4, 8 << 30)?;
        let exe =
            std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
        let mut child = Command::new(exe)
            // Readings at ts 0, 1, ... (1970): the default retention would delete them.
            .env("ROAMKV_RETENTION_DEFAULT_H", "0")
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(fixture.mount_dir().join("data"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::os("starting roamkv serve", e))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                return Err(BenchError::Run(
                    "roamkv serve exited before it listened".into(),
                ));
            };
            if let Some(a) = line.split("listening on http://").nth(1) {
                break a
                    .trim()
                    .parse()
                    .map_err(|e| BenchError::Run(format!("address {a:?}: {e}")))?;
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Edge {
            child,
            addr,
            fixture,
        })
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(&format!("/proc/{}/stat", self.child.id()))
    }

    fn call(&self, method: &str, path: &str, body: &[u8]) -> Result<(u16, serde_json::Value)> {
        let answer = HttpClient::new(self.addr).request(method, path, "application/json", body)?;
        Ok((
            answer.status,
            serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null),
        ))
    }

    /// Writes `n` readings of `device` (batches of 1,000 native JSON lines).
    fn write(&self, device: &str, n: usize, value_bytes: usize) -> Result<()> {
        let value = "v".repeat(value_bytes);
        let mut client = HttpClient::new(self.addr);
        for start in (0..n).step_by(1_000) {
            let body: String = (start..(start + 1_000).min(n))
                .map(|i| {
                    format!(
                        "{{\"device\":\"{device}\",\"sensor\":\"s{}\",\"ts_ns\":{i},\"value\":\"{value}\"}}\n",
                        i % 8
                    )
                })
                .collect();
            let answer = client.request(
                "POST",
                "/api/roamkv/v1/readings",
                "application/json",
                body.as_bytes(),
            )?;
            if answer.status != 201 {
                return Err(BenchError::HttpStatus {
                    request: format!("writing {device}"),
                    status: answer.status,
                    body: String::from_utf8_lossy(&answer.body).into_owned(),
                });
            }
        }
        Ok(())
    }
}

/// Hands `device` from A to B and waits for A's record to be done; returns how long it took.
fn hand(a: &Edge, b: &Edge, device: &str) -> Result<Duration> {
    let started = Instant::now();
    let body = format!("{{\"to\":\"{}\"}}", b.url());
    let (status, record) = a.call(
        "POST",
        &format!("/api/roamkv/v1/devices/{device}/handoff"),
        body.as_bytes(),
    )?;
    if status != 202 {
        return Err(BenchError::HttpStatus {
            request: format!("handoff of {device}"),
            status,
            body: record.to_string(),
        });
    }
    let id = record["id"].as_str().unwrap_or_default().to_string();
    loop {
        let (_, h) = a.call("GET", &format!("/api/roamkv/v1/handoffs/{id}"), b"")?;
        match h["handoff"]["state"].as_str() {
            Some("done") => return Ok(started.elapsed()),
            Some("aborted") => {
                return Err(BenchError::Run(format!("handoff {id} was called off")));
            }
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(BenchError::Run(format!(
                "handoff {id} not done after 600 s: {h}"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// B's readings of `device` (a paged scan), to check a handoff.
fn readings_at(edge: &Edge, device: &str) -> Result<u64> {
    let mut total = 0;
    let mut after = String::new();
    loop {
        let (status, page) = edge.call(
            "GET",
            &format!("/api/roamkv/v1/devices/{device}/readings?limit=10000{after}"),
            b"",
        )?;
        if status != 200 {
            return Err(BenchError::Run(format!("scanning {device}: {status}")));
        }
        total += page["readings"].as_array().map_or(0, |r| r.len() as u64);
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return Ok(total),
        }
    }
}

pub fn run(args: &HandoffBenchArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv bench handoff: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &HandoffBenchArgs) -> Result<()> {
    roamkv_testbed::prerequisite::require_root()?;
    let (rounds, bulk_mib) = if args.quick {
        (args.rounds.min(5), args.bulk_mib.min(64))
    } else {
        (args.rounds, args.bulk_mib)
    };
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    let (a, b) = (Edge::start()?, Edge::start()?);
    println!(
        "roamkv bench handoff: two servers on loopback, each on its own 8 GiB ext4; {rounds} handoffs of {} readings of {} B, then one of {bulk_mib} MiB",
        args.readings, args.value_bytes
    );
    let mut results = HandoffResults::default();
    for round in 0..rounds {
        let device = format!("car-{round}");
        a.write(&device, args.readings, args.value_bytes)?;
        let took = hand(&a, &b, &device)?;
        let at_b = readings_at(&b, &device)?;
        if at_b != args.readings as u64 || readings_at(&a, &device)? != 0 {
            return Err(BenchError::Check(format!(
                "{device}: B holds {at_b} readings of {}",
                args.readings
            )));
        }
        results.latency_ms.push(took.as_secs_f64() * 1e3);
    }
    let mut sorted = results.latency_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
    results.p50_ms = at(0.5);
    results.p99_ms = at(0.99);
    results.max_ms = *sorted.last().unwrap_or(&0.0);
    println!(
        "latency: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {rounds} handoffs of {} readings",
        results.p50_ms, results.p99_ms, results.max_ms, args.readings
    );
    bulk(&a, &b, args, bulk_mib, &mut results)?;
    report(args, &header, &results)
}

/// One large device handed over: its rate, and what A wrote meanwhile.
fn bulk(
    a: &Edge,
    b: &Edge,
    args: &HandoffBenchArgs,
    mib: u64,
    r: &mut HandoffResults,
) -> Result<()> {
    let readings = (mib << 20) as usize / args.value_bytes;
    a.write("truck", readings, args.value_bytes)?;
    a.fixture.quiesce()?;
    let before = DevStat::read(a.fixture.device_name())?;
    let (cpu_a, cpu_b) = (a.cpu_seconds(), b.cpu_seconds());
    let took = hand(a, b, "truck")?;
    a.fixture.quiesce()?;
    let after = DevStat::read(a.fixture.device_name())?;
    let at_b = readings_at(b, "truck")?;
    if at_b != readings as u64 {
        return Err(BenchError::Check(format!(
            "truck: B holds {at_b} readings of {readings}"
        )));
    }
    r.bulk_readings = readings as u64;
    r.bulk_bytes = (readings * (args.value_bytes + 16)) as u64;
    r.bulk_seconds = took.as_secs_f64();
    r.bulk_mb_per_sec = r.bulk_bytes as f64 / 1e6 / r.bulk_seconds.max(1e-9);
    r.bulk_sender_device_bytes = after.delta(&before).bytes_written();
    r.bulk_sender_write_share = r.bulk_sender_device_bytes as f64 / r.bulk_bytes.max(1) as f64;
    r.bulk_sender_cpu_s = a.cpu_seconds() - cpu_a;
    r.bulk_receiver_cpu_s = b.cpu_seconds() - cpu_b;
    println!(
        "bulk: {} readings ({:.0} MB) in {:.1} s: {:.1} MB/s; A's device wrote {} bytes ({:.3} % of the bytes moved); CPU A {:.1} s, B {:.1} s",
        r.bulk_readings,
        r.bulk_bytes as f64 / 1e6,
        r.bulk_seconds,
        r.bulk_mb_per_sec,
        r.bulk_sender_device_bytes,
        r.bulk_sender_write_share * 100.0,
        r.bulk_sender_cpu_s,
        r.bulk_receiver_cpu_s
    );
    Ok(())
}

fn report(args: &HandoffBenchArgs, header: &MachineHeader, r: &HandoffResults) -> Result<()> {
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "readings": args.readings,
        "value_bytes": args.value_bytes,
        "results": r,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    let mut html = Html::new("roamkv bench handoff: devices from edge to edge", header);
    html.paragraph(&format!(
        "{} handoffs of {} readings: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms. One of {:.0} MB: {:.1} MB/s; A's device wrote {:.3} % of the bytes moved.",
        r.latency_ms.len(), args.readings, r.p50_ms, r.p99_ms, r.max_ms,
        r.bulk_bytes as f64 / 1e6, r.bulk_mb_per_sec, r.bulk_sender_write_share * 100.0
    ));
    let categories: Vec<String> = (0..r.latency_ms.len()).map(|i| format!("#{i}")).collect();
    html.svg(&bar_chart_svg(
        "Handoff time of each device (ms)",
        "ms",
        &categories,
        &[("handoff".to_string(), r.latency_ms.clone())],
    ));
    html.write(&args.out.join("report.html"))?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}
