//! `roamkv bench footprint`: what a realistic sensor stream costs a gateway's small, wearing
//! disk — bytes on disk per reading right after ingest and once settled, bytes written to the
//! block device per reading, the ingest rate — for roamkv's EdgeX route and its native route,
//! InfluxDB 1.6, QuestDB 9.2 and plain RocksDB, with every reading read back.
//!
//! The pipeline: `stream` (the seeded events) → `bodies` (each system's wire form, the same
//! batches) → `systems` (start on its own loop-device ext4, ingest, settle, stop) → `measure`
//! (device counters and allocated bytes between syncs, roamkv's own counters) → `readback`
//! (every reading compared) → `report` (table, results.json, report.html).

pub mod bodies;
pub mod disk;
pub mod measure;
pub mod readback;
pub mod report;
pub mod stream;
pub mod systems;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use roamkv_testbed::report::{MachineHeader, say};

use crate::error::{BenchError, Result};
use crate::footprint::disk::DiskArgs;
use crate::footprint::measure::Footprint;
use crate::footprint::stream::{Kind, MIX_DEFAULT, StreamSpec};
use crate::footprint::systems::{Settings, System};
use crate::serve::peers;

#[derive(Args, Debug, Clone)]
pub struct FootprintArgs {
    /// Devices, each sending one event of every sensor's reading a second.
    #[arg(long, default_value_t = 100)]
    pub devices: usize,
    /// Sensors (readings per event) of each device.
    #[arg(long, default_value_t = 10)]
    pub sensors: usize,
    /// Seconds of the stream (100 devices x 10 sensors x 1000 s = 1,000,000 readings).
    #[arg(long, default_value_t = 1000)]
    pub seconds: u64,
    /// The stream's seed (UUIDs and values).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The kinds of a device's sensor slots, cycled [default: six floats, a counter, a bool, a
    /// state, a constant].
    #[arg(long, value_delimiter = ',')]
    pub mix: Vec<Kind>,
    /// Readings per batch of every system but EdgeX (whose unit is the event).
    #[arg(long, default_value_t = 500)]
    pub batch_readings: usize,
    /// Client threads sending at once (each a share of the devices or batches).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// roamkv's management time: a device settles into the lower tier this long after it came.
    #[arg(long, default_value_t = 10_000)]
    pub management_time_ms: u64,
    /// How long a system may take to settle after ingest.
    #[arg(long, default_value_t = 600)]
    pub settle_timeout_s: u64,
    /// The systems, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "roamkv-edgex,roamkv-native,influxdb,questdb,rocksdb"
    )]
    pub systems: Vec<System>,
    /// Size of each system's ext4 (a sparse image on a loop device), GiB.
    #[arg(long, default_value_t = 8)]
    pub fs_gib: u64,
    /// A warm-up first: the stream runs twice as long, its first half sent and settled before
    /// anything is counted, and every figure is of the second half (on disk: what the files
    /// grew by over it). A directory that has run a while recycles its log's retired segments
    /// instead of preparing new ones: the steady state, where a fresh directory's first run
    /// pays its log's first fill.
    #[arg(long)]
    pub warm_up: bool,
    /// A small stream (20 devices x 10 sensors x 60 s = 12,000 readings, management time 3 s): a
    /// minute or two.
    #[arg(long)]
    pub quick: bool,
    #[arg(long, default_value = "out/bench-footprint")]
    pub out: PathBuf,
    #[command(flatten)]
    pub disk: DiskArgs,
}

impl FootprintArgs {
    fn stream(&self) -> StreamSpec {
        let (devices, seconds) = if self.quick {
            (20, 60)
        } else {
            (self.devices, self.seconds)
        };
        StreamSpec {
            devices,
            sensors: self.sensors,
            seconds,
            seed: self.seed,
            mix: if self.mix.is_empty() {
                MIX_DEFAULT.to_vec()
            } else {
                self.mix.clone()
            },
            send_from_second: 0,
        }
    }

    fn settings(&self) -> Result<Settings> {
        Ok(Settings {
            batch_readings: self.batch_readings,
            clients: self.clients,
            management_time_ms: if self.quick {
                3_000
            } else {
                self.management_time_ms
            },
            settle_timeout_s: self.settle_timeout_s,
            warm_up: self.warm_up,
            disk: self.disk.profile()?,
            disk_probe: None,
            out: self.out.clone(),
        })
    }
}

pub fn run(args: &FootprintArgs) -> ExitCode {
    match footprint(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("roamkv bench footprint: a read-back FAILED (see the table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("roamkv bench footprint: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The systems that can run here, and a loud note for each that cannot.
fn runnable(systems: &[System]) -> (Vec<System>, Vec<String>) {
    let mut notes = Vec::new();
    let runnable = systems
        .iter()
        .copied()
        .filter(|s| {
            let missing = match s {
                System::Influxdb if !peers::influxd_installed() => {
                    Some(peers::INFLUXDB_MISSING.replace(
                        "--engines roamkv,roamkv-binary,questdb,engine",
                        "--systems roamkv-edgex,roamkv-native,questdb,rocksdb",
                    ))
                }
                System::Questdb => peers::questdb_missing(),
                _ => None,
            };
            if let Some(why) = &missing {
                eprintln!("\n*** {} LEFT OUT: {why} ***\n", s.name());
                notes.push(format!("{} left out: {why}", s.name()));
            }
            missing.is_none()
        })
        .collect();
    (runnable, notes)
}

fn footprint(args: &FootprintArgs) -> Result<bool> {
    roamkv_testbed::prerequisite::require_root()?;
    let (spec, mut settings) = (args.stream(), args.settings()?);
    if spec.readings() == 0 || spec.mix.is_empty() {
        return Err(BenchError::Usage("the stream has no readings".into()));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let (systems, mut notes) = runnable(&args.systems);
    let header = MachineHeader::collect();
    let bar = indicatif::ProgressBar::new(systems.len() as u64);
    let tell = |line: String| say(&bar, line);
    if settings.warm_up {
        notes.push(format!(
            "warm-up: the first {} s of a {} s stream sent and settled first; every figure is of \
             the second {} s (on disk: what the files grew by over it)",
            spec.seconds,
            spec.seconds * 2,
            spec.seconds
        ));
    }
    tell(format!(
        "footprint: {} readings ({} devices x {} sensors x {} s, seed {}){}, batches of {}, {} clients, sync",
        spec.readings(),
        spec.devices,
        spec.sensors,
        spec.seconds,
        spec.seed,
        if settings.warm_up {
            ", after a warm-up of as many"
        } else {
            ""
        },
        settings.batch_readings,
        settings.clients
    ));
    if let Some(profile) = &settings.disk {
        let probe = disk::probe(profile)?;
        let line = disk_line(profile, &probe);
        tell(line.clone());
        notes.push(line);
        settings.disk_probe = Some(probe);
    }
    let mut runs: Vec<Footprint> = Vec::new();
    for system in systems {
        tell(format!("{}: ingesting", system.name()));
        let run = measure::measure(system, &spec, &settings, args.fs_gib << 30, &tell)?;
        tell(format!(
            "{}: {:.1} B/reading on disk settled, {:.1} B/reading written, read-back {}",
            system.name(),
            run.per_reading(run.settle.on_disk_bytes),
            run.per_reading(run.device_written_bytes()),
            if run.read_back.ok() { "ok" } else { "FAILED" }
        ));
        runs.push(run);
        bar.inc(1);
    }
    bar.finish_and_clear();
    notes.push(format!(
        "roamkv: management time {} ms; InfluxDB: cache-snapshot-write-cold-duration 5 s and \
         compact-full-write-cold-duration 10 s (environment overrides) so that it compacts within \
         the run; QuestDB: measured once its WAL is applied; RocksDB: compact_range.",
        settings.management_time_ms
    ));
    println!("{}", report::terminal(&runs));
    report::write(&args.out, &header, &spec, &settings, &runs, &notes)?;
    println!(
        "results: {}/results.json, {}/report.html",
        args.out.display(),
        args.out.display()
    );
    Ok(runs.iter().all(|r| r.read_back.ok()))
}

/// The throttle asked for and what the probe measured on it.
fn disk_line(profile: &disk::DiskProfile, probe: &disk::Probe) -> String {
    // A limit of 0 is no limit (the flag not given).
    let limit = |v: f64| {
        if v > 0.0 {
            v.to_string()
        } else {
            "unlimited".to_string()
        }
    };
    format!(
        "gateway-class disk: asked {} MB/s write, {} MB/s read, {} write requests/s ({}); \
         measured with dd on a throttled ext4: {:.1} MB/s O_DIRECT writes, {:.1} MB/s buffered \
         + fdatasync, {:.1} MB/s O_DIRECT reads, {:.2} ms per 4 KiB O_DSYNC overwrite",
        limit(profile.write_mbps),
        limit(profile.read_mbps),
        limit(profile.write_iops as f64),
        probe.mechanism,
        probe.direct_write_mbps,
        probe.buffered_fdatasync_write_mbps,
        probe.direct_read_mbps,
        probe.dsync_write_ms
    )
}
