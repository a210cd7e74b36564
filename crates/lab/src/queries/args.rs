//! The command line of `roamkv lab queries` (`QueriesArgs`), resolved and checked into the
//! configuration of a run (`QueriesConfig`), and the cache states a query is timed in (`Cache`).
use super::{schema, sensor};
use crate::LabError;
use roamkv_testbed::fixture::{self, FsSpec};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct QueriesArgs {
    /// Small tables (20,000 rows) and few repetitions: a run of a few minutes.
    #[arg(long)]
    pub quick: bool,
    /// File systems, comma-separated ("all" for every one the lab knows). Default: xfs,ext4
    /// (paper 000 also had FAT, which this host kernel cannot mount).
    #[arg(long)]
    pub fs: Option<String>,
    /// Rows of each table (paper 000: 1,000,000).
    #[arg(long)]
    pub rows: Option<usize>,
    /// Timed repetitions per query with a warm cache (paper 000: 100).
    #[arg(long)]
    pub repetitions: Option<usize>,
    /// Timed repetitions per query with a cold cache (caches dropped and the database reopened
    /// before each one). Default: same as --repetitions.
    #[arg(long)]
    pub cold_repetitions: Option<usize>,
    /// Cache states: cold, warm, or both (comma-separated).
    #[arg(long, default_value = "warm,cold")]
    pub cache: String,
    /// Skip the sensor-data comparison (roamkv vs SQLite).
    #[arg(long)]
    pub no_sensor: bool,
    /// Sensor comparison: devices x 4 sensors x readings per sensor.
    #[arg(long)]
    pub sensor_devices: Option<usize>,
    #[arg(long)]
    pub sensor_readings: Option<usize>,
    /// Seed of the table generator and query parameters.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output directory for results.json and report.html.
    #[arg(long, default_value = "lab-results/queries")]
    pub out: PathBuf,
}

/// Cache state of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cache {
    /// Page cache dropped (echo 3 > drop_caches) and SQLite reopened before every repetition.
    Cold,
    /// Same connection; one untimed run of the query first.
    Warm,
}

impl Cache {
    pub fn name(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::Warm => "warm",
        }
    }
    pub fn parse_list(s: &str) -> Result<Vec<Cache>, LabError> {
        let mut out = Vec::new();
        for part in s
            .split(',')
            .map(|p| p.trim().to_ascii_lowercase())
            .filter(|p| !p.is_empty())
        {
            let c = match part.as_str() {
                "cold" => Cache::Cold,
                "warm" => Cache::Warm,
                other => {
                    return Err(LabError::Parse {
                        what: "cache state".into(),
                        detail: format!("{other:?}; valid: cold, warm"),
                    });
                }
            };
            if !out.contains(&c) {
                out.push(c);
            }
        }
        if out.is_empty() {
            return Err(LabError::Parse {
                what: "cache state".into(),
                detail: "empty; valid: cold, warm".into(),
            });
        }
        Ok(out)
    }
}

/// The resolved configuration of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueriesConfig {
    pub fs: Vec<FsSpec>,
    pub rows: usize,
    pub owner_rows: usize,
    pub warm_repetitions: usize,
    pub cold_repetitions: usize,
    pub caches: Vec<Cache>,
    pub duplicate_fraction: f64,
    pub seed: u64,
    pub sensor: Option<sensor::SensorSpec>,
}

impl QueriesArgs {
    pub fn resolve(&self) -> Result<QueriesConfig, LabError> {
        let fs = fixture::parse_fs_list(self.fs.as_deref().unwrap_or("xfs,ext4"))?;
        let rows = self
            .rows
            .unwrap_or(if self.quick { 20_000 } else { 1_000_000 });
        let warm = self
            .repetitions
            .unwrap_or(if self.quick { 10 } else { 100 });
        let cold = self
            .cold_repetitions
            .unwrap_or(if self.quick { 5 } else { warm });
        if rows < 100 || warm == 0 {
            return Err(LabError::Parse {
                what: "--rows/--repetitions".into(),
                detail: "need at least 100 rows and 1 repetition".into(),
            });
        }
        let sensor = (!self.no_sensor).then(|| sensor::SensorSpec {
            devices: self
                .sensor_devices
                .unwrap_or(if self.quick { 20 } else { 100 }),
            sensors_per_device: 4,
            readings_per_sensor: self.sensor_readings.unwrap_or(if self.quick {
                250
            } else {
                1_000
            }),
            value_bytes: 16,
            seed: self.seed,
        });
        Ok(QueriesConfig {
            fs,
            rows,
            owner_rows: rows,
            warm_repetitions: warm,
            cold_repetitions: cold,
            caches: Cache::parse_list(&self.cache)?,
            duplicate_fraction: schema::DUPLICATE_FRACTION_DEFAULT,
            seed: self.seed,
            sensor,
        })
    }
}
