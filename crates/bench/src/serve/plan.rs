//! What one `roamkv bench serve` invocation runs: its arguments, the durability the systems are
//! matched at, and the plan with defaults applied (which systems can run here, the peers left
//! out and why).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::error::{BenchError, Result};
use crate::serve::peers;
use crate::serve::targets::Target;

#[derive(Args, Debug)]
pub struct ServeBenchArgs {
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "out/bench-serve")]
    pub out: PathBuf,
    /// Systems, comma-separated: roamkv, roamkv-binary, roamkv-bus-qos0, roamkv-bus-qos1,
    /// mosquitto-qos0, mosquitto-qos1, influxdb, questdb, engine [default: all of these; one
    /// that cannot run here is left out with a line saying why].
    #[arg(long, value_delimiter = ',', value_enum)]
    pub engines: Option<Vec<Target>>,
    /// What an acknowledgement promises: `sync` (roamkv after its group's fdatasync, InfluxDB
    /// after its WAL's fsync, QuestDB with `cairo.commit.mode=sync`) or `none` (roamkv
    /// `--durability none`, QuestDB's default; InfluxDB has no such mode and is left out).
    #[arg(long, value_enum, default_value = "sync")]
    pub durability: AckDurability,
    /// Readings per event, comma-separated [default: 1,10,100; quick: 1,100].
    #[arg(long, value_delimiter = ',')]
    pub readings_per_event: Option<Vec<usize>>,
    /// Concurrent clients (one connection, one device each) [default: 32; quick: 8].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Measured seconds per run [default: 10; quick: 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Unmeasured seconds at the start of every run [default: 1; quick: 0.3].
    #[arg(long)]
    pub warmup_seconds: Option<f64>,
    /// Runs per configuration; medians are reported [default: 3; quick: 1].
    #[arg(long)]
    pub repeats: Option<usize>,
    /// A short run (seconds, not minutes): fewer sizes, clients, repeats.
    #[arg(long)]
    pub quick: bool,
    /// Where the systems' data directories are made (each run gets a fresh one, deleted after).
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: PathBuf,
    /// Leave out the open-loop runs at half the peak rate.
    #[arg(long)]
    pub skip_half_peak: bool,
    /// Readings per second of every open-loop run, the same for every system (default: half of
    /// each system's own median peak). One offered load for all: what a feature costs below
    /// saturation (`--engines roamkv,roamkv-sink`), where half of each one's own peak would
    /// compare two different loads.
    #[arg(long)]
    pub open_loop_rate: Option<f64>,
    /// Events the bus rows' publishers together may have sent that the subscriber has not
    /// taken yet, the bus's counterpart of the HTTP clients' closed loop [default: 40,000
    /// readings' worth, at least 2 per publisher]; 0: no bound (they publish as fast as the
    /// broker takes it: a flood).
    #[arg(long)]
    pub bus_backlog_events: Option<u64>,
}

/// What the systems promise when they answer a write (`--durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AckDurability {
    Sync,
    None,
}

impl AckDurability {
    pub(super) fn engine(self) -> roamkv_engine::Durability {
        match self {
            AckDurability::Sync => roamkv_engine::Durability::Sync,
            AckDurability::None => roamkv_engine::Durability::None,
        }
    }
}

/// A peer left out of a run, and why (not installed here, or no mode at this durability).
type Skipped = (Target, String);

/// The settings of one invocation, defaults applied.
pub(super) struct Plan {
    pub(super) targets: Vec<Target>,
    pub(super) skipped: Vec<Skipped>,
    pub(super) durability: AckDurability,
    pub(super) sizes: Vec<usize>,
    pub(super) clients: usize,
    pub(super) measured: Duration,
    pub(super) warmup: Duration,
    pub(super) repeats: usize,
    bus_backlog_events: Option<u64>,
}

/// The bus rows' default bound on the publishers' lead, in readings: well above what a
/// subscriber takes between two looks at its count (bus.rs, `TAKEN_POLL`, 25 ms: 10,000
/// readings at 400,000 a second), so that the bound does not hold back a fast subscriber.
const BUS_BACKLOG_READINGS: u64 = 40_000;

impl Plan {
    pub(super) fn from_args(args: &ServeBenchArgs) -> Result<Plan> {
        let q = args.quick;
        let named = args.engines.is_some();
        let (targets, skipped) = runnable(
            args.engines
                .clone()
                .unwrap_or_else(|| Target::all().to_vec()),
            args.durability,
            named,
        )?;
        let plan = Plan {
            targets,
            skipped,
            durability: args.durability,
            sizes: args
                .readings_per_event
                .clone()
                .unwrap_or_else(|| if q { vec![1, 100] } else { vec![1, 10, 100] }),
            clients: args.clients.unwrap_or(if q { 8 } else { 32 }),
            measured: Duration::from_secs_f64(args.seconds.unwrap_or(if q { 1.0 } else { 10.0 })),
            warmup: Duration::from_secs_f64(args.warmup_seconds.unwrap_or(if q {
                0.3
            } else {
                1.0
            })),
            repeats: args.repeats.unwrap_or(if q { 1 } else { 3 }),
            bus_backlog_events: args.bus_backlog_events,
        };
        if plan.clients == 0 || plan.repeats == 0 || plan.targets.is_empty() {
            return Err(BenchError::Usage(
                "--clients, --repeats and --engines need at least one".into(),
            ));
        }
        if plan.sizes.iter().any(|n| !(1..=10_000).contains(n)) {
            return Err(BenchError::Usage(
                "--readings-per-event values must be in 1..=10000".into(),
            ));
        }
        if plan.measured.is_zero() {
            return Err(BenchError::Usage("--seconds must be above 0".into()));
        }
        Ok(plan)
    }

    pub(super) fn durability_line(&self) -> &'static str {
        match self.durability {
            AckDurability::Sync => {
                "durability sync (InfluxDB: WAL fsync per write; QuestDB: cairo.commit.mode=sync)"
            }
            AckDurability::None => {
                "durability none (roamkv: no fdatasync; QuestDB: its default, nosync)"
            }
        }
    }

    /// How far the bus rows' publishers may run ahead of the subscriber, in events of
    /// `readings_per_event`; None: unbounded.
    pub(super) fn bus_backlog_events(&self, readings_per_event: usize) -> Option<u64> {
        match self.bus_backlog_events {
            Some(0) => None,
            Some(events) => Some(events),
            None => Some(
                (BUS_BACKLOG_READINGS / readings_per_event as u64).max(2 * self.clients as u64),
            ),
        }
    }

    pub(super) fn runs(&self, half_peak: bool) -> usize {
        let http = self.targets.iter().filter(|t| t.is_http()).count();
        self.sizes.len() * self.repeats * (self.targets.len() + if half_peak { http } else { 0 })
    }
}

/// The systems that can run here at `durability`, and the peers left out with the reason. A
/// peer named on the command line (`named`) that cannot run is an error, not a silent skip.
fn runnable(
    wanted: Vec<Target>,
    durability: AckDurability,
    named: bool,
) -> Result<(Vec<Target>, Vec<Skipped>)> {
    let mut targets = Vec::new();
    let mut skipped = Vec::new();
    for target in wanted {
        let missing = match target {
            Target::Influxdb if durability == AckDurability::None => Some(
                "InfluxDB 1.6 has no unacknowledged-durability mode (its WAL is fsync'd before \
                 every answer): it runs at --durability sync only"
                    .to_string(),
            ),
            Target::Influxdb => {
                (!peers::influxd_installed()).then(|| peers::INFLUXDB_MISSING.into())
            }
            Target::Questdb => peers::questdb_missing(),
            bus if bus.is_bus() => crate::serve::bus::missing(bus),
            _ => None,
        };
        match missing {
            Some(why) if named => {
                return Err(BenchError::Usage(format!("{}: {why}", target.name())));
            }
            Some(why) => skipped.push((target, why)),
            None => targets.push(target),
        }
    }
    Ok((targets, skipped))
}
