//! `roamkv demo`: simulated moving devices on a simulated clock, so that a minute of arrivals,
//! departures and readings leaving the log runs in seconds and shows every tier at work.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use roamkv_engine::{Durability, Engine, LowerTierKind, ManualClock, Options, Record};

use crate::stats_table::stats_table;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Data directory; emptied first if it is a roamkv directory (refused otherwise).
    #[arg(long, default_value = "out/demo")]
    pub data: PathBuf,
    /// Devices that arrive during the first half of the run.
    #[arg(long, default_value_t = 400)]
    pub devices: usize,
    /// Simulated run length, in seconds.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Management time, in simulated ms.
    #[arg(long, default_value_t = 10_000)]
    pub management_time_ms: u64,
    /// Chance that a device leaves before its management time ends (paper 002: 0.9).
    #[arg(long, default_value_t = 0.9)]
    pub depart_probability: f64,
    /// Bytes per reading's value.
    #[arg(long, default_value_t = 512)]
    pub value_bytes: usize,
    #[arg(long, default_value = "rocksdb", value_parser = |s: &str| LowerTierKind::from_name(s).ok_or(format!("unknown lower tier {s:?}; valid: rocksdb, leveldb")))]
    pub lower: LowerTierKind,
    #[arg(long, default_value_t = 17)]
    pub seed: u64,
}

struct Device {
    name: String,
    arrives_ms: u64,
    /// None: stays to the end.
    leaves_ms: Option<u64>,
    readings: u64,
}

const TICK_MS: u64 = 100;
const SENSORS: [&str; 8] = ["speed", "rpm", "fuel", "temp", "lat", "lon", "alt", "brake"];

pub fn run(args: &DemoArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.depart_probability) {
        return Err("--depart-probability must be within [0, 1]".into());
    }
    empty_data_directory(args)?;
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open_engine(args, clock.clone())?;
    let mut devices = plan_devices(args);
    print_header(args);
    let value: Vec<u8> = (0..args.value_bytes)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let run_ms = args.seconds * 1000;
    let mut now = 0;
    while now < run_ms {
        write_tick(&engine, &mut devices, now, &value)?;
        now += TICK_MS;
        clock.advance_ms(TICK_MS);
        if now % 1000 == 0 {
            engine.maintain().map_err(|e| e.to_string())?;
        }
        if now % 10_000 == 0 {
            print_progress(&engine, &devices, now);
        }
    }
    // Let every remaining device reach the end of its management time.
    clock.advance_ms(args.management_time_ms);
    engine.maintain().map_err(|e| e.to_string())?;
    let checked = check_read_back(&engine, &devices, run_ms)?;
    print_summary(args, &engine, checked);
    devices.clear();
    engine.close().map_err(|e| e.to_string())
}

/// The simulated clock's start, in ms since the epoch.
const START_MS: u64 = 1_700_000_000_000;

/// Removes `--data` if it is a roamkv data directory; refuses any other existing path.
fn empty_data_directory(args: &DemoArgs) -> Result<(), String> {
    if !args.data.exists() {
        return Ok(());
    }
    if !args.data.join("ROAMKV").exists() {
        return Err(format!(
            "{} exists and is not a roamkv data directory; pick another --data",
            args.data.display()
        ));
    }
    std::fs::remove_dir_all(&args.data)
        .map_err(|e| format!("emptying {}: {e}", args.data.display()))
}

/// The engine on the simulated clock, maintained only when the demo says so.
fn open_engine(args: &DemoArgs, clock: Arc<ManualClock>) -> Result<Engine, String> {
    let options = Options {
        durability: Durability::Sync,
        management_time_ms: args.management_time_ms,
        segment_bytes: 4 << 20,
        lower_tier: args.lower,
        background_maintenance: false,
        clock,
        ..Options::default()
    };
    Engine::open(&args.data, options).map_err(|e| e.to_string())
}

/// Each device's arrival and (for those that leave early) departure, from the seed.
fn plan_devices(args: &DemoArgs) -> Vec<Device> {
    let mut rng = StdRng::seed_from_u64(args.seed);
    let run_ms = args.seconds * 1000;
    (0..args.devices)
        .map(|i| {
            let arrives_ms = rng.random_range(0..=run_ms / 2) / TICK_MS * TICK_MS;
            let leaves_ms = (rng.random::<f64>() < args.depart_probability)
                .then(|| {
                    arrives_ms
                        + rng.random_range(
                            args.management_time_ms / 5..args.management_time_ms.max(2),
                        )
                })
                .map(|l| l / TICK_MS * TICK_MS);
            Device {
                name: format!("car-{i}"),
                arrives_ms,
                leaves_ms,
                readings: 0,
            }
        })
        .collect()
}

fn print_header(args: &DemoArgs) {
    println!(
        "roamkv demo: {} devices over {} simulated s, management time {} ms, {:.0} % leave early, seed {}, lower tier {}",
        args.devices,
        args.seconds,
        args.management_time_ms,
        args.depart_probability * 100.0,
        args.seed,
        args.lower.name()
    );
    println!(
        "{:>6} {:>8} {:>10} {:>8} {:>9} {:>10}",
        "sim s", "present", "upper rec", "settled", "departed", "log segs"
    );
}

impl Device {
    fn is_present(&self, now: u64) -> bool {
        now >= self.arrives_ms && self.leaves_ms.is_none_or(|l| now < l)
    }
}

/// One tick at simulated time `now`: one reading from every present device in one batch, then
/// the departures due now.
fn write_tick(
    engine: &Engine,
    devices: &mut [Device],
    now: u64,
    value: &[u8],
) -> Result<(), String> {
    let mut batch = Vec::new();
    let mut departing = Vec::new();
    for d in devices.iter_mut() {
        if d.is_present(now) {
            let sensor = SENSORS[(d.readings % SENSORS.len() as u64) as usize];
            batch.push((d.name.as_str(), sensor, (START_MS + now) as i64));
            d.readings += 1;
        } else if d.leaves_ms == Some(now) {
            departing.push(d.name.clone());
        }
    }
    let records: Vec<Record<'_>> = batch
        .iter()
        .map(|(device, sensor, ts_ms)| Record::at_ms(device, sensor, *ts_ms, value))
        .collect();
    engine.put_batch(&records).map_err(|e| e.to_string())?;
    for name in &departing {
        engine.depart(name).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One row of the progress table.
fn print_progress(engine: &Engine, devices: &[Device], now: u64) {
    let s = engine.stats();
    let present = devices.iter().filter(|d| d.is_present(now)).count();
    println!(
        "{:>6} {:>8} {:>10} {:>8} {:>9} {:>10}",
        now / 1000,
        present,
        s.upper.records,
        s.lower.devices,
        s.departures,
        s.live_segments
    );
}

/// Checks what the tiers hold against what was written: every device that stayed has all its
/// readings, every one that left has none. Returns how many devices it checked.
fn check_read_back(engine: &Engine, devices: &[Device], run_ms: u64) -> Result<usize, String> {
    let mut checked = 0;
    for d in devices {
        let expected = if d.leaves_ms.is_some_and(|l| l < run_ms) {
            0
        } else {
            d.readings
        };
        let got = engine
            .scan(&d.name, None, i64::MIN, i64::MAX)
            .map_err(|e| e.to_string())?
            .len() as u64;
        if got != expected {
            return Err(format!(
                "{} holds {got} readings, expected {expected}",
                d.name
            ));
        }
        checked += 1;
    }
    Ok(checked)
}

fn print_summary(args: &DemoArgs, engine: &Engine, checked: usize) {
    let stats = engine.stats();
    println!();
    print!("{}", stats_table(&stats));
    println!(
        "read back all {checked} devices: every staying device complete, every departed one gone"
    );
    println!(
        "data directory: {} (inspect with `roamkv stats --data {}`)",
        args.data.display(),
        args.data.display()
    );
}
