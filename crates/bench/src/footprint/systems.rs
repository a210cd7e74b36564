//! The systems `roamkv bench footprint` fills, each on its own file system (so that the loop
//! device's counters are that system's bytes and nothing else's), each started, loaded with the
//! same stream in its own wire form (bodies.rs), settled and stopped here:
//!
//! - **roamkv-edgex**, **roamkv-native**: the real `roamkv serve` (`edge_rig::Edge`, `sync`
//!   durability, a short `--management-time-ms` so that devices settle within the run).
//! - **questdb**, **influxdb**: the peers of `bench serve` (serve/peers.rs), line protocol over
//!   HTTP, `sync`.
//! - **rocksdb**: RocksDB in-process through the mobility bench's adapter (`sync` writes, its WAL
//!   on), one WriteBatch per batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roamkv_engine::{Durability, Stats};
use roamkv_testbed::fixture::Fixture;

use crate::edge_rig::Edge;
use crate::error::{BenchError, Result};
use crate::footprint::bodies::{self, Flat};
use crate::footprint::disk::{DiskProfile, Probe};
use crate::footprint::stream::StreamSpec;
use crate::mobility::engines::{self, BenchEngine, EngineConfig, EngineKind, Put};
use crate::serve::load::HttpClient;
use crate::serve::targets::{self, Target, Up};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum System {
    /// `roamkv serve`, EdgeX v3 events (JSON) on its core-data route.
    RoamkvEdgex,
    /// `roamkv serve`, batches of JSON lines on its native route.
    RoamkvNative,
    /// RocksDB in-process, one synced WriteBatch per batch.
    Rocksdb,
    /// QuestDB 9.2, line protocol over HTTP, commits fsync'd.
    Questdb,
    /// InfluxDB 1.6, line protocol over HTTP, its WAL fsync'd per write.
    Influxdb,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::RoamkvEdgex => "roamkv-edgex",
            System::RoamkvNative => "roamkv-native",
            System::Rocksdb => "rocksdb",
            System::Questdb => "questdb",
            System::Influxdb => "influxdb",
        }
    }
    pub fn is_roamkv(self) -> bool {
        matches!(self, System::RoamkvEdgex | System::RoamkvNative)
    }
}

/// What a run gives every system alike.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    pub batch_readings: usize,
    pub clients: usize,
    pub management_time_ms: u64,
    pub settle_timeout_s: u64,
    /// The stream's first half sent and settled before anything is counted (`--warm-up`).
    pub warm_up: bool,
    /// The gateway-class disk every system's device is throttled to, if any, and what its probe
    /// measured.
    pub disk: Option<DiskProfile>,
    pub disk_probe: Option<Probe>,
    #[serde(skip)]
    pub out: PathBuf,
}

/// InfluxDB 1.6 snapshots its cache to TSM after `cache-snapshot-write-cold-duration` (10 m) and
/// fully compacts a shard after `compact-full-write-cold-duration` (4 h) without writes; the
/// bench shortens both (environment overrides of its config) so "settled" fits in a run.
const INFLUXDB_COLD: [(&str, &str); 2] = [
    ("INFLUXDB_DATA_CACHE_SNAPSHOT_WRITE_COLD_DURATION", "5s"),
    ("INFLUXDB_DATA_COMPACT_FULL_WRITE_COLD_DURATION", "10s"),
];

/// A system up on its file system.
pub enum Running {
    Roamkv(System, Edge),
    Peer(System, Up, Fixture),
    Rocks(Arc<Box<dyn BenchEngine>>, Fixture),
}

pub fn start(system: System, fixture: Fixture, settings: &Settings) -> Result<Running> {
    match system {
        System::RoamkvEdgex | System::RoamkvNative => {
            let log_dir = settings.out.join(system.name());
            std::fs::create_dir_all(&log_dir)
                .map_err(|e| BenchError::io("creating", &log_dir, e))?;
            let edge = Edge::start_on(fixture, settings.management_time_ms, 1024, &log_dir)?;
            Ok(Running::Roamkv(system, edge))
        }
        System::Questdb | System::Influxdb => {
            let (target, env): (Target, &[(&str, &str)]) = match system {
                System::Influxdb => (Target::Influxdb, &INFLUXDB_COLD),
                _ => (Target::Questdb, &[]),
            };
            let up =
                targets::start_peer_with_env(target, fixture.mount_dir(), Durability::Sync, env)?;
            Ok(Running::Peer(system, up, fixture))
        }
        System::Rocksdb => {
            let engine = engines::open(&rocksdb_config(), &fixture.mount_dir().join("rocksdb"))?;
            Ok(Running::Rocks(Arc::new(engine), fixture))
        }
    }
}

/// The mobility bench's RocksDB at `sync`, 64 MiB of memtables and cache.
fn rocksdb_config() -> EngineConfig {
    EngineConfig {
        kind: EngineKind::Rocksdb,
        durability: engines::Durability::Sync,
        engine_memory_bytes: 64 << 20,
        management_time_ms: 0,
        lazy_move_rule: false,
        index_after_ack: false,
    }
}

impl Running {
    pub fn fixture(&self) -> &Fixture {
        match self {
            Running::Roamkv(_, edge) => edge.fixture(),
            Running::Peer(_, _, f) | Running::Rocks(_, f) => f,
        }
    }

    fn addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Running::Roamkv(_, edge) => Some(edge.addr),
            Running::Peer(_, Up::Server(server), _) => Some(server.addr()),
            _ => None,
        }
    }

    /// The engine's statistics as `GET /api/roamkv/v1/stats` answers them (roamkv only).
    pub fn engine_stats(&self) -> Result<Option<Stats>> {
        let Running::Roamkv(_, edge) = self else {
            return Ok(None);
        };
        let answer =
            HttpClient::new(edge.addr).request("GET", "/api/roamkv/v1/stats", "text/plain", b"")?;
        let json: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|e| BenchError::step("the server's statistics are not JSON", e))?;
        roamkv_wire::report::stats_from_json(json)
            .map(Some)
            .map_err(BenchError::Run)
    }

    /// Sends the whole stream: `clients` threads, each its share (EdgeX: the events of every
    /// `clients`-th device; otherwise every `clients`-th batch), in time order.
    pub fn ingest(&self, spec: &StreamSpec, settings: &Settings) -> Result<()> {
        let threads: Vec<_> = (0..settings.clients.max(1))
            .map(|client| {
                let share = Share {
                    client,
                    clients: settings.clients.max(1),
                };
                let (spec, batch) = (spec.clone(), settings.batch_readings);
                let sink = self.sink();
                std::thread::spawn(move || sink.send_share(&spec, batch, share))
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| BenchError::Run("a client thread panicked".into()))??;
        }
        Ok(())
    }

    fn sink(&self) -> Sink {
        match self {
            Running::Rocks(engine, _) => Sink::Rocks(Arc::clone(engine)),
            Running::Roamkv(System::RoamkvEdgex, _) => Sink::Edgex(self.addr().expect("a server")),
            Running::Roamkv(..) => Sink::Native(self.addr().expect("a server")),
            Running::Peer(..) => Sink::Lines(self.addr().expect("a server")),
        }
    }

    /// Waits until the system has done what it does after ingest without new writes, and says
    /// what that was: roamkv until every device is in the lower tier and the log holds none of
    /// the stream's readings; RocksDB a full
    /// compact_range; QuestDB until its WAL is applied; InfluxDB until its WAL directory is
    /// empty (cache snapshot to TSM) and then its full-compaction cold time.
    pub fn settle(&self, spec: &StreamSpec, settings: &Settings) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(settings.settle_timeout_s);
        match self {
            Running::Roamkv(_, edge) => settle_roamkv(edge, spec, deadline),
            Running::Rocks(engine, _) => {
                engine.compact()?;
                Ok("compact_range over the whole key space".into())
            }
            Running::Peer(System::Questdb, Up::Server(server), _) => {
                let rows = crate::serve::peers::questdb_count(server.addr())?;
                Ok(format!(
                    "WAL applied (writerTxn = sequencerTxn), {rows} rows"
                ))
            }
            Running::Peer(_, _, fixture) => settle_influxdb(fixture.mount_dir(), deadline),
        }
    }

    /// Stops the system and hands its file system back (its data still on it).
    pub fn stop(self) -> Result<Fixture> {
        match self {
            Running::Roamkv(_, edge) => Ok(edge.stop()),
            Running::Peer(_, Up::Server(mut server), fixture) => {
                server.stop()?;
                Ok(fixture)
            }
            Running::Peer(_, _, fixture) => Ok(fixture),
            Running::Rocks(engine, fixture) => {
                let engine = Arc::try_unwrap(engine)
                    .map_err(|_| BenchError::Run("RocksDB is still shared after ingest".into()))?;
                engine.close()?;
                Ok(fixture)
            }
        }
    }

    /// The address of a running peer or server, for the read-back.
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        self.addr()
    }

    /// The in-process RocksDB, for the read-back.
    pub fn rocks(&self) -> Option<&dyn BenchEngine> {
        match self {
            Running::Rocks(engine, _) => Some(engine.as_ref().as_ref()),
            _ => None,
        }
    }
}

/// Settled, for roamkv: every device of the stream listed in the lower tier AND the log holding
/// none of the stream's readings (each device's `log_readings` 0, and the engine's
/// `upper.records` 0, which also counts the EdgeX route's index of event ids). A device turns
/// "lower" one management time after it came, long before its last readings leave the log: those
/// leave only when their segment is taken, one management time after it was sealed, and
/// maintenance seals the active segment half a management time after its first record, writes
/// or not (engine `seal_if_old`). So the log empties about 1.5 management times after the last
/// write.
fn settle_roamkv(edge: &Edge, spec: &StreamSpec, deadline: Instant) -> Result<String> {
    let started = Instant::now();
    let mut client = HttpClient::new(edge.addr);
    loop {
        let log = LogState::read(&mut client)?;
        if log.lower >= spec.devices && log.listed >= spec.devices && log.is_empty() {
            return Ok(format!(
                "every device in the lower tier and the log holding none of their readings \
                 after {:.0} s ({} of {} devices lower; log readings 0; segments taken: {})",
                started.elapsed().as_secs_f64(),
                log.lower,
                log.listed,
                log.segments_aged
            ));
        }
        if Instant::now() > deadline {
            return Err(BenchError::Run(format!(
                "not settled in time: {} of {} devices in the lower tier, {} readings of listed \
                 devices and {} of any in the log",
                log.lower, spec.devices, log.device_log_readings, log.upper_records
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What the server says about its tiers: its device listing and its engine's statistics.
struct LogState {
    listed: usize,
    lower: usize,
    /// Sum of the listed devices' `log_readings`.
    device_log_readings: u64,
    /// `Stats::upper.records`: every reading in the log, of any device.
    upper_records: u64,
    segments_aged: u64,
}

impl LogState {
    fn read(client: &mut HttpClient) -> Result<LogState> {
        let answer = client.request("GET", "/api/roamkv/v1/devices", "text/plain", b"")?;
        let json: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|e| BenchError::step("the device listing is not JSON", e))?;
        let devices = json["devices"].as_array().cloned().unwrap_or_default();
        let answer = client.request("GET", "/api/roamkv/v1/stats", "text/plain", b"")?;
        let stats: serde_json::Value = serde_json::from_slice(&answer.body)
            .map_err(|e| BenchError::step("the server's statistics are not JSON", e))?;
        let field = |v: &serde_json::Value| v.as_u64().unwrap_or(u64::MAX);
        Ok(LogState {
            listed: devices.len(),
            lower: devices.iter().filter(|d| d["tier"] == "lower").count(),
            device_log_readings: devices
                .iter()
                .fold(0, |sum, d| sum.saturating_add(field(&d["log_readings"]))),
            upper_records: field(&stats["upper"]["records"]),
            segments_aged: field(&stats["segments_aged"]),
        })
    }

    fn is_empty(&self) -> bool {
        self.device_log_readings == 0 && self.upper_records == 0
    }
}

/// Waits until InfluxDB's WAL holds no segment with data (its cache went to TSM), then at least
/// the full-compaction cold time and a little more, and then until its TSM files have stood
/// still for `TSM_STILL` with no compaction output (`.tsm.tmp`) in progress: measured in the
/// middle of a full compaction, the shard holds its old files and the new one at once.
fn settle_influxdb(mount: &Path, deadline: Instant) -> Result<String> {
    let started = Instant::now();
    while tree_bytes_named(mount, ".wal") > 0 {
        if Instant::now() > deadline {
            return Ok(format!(
                "WAL still holds {} bytes at the settle timeout",
                tree_bytes_named(mount, ".wal")
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let wal_empty_s = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(15));
    let (mut still_since, mut last) = (Instant::now(), tree_bytes_named(mount, ".tsm"));
    while still_since.elapsed() < TSM_STILL || tree_bytes_named(mount, ".tmp") > 0 {
        if Instant::now() > deadline {
            return Ok(format!(
                "WAL empty after {wal_empty_s:.0} s; TSM files still changing at the settle timeout"
            ));
        }
        std::thread::sleep(Duration::from_secs(1));
        let now = tree_bytes_named(mount, ".tsm");
        if now != last || tree_bytes_named(mount, ".tmp") > 0 {
            (still_since, last) = (Instant::now(), now);
        }
    }
    Ok(format!(
        "WAL empty after {wal_empty_s:.0} s (cache snapshot to TSM), then 15 s for a full \
         compaction (compact-full-write-cold-duration 10 s), TSM files unchanged for {} s after \
         {:.0} s in all",
        TSM_STILL.as_secs(),
        started.elapsed().as_secs_f64()
    ))
}

/// How long InfluxDB's TSM files must stand still to count as compacted.
const TSM_STILL: Duration = Duration::from_secs(10);

/// Bytes of the files under `dir` whose names end in `suffix`.
fn tree_bytes_named(dir: &Path, suffix: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => tree_bytes_named(&path, suffix),
                Ok(_) if path.to_string_lossy().ends_with(suffix) => {
                    e.metadata().map(|m| m.len()).unwrap_or(0)
                }
                _ => 0,
            }
        })
        .sum()
}

/// Which share of the stream a client thread sends.
#[derive(Debug, Clone, Copy)]
struct Share {
    client: usize,
    clients: usize,
}

/// Where a client thread sends its share.
enum Sink {
    Edgex(std::net::SocketAddr),
    Native(std::net::SocketAddr),
    Lines(std::net::SocketAddr),
    Rocks(Arc<Box<dyn BenchEngine>>),
}

impl Sink {
    fn send_share(&self, spec: &StreamSpec, batch_readings: usize, share: Share) -> Result<()> {
        if let Sink::Edgex(addr) = self {
            let mut client = HttpClient::new(*addr);
            for event in spec
                .events()
                .filter(|e| e.device % share.clients == share.client)
            {
                let body = bodies::edgex_json(spec, &event);
                post(
                    &mut client,
                    &bodies::edgex_path(spec, event.device),
                    "application/json",
                    body,
                )?;
            }
            return Ok(());
        }
        let mut batches = bodies::batches(spec, batch_readings)
            .enumerate()
            .filter(|(i, _)| i % share.clients == share.client)
            .map(|(_, batch)| batch);
        match self {
            Sink::Rocks(engine) => {
                batches.try_for_each(|batch| rocks_put(engine.as_ref().as_ref(), spec, &batch))
            }
            Sink::Native(addr) => {
                let mut client = HttpClient::new(*addr);
                batches.try_for_each(|batch| {
                    let body = bodies::native_lines(spec, &batch);
                    post(
                        &mut client,
                        "/api/roamkv/v1/readings",
                        "application/json",
                        body,
                    )
                })
            }
            Sink::Lines(addr) | Sink::Edgex(addr) => {
                let mut client = HttpClient::new(*addr);
                batches.try_for_each(|batch| {
                    let body = bodies::line_protocol(spec, &batch);
                    let path = "/write?db=bench&precision=n";
                    post(&mut client, path, "text/plain; charset=utf-8", body)
                })
            }
        }
    }
}

fn rocks_put(engine: &dyn BenchEngine, spec: &StreamSpec, batch: &[Flat]) -> Result<()> {
    let names: Vec<(String, String)> = batch
        .iter()
        .map(|r| (spec.device_name(r.device), spec.sensor_name(r.sensor)))
        .collect();
    let puts: Vec<Put<'_>> = batch
        .iter()
        .zip(&names)
        .map(|(r, (device, sensor))| Put {
            device,
            sensor,
            ts_ms: r.ts_ns / 1_000_000,
            value: r.value.as_bytes(),
        })
        .collect();
    engine.put_batch(&puts)
}

/// POSTs `body`; any answer but 2xx is an error that names the request.
fn post(client: &mut HttpClient, path: &str, content_type: &str, body: String) -> Result<()> {
    let answer = client.request("POST", path, content_type, body.as_bytes())?;
    if !(200..300).contains(&answer.status) {
        return Err(BenchError::HttpStatus {
            request: format!("POST {path}"),
            status: answer.status,
            body: String::from_utf8_lossy(&answer.body).into_owned(),
        });
    }
    Ok(())
}
