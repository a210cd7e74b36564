//! The systems `roamkv bench serve` loads, each started fresh for every run and checked after
//! it (the readings it stored are counted back and must equal the readings it acked):
//!
//! - **roamkv** — the real `roamkv serve` as a child process (this binary, `serve`), EdgeX v3
//!   AddEventRequests (JSON) on its core-data route. A process rather than in-process: that is
//!   how it runs in production, its CPU time can be read apart from the load generator's, and
//!   its allocator and threads do not share the bench's. After the run it is stopped with
//!   SIGTERM (graceful) and its data directory opened with the engine to count every reading.
//! - **roamkv-binary** — the same server, the same readings (the same stored bytes) as native
//!   binary batches: what the server costs without JSON parsing and CBOR encoding.
//! - **influxdb**, **questdb** — the peers (peers.rs), line protocol over HTTP.
//! - **engine** — the in-process engine (`Durability::Sync`) writing the same batches the
//!   server would write (keys and CBOR values), from as many threads as there are clients: the
//!   ceiling.
//! - **roamkv-bus-qos0/1**, **mosquitto-qos0/1** — the message bus (bus.rs: a broker, MQTT
//!   publishers, and roamkv or mosquitto's own subscriber); `Target` itself is in systems.rs.

use roamkv_testbed::command::process_cpu_seconds;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roamkv_engine::{Durability, Engine, Options, Record};
use roamkv_testbed::postgres::Cluster;

use crate::error::{BenchError, Result};
use crate::serve::load::{
    EventSpec, HttpClient, HttpSender, PROFILE, SOURCE, Sender, device_name, edgex_json,
    influx_lines, resource_name, scrape_metric,
};
use crate::serve::peers;
pub use crate::serve::systems::Target;

/// A system under test that is up, on a fresh data directory.
pub enum Up {
    Server(ServerProcess),
    Engine {
        engine: Arc<Engine>,
        _dir: tempfile::TempDir,
    },
}

pub struct ServerProcess {
    target: Target,
    child: Child,
    addr: SocketAddr,
    /// The cloud database of `RoamkvSink` (dropped after the server: stopped and removed).
    cloud: Option<Box<Cluster>>,
    dir: tempfile::TempDir,
}

/// Starts `target` fresh under `work_dir` for `clients` clients, at `durability` (`Sync` or
/// `None`; peers.rs says what each peer runs at).
pub fn start(
    target: Target,
    work_dir: &Path,
    clients: usize,
    durability: Durability,
) -> Result<Up> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("serve-{}-", target.name()))
        .tempdir_in(work_dir)
        .map_err(|e| BenchError::io("making a directory under", work_dir, e))?;
    match target {
        Target::Roamkv | Target::RoamkvBinary | Target::RoamkvNoIndex => {
            start_roamkv(target, dir, clients, durability, None)
        }
        Target::RoamkvSink => {
            let cloud = Cluster::create(dir.path(), dir.path(), "")
                .map_err(|e| BenchError::step("starting the sink's PostgreSQL", e))?;
            start_roamkv(target, dir, clients, durability, Some(Box::new(cloud)))
        }
        Target::Influxdb | Target::Questdb => start_peer(target, dir, durability, &[]),
        // The bus rows have a broker and publishers of their own (bus.rs).
        Target::RoamkvBusQos0
        | Target::RoamkvBusQos1
        | Target::MosquittoQos0
        | Target::MosquittoQos1 => Err(BenchError::Usage(format!(
            "{} runs through serve/bus.rs, not as a server alone",
            target.name()
        ))),
        Target::Engine => {
            let engine = Engine::open(dir.path().join("data"), engine_options(durability))
                .map_err(|e| BenchError::step("opening the engine", e))?;
            Ok(Up::Engine {
                engine: Arc::new(engine),
                _dir: dir,
            })
        }
    }
}

/// The engine as `roamkv serve` opens it by default, at `durability`.
fn engine_options(durability: Durability) -> Options {
    Options {
        durability,
        ..Options::default()
    }
}

fn start_roamkv(
    target: Target,
    dir: tempfile::TempDir,
    clients: usize,
    durability: Durability,
    cloud: Option<Box<Cluster>>,
) -> Result<Up> {
    let exe =
        std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
    let data = dir.path().join("data");
    let mut command = Command::new(&exe);
    // The load's origins are from 2023 (fixed, so that every run writes the same keys): the
    // default retention would delete them mid-run, and the counts would not match.
    command.env("ROAMKV_RETENTION_DEFAULT_H", "0");
    command
        .arg("serve")
        .arg("--data")
        .arg(&data)
        .args(["--listen", "127.0.0.1:0", "--durability"])
        .arg(match durability {
            Durability::Sync => "sync",
            _ => "none",
        })
        .args(["--concurrent-requests-max", &(clients * 2 + 8).to_string()]);
    if let Some(cloud) = &cloud {
        command.arg("--sink").arg(cloud.socket_url());
    }
    if target == Target::RoamkvNoIndex {
        command.args(["--event-id-index", "false"]);
    }
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::os(format!("starting {} serve", exe.display()), e))?;
    let stderr = child.stderr.take().expect("stderr is piped");
    // The server prints its address (it listens on a free port); the rest of its log is drained.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(addr) = line.strip_prefix("roamkv serve: listening on http://") {
                sent = tx.send(Ok(addr.to_string())).is_ok();
            } else if !sent {
                let _ = tx.send(Err(line));
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut log = Vec::new();
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Ok(addr)) => break addr,
            Ok(Err(line)) => log.push(line),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Run(format!(
                    "roamkv serve did not start within 60 s: {}",
                    log.join(" | ")
                )));
            }
        }
    };
    let addr = addr.trim().parse().map_err(|e| {
        BenchError::Run(format!("roamkv serve printed a bad address {addr:?}: {e}"))
    })?;
    Ok(Up::Server(ServerProcess {
        target,
        child,
        addr,
        cloud,
        dir,
    }))
}

/// Starts peer `target` fresh under `work_dir` with `env` added to its environment (`bench
/// footprint`: InfluxDB's compaction settings, `INFLUXDB_DATA_*`).
pub fn start_peer_with_env(
    target: Target,
    work_dir: &Path,
    durability: Durability,
    env: &[(&str, &str)],
) -> Result<Up> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("peer-{}-", target.name()))
        .tempdir_in(work_dir)
        .map_err(|e| BenchError::io("making a directory under", work_dir, e))?;
    start_peer(target, dir, durability, env)
}

/// Starts a peer (peers.rs) and waits for it to answer; stopped again if it does not.
fn start_peer(
    target: Target,
    dir: tempfile::TempDir,
    durability: Durability,
    env: &[(&str, &str)],
) -> Result<Up> {
    let mut launch = match target {
        Target::Influxdb => peers::influxdb_launch(dir.path())?,
        _ => peers::questdb_launch(dir.path(), durability == Durability::Sync)?,
    };
    launch.command.envs(env.iter().copied());
    let peers::Launch {
        mut command,
        http_port,
        log_path,
    } = launch;
    let log =
        std::fs::File::create(&log_path).map_err(|e| BenchError::io("creating", &log_path, e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| BenchError::io("duplicating", &log_path, e))?;
    let child = command
        .stdout(log)
        .stderr(log2)
        .spawn()
        .map_err(|e| match (target, e.kind()) {
            (Target::Influxdb, std::io::ErrorKind::NotFound) => {
                BenchError::Usage(peers::INFLUXDB_MISSING.into())
            }
            _ => BenchError::os(format!("starting {}", target.name()), e),
        })?;
    let addr: SocketAddr = ([127, 0, 0, 1], http_port).into();
    // Dropped on any error below: killed (ServerProcess's Drop).
    let mut server = ServerProcess {
        target,
        child,
        addr,
        cloud: None,
        dir,
    };
    peers::wait_for_ping(target.name(), &mut server.child, addr, &log_path)?;
    if target == Target::Influxdb {
        peers::influxdb_create_database(addr)?;
    }
    Ok(Up::Server(server))
}

impl ServerProcess {
    /// The process's exit status, if it has exited.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then wait (at most 120 s: a graceful stop syncs and closes).
    pub fn stop(&mut self) -> Result<()> {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match self.child.try_wait() {
                // The peers' exit codes after SIGTERM are theirs (the JVM's is 143).
                Ok(Some(status)) if status.success() || self.target.is_peer() => {
                    return Ok(());
                }
                Ok(Some(status)) => {
                    return Err(BenchError::Run(format!(
                        "{} exited with {status}",
                        self.target.name()
                    )));
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(BenchError::Run(format!(
                        "{} did not stop within 120 s of SIGTERM",
                        self.target.name()
                    )));
                }
            }
        }
    }
}

/// A server left running by a run that failed part-way is killed: no process outlives the
/// bench. (`finish` stops it gracefully first; then this finds it gone.)
impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sink's state as `GET /api/roamkv/v1/sink` answers it.
pub fn sink_view(addr: SocketAddr) -> Result<serde_json::Value> {
    let answer = HttpClient::new(addr).request("GET", "/api/roamkv/v1/sink", "text/plain", b"")?;
    serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::step("the sink's status is not JSON", e))
}

impl ServerProcess {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cloud database of a `RoamkvSink` server.
    pub fn cloud(&mut self) -> Option<&mut Cluster> {
        self.cloud.as_deref_mut()
    }

    /// For a server with a sink: waits (at most 120 s) until the sink has committed everything
    /// the log holds, then counts the cloud's readings. None without a sink.
    pub fn cloud_rows_when_caught_up(&self) -> Result<Option<u64>> {
        let Some(cloud) = &self.cloud else {
            return Ok(None);
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let view = sink_view(self.addr)?;
            if view["sink"]["state"] == "tailing" && view["lag_bytes"] == 0 {
                break;
            }
            if Instant::now() > deadline {
                return Err(BenchError::Run(format!(
                    "the sink did not catch up within 120 s: {view}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let rows = cloud
            .psql(&["-c", "SELECT count(*) FROM roamkv_readings"])
            .map_err(|e| BenchError::step("counting the cloud's readings", e))?;
        rows.trim()
            .parse()
            .map(Some)
            .map_err(|e| BenchError::Run(format!("the cloud's count {rows:?}: {e}")))
    }
}

/// Every reading of `clients` devices in the engine (paged scans).
pub(super) fn count_engine(engine: &Engine, clients: usize) -> Result<u64> {
    let mut total = 0;
    for client in 0..clients {
        let device = device_name(client);
        let mut after = None;
        loop {
            let page = engine
                .scan_page(&device, None, i64::MIN, i64::MAX, after.as_ref(), 100_000)
                .map_err(|e| BenchError::step(format!("counting {device}"), e))?;
            total += page.readings.len() as u64;
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    Ok(total)
}

/// The values the server stores for one event's readings (CBOR `StoredReading`s), computed
/// by the code the server runs (the wire crate's) from the JSON the roamkv clients send.
pub fn stored_values(readings_per_event: usize) -> Result<Arc<Vec<Vec<u8>>>> {
    let json = edgex_json(&EventSpec {
        client: 0,
        seq: 0,
        readings: readings_per_event,
        origin_ms: 1_700_000_000_000,
    });
    let request = roamkv_wire::edgex::parse_add_event_json(json.as_bytes())?;
    let readings = roamkv_wire::edgex::event_to_readings(request, None, usize::MAX)?;
    Ok(Arc::new(readings.into_iter().map(|r| r.value).collect()))
}

/// The in-process engine as a client: one `put_batch` per event.
struct EngineSender {
    engine: Arc<Engine>,
    sensors: Arc<Vec<String>>,
    values: Arc<Vec<Vec<u8>>>,
}

impl Sender for EngineSender {
    fn send(&mut self, event: &EventSpec) -> Result<()> {
        let device = event.device();
        let records: Vec<Record<'_>> = (0..event.readings)
            .map(|i| Record::at_ms(&device, &self.sensors[i], event.origin_ms, &self.values[i]))
            .collect();
        Ok(self.engine.put_batch(&records)?)
    }
}

fn binary_batch(event: &EventSpec, sensors: &[String], values: &[Vec<u8>]) -> Vec<u8> {
    let device = event.device();
    let mut body = Vec::with_capacity(12 + event.readings * (40 + values[0].len()));
    roamkv_wire::batch::encode_header(&mut body, event.readings as u32);
    for i in 0..event.readings {
        roamkv_wire::batch::encode_record(
            &mut body,
            &device,
            &sensors[i],
            event.origin_ms,
            &values[i],
        );
    }
    body
}

impl Up {
    /// One sender per client.
    pub fn senders(
        &self,
        clients: usize,
        readings_per_event: usize,
    ) -> Result<Vec<Box<dyn Sender>>> {
        let sensors: Arc<Vec<String>> =
            Arc::new((0..readings_per_event).map(resource_name).collect());
        let values = stored_values(readings_per_event)?;
        let mut senders: Vec<Box<dyn Sender>> = Vec::with_capacity(clients);
        for _ in 0..clients {
            let sender: Box<dyn Sender> = match self {
                Up::Engine { engine, .. } => Box::new(EngineSender {
                    engine: Arc::clone(engine),
                    sensors: Arc::clone(&sensors),
                    values: Arc::clone(&values),
                }),
                Up::Server(server) => Box::new(http_sender(server, &sensors, &values)),
            };
            senders.push(sender);
        }
        Ok(senders)
    }

    /// CPU seconds used so far by the system under test: the server process, or (in-process
    /// engine) this whole process.
    pub fn cpu_seconds(&self) -> f64 {
        match self {
            Up::Server(server) => process_cpu_seconds(&format!("/proc/{}/stat", server.child.id())),
            Up::Engine { .. } => process_cpu_seconds("/proc/self/stat"),
        }
    }

    /// Group commits roamkv has made so far: the in-process engine's count, or the server's
    /// `roamkv_group_commits_total` from its /metrics. None for the peers.
    pub fn group_commits(&self) -> Result<Option<u64>> {
        let server = match self {
            Up::Engine { engine, .. } => return Ok(Some(engine.stats().group_commits)),
            Up::Server(server) if server.target.is_peer() => return Ok(None),
            Up::Server(server) => server,
        };
        match scrape_metric(server.addr, "roamkv_group_commits_total")? {
            Some(commits) => Ok(Some(commits as u64)),
            None => Err(BenchError::Run(
                "the server's /metrics has no roamkv_group_commits_total".into(),
            )),
        }
    }

    /// Stops the system and returns how many readings it holds.
    pub fn finish(self, clients: usize) -> Result<u64> {
        match self {
            Up::Engine { engine, _dir } => {
                let count = count_engine(&engine, clients);
                let engine = Arc::try_unwrap(engine).map_err(|_| {
                    BenchError::Run("the engine is still shared after the run".into())
                })?;
                engine
                    .close()
                    .map_err(|e| BenchError::step("closing the engine", e))?;
                count
            }
            Up::Server(mut server) if server.target.is_peer() => {
                let count = match server.target {
                    Target::Influxdb => peers::influx_count(server.addr),
                    _ => peers::questdb_count(server.addr),
                };
                server.stop()?;
                count
            }
            Up::Server(mut server) => {
                let cloud_rows = server.cloud_rows_when_caught_up()?;
                server.stop()?;
                let data: PathBuf = server.dir.path().join("data");
                let engine =
                    Engine::open(&data, engine_options(Durability::Sync)).map_err(|e| {
                        BenchError::step(format!("opening {} after the run", data.display()), e)
                    })?;
                let count = count_engine(&engine, clients);
                engine
                    .close()
                    .map_err(|e| BenchError::step("closing the engine", e))?;
                match (cloud_rows, &count) {
                    (Some(rows), Ok(count)) if rows != *count => Err(BenchError::Check(format!(
                        "the cloud database holds {rows} readings, the edge {count}"
                    ))),
                    _ => count,
                }
            }
        }
    }
}

fn http_sender(
    server: &ServerProcess,
    sensors: &Arc<Vec<String>>,
    values: &Arc<Vec<Vec<u8>>>,
) -> HttpSender {
    let client = HttpClient::new(server.addr);
    match server.target {
        Target::Influxdb => HttpSender {
            client,
            content_type: "text/plain; charset=utf-8",
            path: Arc::new(|_| "/write?db=bench&precision=ns".to_string()),
            body: Arc::new(|e| influx_lines(e).into_bytes()),
        },
        // QuestDB's InfluxDB-compatible endpoint: the same lines, nanosecond precision.
        Target::Questdb => HttpSender {
            client,
            content_type: "text/plain; charset=utf-8",
            path: Arc::new(|_| "/write?precision=n".to_string()),
            body: Arc::new(|e| influx_lines(e).into_bytes()),
        },
        Target::RoamkvBinary => {
            let (sensors, values) = (Arc::clone(sensors), Arc::clone(values));
            HttpSender {
                client,
                content_type: roamkv_wire::batch::CONTENT_TYPE,
                path: Arc::new(|_| "/api/roamkv/v1/readings".to_string()),
                body: Arc::new(move |e| binary_batch(e, &sensors, &values)),
            }
        }
        _ => HttpSender {
            client,
            content_type: "application/json",
            path: Arc::new(|e| format!("/api/v3/event/bench/{PROFILE}/{}/{SOURCE}", e.device())),
            body: Arc::new(|e| edgex_json(e).into_bytes()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_of_this_process_are_read() {
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {}
        assert!(process_cpu_seconds("/proc/self/stat") > 0.0);
        assert_eq!(process_cpu_seconds("/proc/no-such/stat"), 0.0);
    }

    #[test]
    fn stored_values_are_the_servers_cbor_readings() {
        use roamkv_wire::edgex::{StoredForm, stored_form};
        let values = stored_values(3).expect("values");
        assert_eq!(values.len(), 3);
        // Compact stored readings (two UUIDs as 16 bytes, names, a value): 60-120 bytes each.
        assert!(
            values.iter().all(
                |v| stored_form(v) == Some(StoredForm::Compact) && (60..120).contains(&v.len())
            ),
            "{:?}",
            values.iter().map(Vec::len).collect::<Vec<_>>()
        );
    }
}
