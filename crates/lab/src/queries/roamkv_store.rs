//! roamkv as a `SensorStore`, measured twice on the same data: while every device is still in the
//! upper tier (log + in-memory index, within its management time), and after the management time
//! has passed and `maintain()` moved every device into the lower tier (RocksDB).
//!
//! Built only with the crate feature `engine` (roamkv-engine pulls in RocksDB's C++ build); without
//! it the comparison reports SQLite alone and says so.

/// True when this build can measure roamkv.
pub const AVAILABLE: bool = cfg!(feature = "engine");

#[cfg(not(feature = "engine"))]
pub fn measure_all(
    _dir: &std::path::Path,
    _fs: &str,
    _spec: &super::sensor::SensorSpec,
    _repetitions: usize,
    _quiesce: &dyn Fn() -> Result<(), crate::LabError>,
) -> Result<Vec<super::sensor::SensorRun>, crate::LabError> {
    Ok(Vec::new())
}

#[cfg(feature = "engine")]
pub use with_engine::{RoamkvSensor, measure_all};

#[cfg(feature = "engine")]
mod with_engine {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Instant;

    use roamkv_engine::{Durability, Engine, ManualClock, Options, Record};

    use super::super::sensor::{self, SensorQuery, SensorRun, SensorSpec, SensorStore};
    use crate::LabError;

    fn engine_err(e: roamkv_engine::Error) -> LabError {
        LabError::Unsupported(format!("roamkv engine: {e}"))
    }

    /// The management time the lab gives devices; the manual clock jumps past it to migrate.
    const MANAGEMENT_TIME_MS: u64 = 60_000;
    const LOAD_BATCH_RECORDS: usize = 1_000;

    pub struct RoamkvSensor {
        pub engine: Engine,
        pub clock: Arc<ManualClock>,
        pub spec: SensorSpec,
        pub label: String,
        devices: Vec<String>,
        watched: Vec<String>,
    }

    impl RoamkvSensor {
        /// Opens an engine in `dir` and writes every reading (batched; synced once at the end).
        pub fn load(dir: &Path, spec: &SensorSpec) -> Result<RoamkvSensor, LabError> {
            let clock = Arc::new(ManualClock::new(1_000_000));
            let options = Options {
                // Loading is not what is measured: sync once at the end instead of per batch.
                durability: Durability::None,
                management_time_ms: MANAGEMENT_TIME_MS,
                background_maintenance: false,
                clock: clock.clone(),
                ..Options::default()
            };
            let engine = Engine::open(dir, options).map_err(engine_err)?;
            let devices: Vec<String> = (0..spec.devices).map(|d| spec.device(d)).collect();
            let sensors: Vec<String> = (0..spec.sensors_per_device)
                .map(|s| spec.sensor(s))
                .collect();
            let mut values: Vec<(usize, usize, usize, Vec<u8>)> =
                Vec::with_capacity(LOAD_BATCH_RECORDS);
            let flush = |values: &mut Vec<(usize, usize, usize, Vec<u8>)>| -> Result<(), LabError> {
                let records: Vec<Record<'_>> = values
                    .iter()
                    .map(|(d, s, i, v)| Record {
                        device: &devices[*d],
                        sensor: &sensors[*s],
                        ts_ns: spec.ts(*i),
                        value: v,
                    })
                    .collect();
                engine.put_batch(&records).map_err(engine_err)?;
                values.clear();
                Ok(())
            };
            // Time order across devices, as sensors report: reading i of every stream, then i+1.
            for i in 0..spec.readings_per_sensor {
                for d in 0..spec.devices {
                    for s in 0..spec.sensors_per_device {
                        values.push((d, s, i, spec.value(d, s, i)));
                        if values.len() == LOAD_BATCH_RECORDS {
                            flush(&mut values)?;
                        }
                    }
                }
            }
            flush(&mut values)?;
            let watched = spec.watched();
            Ok(RoamkvSensor {
                engine,
                clock,
                spec: *spec,
                label: "roamkv (upper tier)".into(),
                devices,
                watched,
            })
        }

        /// Lets the management time pass and moves every reading into the lower tier: half a
        /// management time seals the log's segment, one more makes it due.
        pub fn migrate_all(&mut self) -> Result<(), LabError> {
            self.clock.advance_ms(MANAGEMENT_TIME_MS);
            self.engine.maintain().map_err(engine_err)?;
            self.clock.advance_ms(MANAGEMENT_TIME_MS * 2);
            self.engine.maintain().map_err(engine_err)?;
            let stats = self.engine.stats();
            if stats.upper.devices != 0 {
                return Err(LabError::Unsupported(format!(
                    "after maintain(), {} devices are still in the upper tier",
                    stats.upper.devices
                )));
            }
            self.label = "roamkv (lower tier, RocksDB)".into();
            Ok(())
        }

        fn scan_all(&self, keep: impl Fn(&[u8]) -> bool) -> Result<u64, LabError> {
            let mut n = 0;
            for d in &self.devices {
                let readings = self
                    .engine
                    .scan(d, None, i64::MIN, i64::MAX)
                    .map_err(engine_err)?;
                n += readings.iter().filter(|r| keep(&r.value)).count() as u64;
            }
            Ok(n)
        }
    }

    impl SensorStore for RoamkvSensor {
        fn name(&self) -> String {
            self.label.clone()
        }
        fn answer(&self, q: &SensorQuery) -> Result<u64, LabError> {
            match q {
                SensorQuery::Point { device, sensor, ts } => Ok(u64::from(
                    self.engine
                        .get(device, sensor, *ts)
                        .map_err(engine_err)?
                        .is_some(),
                )),
                SensorQuery::Range {
                    device,
                    sensor,
                    from,
                    to,
                } => Ok(self
                    .engine
                    .scan(device, Some(sensor), *from, *to)
                    .map_err(engine_err)?
                    .len() as u64),
                SensorQuery::Set { first } => self.scan_all(|v| v.first() == Some(first)),
                SensorQuery::Multi {
                    first,
                    second_below,
                } => self.scan_all(|v| {
                    v.first() == Some(first) && v.get(1).is_some_and(|b| b < second_below)
                }),
                SensorQuery::Join { sensor, from, to } => {
                    let mut n = 0;
                    for d in &self.watched {
                        n += self
                            .engine
                            .scan(d, Some(sensor), *from, *to)
                            .map_err(engine_err)?
                            .len() as u64;
                    }
                    Ok(n)
                }
            }
        }
    }

    pub fn measure_all(
        dir: &Path,
        fs: &str,
        spec: &SensorSpec,
        repetitions: usize,
        quiesce: &dyn Fn() -> Result<(), LabError>,
    ) -> Result<Vec<SensorRun>, LabError> {
        let t = Instant::now();
        let mut store = RoamkvSensor::load(&dir.join("roamkv"), spec)?;
        let load_s = t.elapsed().as_secs_f64();
        quiesce()?;
        let mut runs = sensor::measure(&store, fs, spec, repetitions, load_s)?;
        store.migrate_all()?;
        quiesce()?;
        runs.extend(sensor::measure(&store, fs, spec, repetitions, load_s)?);
        store.engine.close().map_err(engine_err)?;
        Ok(runs)
    }
}
