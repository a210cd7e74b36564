//! The sensor comparison: the same readings loaded into SQLite and (when this build has the
//! engine) into roamkv, the same queries asked of each, and a check that they agree. Kept apart
//! from `sensor` (the SQLite side and the shared query model) so that `roamkv_store` can build on
//! `sensor` without `sensor` depending back on it.

use std::path::Path;
use std::time::Instant;

use super::roamkv_store;
use super::sensor::{self, SensorRun, SensorSpec, SqliteSensor};
use crate::LabError;

/// Loads the readings into each available store under `dir` and measures them; checks that every
/// store returned the same number of rows for each query type.
pub fn compare(
    dir: &Path,
    fs: &str,
    spec: &SensorSpec,
    repetitions: usize,
    quiesce: &dyn Fn() -> Result<(), LabError>,
) -> Result<Vec<SensorRun>, LabError> {
    let mut runs = Vec::new();
    let t = Instant::now();
    let sqlite = SqliteSensor::load(dir, spec)?;
    let load_s = t.elapsed().as_secs_f64();
    quiesce()?;
    runs.extend(sensor::measure(&sqlite, fs, spec, repetitions, load_s)?);
    drop(sqlite);
    runs.extend(roamkv_store::measure_all(
        dir,
        fs,
        spec,
        repetitions,
        quiesce,
    )?);
    sensor::check_agreement(&runs)?;
    Ok(runs)
}
