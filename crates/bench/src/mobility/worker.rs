//! The measured process: one engine, N writer threads running the workload for a fixed time,
//! then read checks. Runs as a child (`roamkv bench worker`) so that it can be placed in a
//! memory cgroup before it opens the engine and so that its peak RSS is its own.

use roamkv_testbed::command::process_cpu_seconds;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::{BenchError, Result};
use crate::mobility::engines::{self, BenchEngine, EngineConfig, Put};
use crate::mobility::workload::{
    Generator, Op, ValuePool, WorkloadConfig, sensor_name, user_bytes,
};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkerSpec {
    pub engine: EngineConfig,
    pub workload: WorkloadConfig,
    pub threads: usize,
    /// Unmeasured warm-up before the measured phase (same workload, continued).
    pub warmup_ms: u64,
    pub duration_ms: u64,
    pub dir: PathBuf,
    /// Block device holding `dir` (e.g. "loop3"): its counters are read when measuring starts.
    pub device_name: Option<String>,
    /// Print a progress line (`Tick`, JSON) every this many ms (the long-run bench's time series).
    #[serde(default)]
    pub tick_ms: Option<u64>,
}

/// One line of the worker's time series: cumulative counters at `t_s` since the start.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Tick {
    pub t_s: f64,
    /// "warmup" or "measure".
    pub phase: String,
    pub puts: u64,
    pub queries: u64,
    pub user_bytes: u64,
    /// Bytes written for devices that have not departed (what a correct engine must keep).
    pub live_user_bytes: u64,
    pub rss_bytes: u64,
    /// The engine's own view (roamkv: tiers, log vs budget, backlog; RocksDB: compaction debt).
    pub engine: serde_json::Value,
}

/// Counters the writer threads share with the tick printer.
#[derive(Default)]
struct Progress {
    puts: AtomicU64,
    queries: AtomicU64,
    user_bytes: AtomicU64,
    live_user_bytes: AtomicI64,
    measuring: AtomicBool,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct WorkerResult {
    pub puts: u64,
    pub queries: u64,
    pub departures: u64,
    pub user_bytes: u64,
    pub elapsed_s: f64,
    /// Latency of one put batch (all its readings acknowledged), in µs.
    pub put_p50_us: u64,
    pub put_p99_us: u64,
    pub put_p999_us: u64,
    pub query_p99_us: u64,
    #[serde(default)]
    pub query_p50_us: u64,
    pub peak_rss_bytes: u64,
    pub read_checks: u64,
    pub read_check_failures: u64,
    pub first_failure: Option<String>,
    /// The device's counters when the measured phase began (after the warm-up and a syncfs):
    /// (writes, sectors written, flushes).
    pub device_at_measure_start: Option<(u64, u64, u64)>,
    /// Sectors the device had read when the measured phase began.
    #[serde(default)]
    pub device_sectors_read_at_measure_start: Option<u64>,
    /// CPU time of the whole worker process (every thread: writers, the engine's own threads,
    /// RocksDB's compactions) over the measured phase, user + system, in seconds.
    #[serde(default)]
    pub cpu_seconds: f64,
}

/// A reading remembered for the read check: (device, sensor, ts, still present?).
type Sample = (String, u32, i64, bool);

/// Readings each thread remembers for the read check at the end.
const CHECK_SAMPLE: usize = 64;

struct ThreadOutcome {
    puts: u64,
    queries: u64,
    departures: u64,
    user_bytes: u64,
    put_latency: Histogram<u64>,
    query_latency: Histogram<u64>,
    /// (device, sensor, ts, still present?)
    samples: Vec<(String, u32, i64, bool)>,
}

impl Default for ThreadOutcome {
    fn default() -> Self {
        ThreadOutcome {
            puts: 0,
            queries: 0,
            departures: 0,
            user_bytes: 0,
            put_latency: histogram(),
            query_latency: histogram(),
            samples: Vec::new(),
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Waits for "go" on stdin (the parent puts us in the cgroup first), runs, prints JSON.
pub fn main(spec_json: &str) -> Result<()> {
    let spec: WorkerSpec =
        serde_json::from_str(spec_json).map_err(|e| BenchError::step("bad worker spec", e))?;
    // The worker dies with its parent: a bench stopped by Ctrl-C or kill must not leave a worker
    // writing into the file system it is unmounting (one ran on for minutes, orphaned). If the
    // parent is gone already, the read of "go" below finds stdin closed and the worker stops.
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and no pointers.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| BenchError::os("worker: reading stdin", e))?;
    if line.trim() != "go" {
        return Err(BenchError::Run("worker: expected \"go\" on stdin".into()));
    }
    let result = run(&spec)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

pub fn run(spec: &WorkerSpec) -> Result<WorkerResult> {
    std::fs::create_dir_all(&spec.dir).map_err(|e| BenchError::io("creating", &spec.dir, e))?;
    let engine = engines::open(&spec.engine, &spec.dir)?;
    let pool = ValuePool::new(spec.workload.value_bytes, spec.workload.seed);
    // One clock for device lifetimes across both phases.
    let epoch = Instant::now();
    let mut generators: Vec<Generator> = (0..spec.threads)
        .map(|t| Generator::new(&spec.workload, t, 0))
        .collect();
    let progress = Progress::default();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        if let Some(tick_ms) = spec.tick_ms {
            let (engine, progress, done) = (&*engine, &progress, &done);
            s.spawn(move || print_ticks(engine, progress, done, epoch, tick_ms));
        }
        let outcome = run_phases(spec, &*engine, &pool, &mut generators, epoch, &progress);
        done.store(true, Ordering::Relaxed);
        outcome
    })
    .and_then(|result| finish(engine, &pool, result))
}

/// Prints a `Tick` line every `tick_ms` until `done`.
fn print_ticks(
    engine: &dyn BenchEngine,
    progress: &Progress,
    done: &AtomicBool,
    epoch: Instant,
    tick_ms: u64,
) {
    let mut next = Instant::now();
    while !done.load(Ordering::Relaxed) {
        next += Duration::from_millis(tick_ms);
        while Instant::now() < next && !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10).min(next - Instant::now()));
        }
        let tick = Tick {
            t_s: epoch.elapsed().as_secs_f64(),
            phase: if progress.measuring.load(Ordering::Relaxed) {
                "measure"
            } else {
                "warmup"
            }
            .into(),
            puts: progress.puts.load(Ordering::Relaxed),
            queries: progress.queries.load(Ordering::Relaxed),
            user_bytes: progress.user_bytes.load(Ordering::Relaxed),
            live_user_bytes: progress.live_user_bytes.load(Ordering::Relaxed).max(0) as u64,
            rss_bytes: rss_bytes(),
            engine: engine.sample(),
        };
        if let Ok(line) = serde_json::to_string(&tick) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "TICK {line}");
            let _ = out.flush();
        }
    }
}

/// The warm-up and the measured phase; returns the measured phase's result (without the
/// read checks).
fn run_phases(
    spec: &WorkerSpec,
    engine: &dyn BenchEngine,
    pool: &ValuePool,
    generators: &mut [Generator],
    epoch: Instant,
    progress: &Progress,
) -> Result<(WorkerResult, Vec<Sample>)> {
    if spec.warmup_ms > 0 {
        let deadline = Instant::now() + Duration::from_millis(spec.warmup_ms);
        for outcome in run_phase(engine, pool, generators, epoch, deadline, progress) {
            outcome?;
        }
    }
    let device_at_measure_start = match &spec.device_name {
        Some(name) => {
            sync_file_system(&spec.dir)?;
            Some(roamkv_testbed::devstat::DevStat::read(name)?)
        }
        None => None,
    };
    progress.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let cpu_at_start = process_cpu_seconds("/proc/self/stat");
    let deadline = started + Duration::from_millis(spec.duration_ms);
    let outcomes = run_phase(engine, pool, generators, epoch, deadline, progress);
    let elapsed_s = started.elapsed().as_secs_f64();
    let cpu_at_end = process_cpu_seconds("/proc/self/stat");
    let mut result = WorkerResult {
        elapsed_s,
        cpu_seconds: (cpu_at_end - cpu_at_start).max(0.0),
        device_at_measure_start: device_at_measure_start
            .map(|s| (s.writes, s.sectors_written, s.flushes)),
        device_sectors_read_at_measure_start: device_at_measure_start.map(|s| s.sectors_read),
        ..WorkerResult::default()
    };
    let mut put_latency = histogram();
    let mut query_latency = histogram();
    let mut samples = Vec::new();
    for outcome in outcomes {
        let o = outcome?;
        result.puts += o.puts;
        result.queries += o.queries;
        result.departures += o.departures;
        result.user_bytes += o.user_bytes;
        put_latency
            .add(&o.put_latency)
            .map_err(|e| BenchError::Run(e.to_string()))?;
        query_latency
            .add(&o.query_latency)
            .map_err(|e| BenchError::Run(e.to_string()))?;
        samples.extend(o.samples);
    }
    result.put_p50_us = put_latency.value_at_quantile(0.5);
    result.put_p99_us = put_latency.value_at_quantile(0.99);
    result.put_p999_us = put_latency.value_at_quantile(0.999);
    result.query_p99_us = query_latency.value_at_quantile(0.99);
    result.query_p50_us = query_latency.value_at_quantile(0.5);
    Ok((result, samples))
}

/// Read checks, close, peak RSS.
fn finish(
    engine: Box<dyn BenchEngine>,
    pool: &ValuePool,
    (mut result, samples): (WorkerResult, Vec<Sample>),
) -> Result<WorkerResult> {
    // Read checks: readings of devices still present must read back exactly; readings of
    // departed devices must be gone.
    for (device, sensor, ts, present) in &samples {
        result.read_checks += 1;
        let got = engine.get(device, &sensor_name(*sensor), *ts)?;
        let ok = match (present, &got) {
            (true, Some(v)) => v.as_slice() == pool.value_for(device, *sensor, *ts),
            (false, None) => true,
            _ => false,
        };
        if !ok {
            result.read_check_failures += 1;
            result.first_failure.get_or_insert_with(|| {
                format!(
                    "{device}/{}/{ts}: expected {}, got {:?}",
                    sensor_name(*sensor),
                    if *present { "its value" } else { "nothing" },
                    got.map(|v| v.len())
                )
            });
        }
    }
    engine.close()?;
    result.peak_rss_bytes = peak_rss_bytes();
    Ok(result)
}

fn run_phase(
    engine: &dyn BenchEngine,
    pool: &ValuePool,
    generators: &mut [Generator],
    epoch: Instant,
    deadline: Instant,
    progress: &Progress,
) -> Vec<Result<ThreadOutcome>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = generators
            .iter_mut()
            .map(|generator| {
                s.spawn(move || writer(generator, engine, pool, epoch, deadline, progress))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Run("writer thread panicked".into())))
            })
            .collect()
    })
}

/// syncfs(2) on the file system holding `dir`, so the warm-up's dirty data is not billed to the
/// measured phase.
fn sync_file_system(dir: &std::path::Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let d = std::fs::File::open(dir).map_err(|e| BenchError::io("opening", dir, e))?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(BenchError::io("syncfs", dir, e));
    }
    Ok(())
}

/// One writer thread: runs the generator's operations until the deadline. The accounting of a
/// put lives in `count_puts`.
///
/// Long because: it is the measured loop, whose three arms (put, query, depart) share the
/// thread's read-check samples and per-slot byte counts.
fn writer(
    generator: &mut Generator,
    engine: &dyn BenchEngine,
    pool: &ValuePool,
    epoch: Instant,
    deadline: Instant,
    progress: &Progress,
) -> Result<ThreadOutcome> {
    let now_ms = || epoch.elapsed().as_millis() as u64;
    // User bytes written per device slot since the device arrived: live until it departs.
    let mut slot_bytes = vec![0u64; generator.slots()];
    let sensors: Vec<String> = (0..crate::mobility::workload::SENSORS_PER_DEVICE)
        .map(sensor_name)
        .collect();
    let mut out = ThreadOutcome::default();
    let mut recent: std::collections::VecDeque<(usize, String, u32, i64)> = Default::default();
    let mut departed: Vec<(String, u32, i64)> = Vec::new();
    while Instant::now() < deadline {
        match generator.next(now_ms()) {
            Op::Put(batch) => {
                let puts: Vec<Put<'_>> = batch
                    .iter()
                    .map(|&(slot, sensor, ts_ms)| {
                        let device = generator.device_name(slot);
                        Put {
                            device,
                            sensor: &sensors[sensor as usize],
                            ts_ms,
                            value: pool.value_for(device, sensor, ts_ms),
                        }
                    })
                    .collect();
                let t = Instant::now();
                engine.put_batch(&puts)?;
                out.put_latency
                    .saturating_record(t.elapsed().as_micros() as u64);
                count_puts(&mut out, progress, &mut slot_bytes, &puts, &batch);
                if let Some(&(slot, sensor, ts)) = batch.last() {
                    recent.push_back((slot, generator.device_name(slot).to_string(), sensor, ts));
                    if recent.len() > CHECK_SAMPLE {
                        recent.pop_front();
                    }
                }
            }
            Op::Query {
                slot,
                sensor,
                from_ms,
                to_ms,
            } => {
                let t = Instant::now();
                engine.query(
                    generator.device_name(slot),
                    &sensors[sensor as usize],
                    from_ms,
                    to_ms,
                )?;
                out.query_latency
                    .saturating_record(t.elapsed().as_micros() as u64);
                out.queries += 1;
                progress.queries.fetch_add(1, Ordering::Relaxed);
            }
            Op::Depart { slot } => {
                let name = generator.device_name(slot).to_string();
                engine.depart(&name)?;
                out.departures += 1;
                progress.live_user_bytes.fetch_sub(
                    std::mem::take(&mut slot_bytes[slot]) as i64,
                    Ordering::Relaxed,
                );
                if departed.len() < CHECK_SAMPLE / 4
                    && let Some((_, _, sensor, ts)) =
                        recent.iter().find(|(s, n, _, _)| *s == slot && *n == name)
                {
                    departed.push((name.clone(), *sensor, *ts));
                }
                recent.retain(|(_, n, _, _)| *n != name);
                generator.replace(slot, now_ms());
            }
        }
    }
    out.samples.extend(
        recent
            .into_iter()
            .map(|(_, name, sensor, ts)| (name, sensor, ts, true)),
    );
    out.samples.extend(
        departed
            .into_iter()
            .map(|(name, sensor, ts)| (name, sensor, ts, false)),
    );
    Ok(out)
}

/// Counts an acknowledged batch: in the thread's outcome, in the shared progress, and in the
/// user bytes of each device slot (live until the device departs).
fn count_puts(
    out: &mut ThreadOutcome,
    progress: &Progress,
    slot_bytes: &mut [u64],
    puts: &[Put<'_>],
    batch: &[(usize, u32, i64)],
) {
    out.puts += puts.len() as u64;
    let mut batch_bytes = 0;
    for (p, &(slot, _, _)) in puts.iter().zip(batch) {
        let bytes = user_bytes(p.device, p.sensor, p.value.len());
        slot_bytes[slot] += bytes;
        batch_bytes += bytes;
    }
    out.user_bytes += batch_bytes;
    progress
        .puts
        .fetch_add(puts.len() as u64, Ordering::Relaxed);
    progress
        .user_bytes
        .fetch_add(batch_bytes, Ordering::Relaxed);
    progress
        .live_user_bytes
        .fetch_add(batch_bytes as i64, Ordering::Relaxed);
}

/// VmHWM of this process, from /proc/self/status.
fn peak_rss_bytes() -> u64 {
    proc_status_bytes("VmHWM:")
}

/// VmRSS of this process.
fn rss_bytes() -> u64 {
    proc_status_bytes("VmRSS:")
}

fn proc_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
