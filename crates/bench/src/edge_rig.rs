//! The rig of the benches that drive a running server (`backup`, `export`): `roamkv serve` as a
//! child on its own ext4 (a loop device), closed-loop writers posting native batches, and the
//! per-second series of what they got acknowledged.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use roamkv_testbed::fixture::{Fixture, FsSpec};

use crate::error::{BenchError, Result};
use crate::serve::load::HttpClient;

/// A `roamkv serve` child on its own file system (a loop device's ext4).
pub struct Edge {
    child: Child,
    pub addr: std::net::SocketAddr,
    /// None once `stop` handed it back.
    fixture: Option<Fixture>,
}

impl Drop for Edge {
    fn drop(&mut self) {
        if self.fixture.is_some() {
            self.terminate();
        }
    }
}

pub fn roamkv_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))
}

impl Edge {
    /// A new 16 GiB ext4 and the server on it.
    pub fn start(management_time_ms: u64, log_budget_mib: u64, out: &Path) -> Result<Edge> {
        let fixture = Fixture::create(FsSpec::Ext4, 16 << 30)?;
        Edge::start_on(fixture, management_time_ms, log_budget_mib, out)
    }

    /// The server on `fixture`'s `data` directory (made by an earlier one, or new).
    pub fn start_on(
        fixture: Fixture,
        management_time_ms: u64,
        log_budget_mib: u64,
        out: &Path,
    ) -> Result<Edge> {
        Edge::start_on_with(fixture, management_time_ms, log_budget_mib, out, &[])
    }

    /// `start_on`, with settings of the server's given as its environment (`ROAMKV_...`).
    pub fn start_on_with(
        fixture: Fixture,
        management_time_ms: u64,
        log_budget_mib: u64,
        out: &Path,
        settings: &[(&str, &str)],
    ) -> Result<Edge> {
        let mut child = Command::new(roamkv_exe()?)
            .envs(settings.iter().copied())
            // Readings at ts 0, 1, ... (1970): the default retention would delete them.
            .env("ROAMKV_RETENTION_DEFAULT_H", "0")
            .args(["serve", "--listen", "127.0.0.1:0", "--management-time-ms"])
            .arg(management_time_ms.to_string())
            .arg("--log-budget-mib")
            .arg(log_budget_mib.to_string())
            .arg("--data")
            .arg(fixture.mount_dir().join("data"))
            // Warnings only; more with RUST_LOG=info.
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
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
        // Its log (a backup stopped, and why) goes to OUT/serve.log.
        let log_path = out.join("serve.log");
        let mut log = std::fs::File::create(&log_path)
            .map_err(|e| BenchError::io("creating", &log_path, e))?;
        std::thread::spawn(move || {
            for line in lines.map_while(std::result::Result::ok) {
                let _ = writeln!(log, "{line}");
            }
        });
        Ok(Edge {
            child,
            addr,
            fixture: Some(fixture),
        })
    }

    pub fn fixture(&self) -> &Fixture {
        self.fixture.as_ref().expect("held until stop")
    }

    /// The server's pid (its memory is read from /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server (SIGTERM, waits) and hands its file system back.
    pub fn stop(mut self) -> Fixture {
        self.terminate();
        self.fixture.take().expect("held until stop")
    }

    fn terminate(&mut self) {
        // SAFETY: kill(2) on our own child's pid, not yet reaped (`fixture` is Some until then).
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// What closed-loop writers send: how many, readings per batch, bytes per value.
#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    pub clients: usize,
    pub batch_readings: usize,
    pub value_bytes: usize,
}

/// Closed-loop writers: each posts batches of its own devices until stopped; `acked` counts
/// acknowledged readings.
pub struct Load {
    stop: Arc<AtomicBool>,
    pub acked: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

impl Load {
    /// `depart`: a client's device departs when the client moves on to its next one (every
    /// 100,000 readings), as a gateway's devices come and go: the data stays bounded however
    /// long the run.
    pub fn start(addr: std::net::SocketAddr, args: &LoadSpec, first_ts: i64, depart: bool) -> Load {
        let (stop, acked) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let threads = (0..args.clients)
            .map(|c| {
                let (stop, acked) = (Arc::clone(&stop), Arc::clone(&acked));
                let (per, value) = (args.batch_readings, "v".repeat(args.value_bytes));
                std::thread::spawn(move || {
                    let mut client = HttpClient::new(addr);
                    let mut ts = first_ts;
                    let mut current: Option<String> = None;
                    while !stop.load(Ordering::Relaxed) {
                        let device = format!("car-{c}-{}", ts / 100_000);
                        if depart && current.as_ref().is_some_and(|d| *d != device) {
                            let gone = format!("/api/roamkv/v1/devices/{}", current.take().unwrap_or_default());
                            client.request("DELETE", &gone, "application/json", b"")?;
                        }
                        current = Some(device.clone());
                        let body: String = (0..per)
                            .map(|i| format!("{{\"device\":\"{device}\",\"sensor\":\"s{}\",\"ts_ns\":{},\"value\":\"{value}\"}}\n", i % 8, ts + i as i64))
                            .collect();
                        ts += per as i64;
                        let answer = client.request("POST", "/api/roamkv/v1/readings", "application/json", body.as_bytes())?;
                        if answer.status != 201 {
                            return Err(BenchError::HttpStatus {
                                request: format!("writing {device}"),
                                status: answer.status,
                                body: String::from_utf8_lossy(&answer.body).into_owned(),
                            });
                        }
                        acked.fetch_add(per as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        Load {
            stop,
            acked,
            threads,
        }
    }

    /// Whether every writer has ended (an error ends one).
    pub fn ended(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    pub fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join()
                .map_err(|_| BenchError::Run("a writer panicked".into()))??;
        }
        Ok(())
    }
}

/// Readings/s acknowledged in each whole second, for `seconds` and for as long as `busy`
/// (running beside the load) is not done.
pub fn sample(
    load: &Load,
    seconds: u64,
    busy: Option<&std::thread::JoinHandle<Result<()>>>,
) -> Vec<u64> {
    let started = Instant::now();
    let mut series = Vec::new();
    let mut last = load.acked.load(Ordering::Relaxed);
    let mut next = Duration::from_secs(1);
    while next <= Duration::from_secs(seconds) || busy.is_some_and(|b| !b.is_finished()) {
        std::thread::sleep(next.saturating_sub(started.elapsed()));
        let now = load.acked.load(Ordering::Relaxed);
        series.push(now - last);
        last = now;
        next += Duration::from_secs(1);
    }
    series
}

/// The chart of `sample`'s series: readings acknowledged each second alone, and during what the
/// bench runs beside the load (`during_label`).
pub fn acknowledged_chart(alone: &[u64], during: &[u64], during_label: &str) -> String {
    let points = |s: &[u64]| -> Vec<(f64, f64)> {
        s.iter()
            .enumerate()
            .map(|(i, v)| (i as f64 + 1.0, *v as f64))
            .collect()
    };
    roamkv_testbed::report::line_chart_svg(
        "Readings acknowledged per second",
        "s",
        "readings/s",
        &[
            ("ingest alone".to_string(), points(alone)),
            (during_label.to_string(), points(during)),
        ],
    )
}
