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
    /// Systems, comma-separated: roamkv, roamkv-binary, influxdb, questdb, engine [default:
    /// all; a peer that cannot run here is left out with a line saying why].
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
}

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
