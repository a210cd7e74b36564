//! Watching the sink of a running `roamkv serve` through `GET /api/roamkv/v1/sink`: its rows
//! committed, caught up, its lag below a bound, its lag sampled over a phase. Both clouds'
//! phases (PostgreSQL, Kafka) read the sink the same way, so their figures compare.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::serve::targets::sink_view;

/// Events' origins of each phase in their own range: every reading is a new key.
pub fn phase_base_ms(phase: i64) -> i64 {
    1_700_000_000_000 + phase * 1_000_000_000
}

pub fn rows_total(addr: SocketAddr) -> Result<u64> {
    Ok(sink_view(addr)?["sink"]["rows_total"].as_u64().unwrap_or(0))
}

/// Waits until the sink committed more than `before` rows; returns how long that took.
pub fn wait_for_rows_above(addr: SocketAddr, before: u64, within: Duration) -> Result<Duration> {
    let started = Instant::now();
    while rows_total(addr)? <= before {
        if started.elapsed() > within {
            return Err(BenchError::Run(format!(
                "the sink committed nothing within {within:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(started.elapsed())
}

/// Waits until the sink is tailing with nothing behind, and its lag sampler has seen so (the
/// next phase's first lag sample is then its own, not the drain's last; at most one sampling
/// interval, 100 ms, later).
pub fn wait_caught_up(addr: SocketAddr, within: Duration) -> Result<Duration> {
    let started = Instant::now();
    loop {
        let view = sink_view(addr)?;
        if view["sink"]["state"] == "tailing"
            && view["lag_bytes"] == 0
            && view["sink"]["lag_seconds"].as_f64() == Some(0.0)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            return Err(BenchError::Run(format!(
                "the sink did not catch up within {within:?}: {view}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the sink's lag is below `seconds` (with ingest going on it never reaches 0).
pub fn wait_lag_below(addr: SocketAddr, seconds: f64, within: Duration) -> Result<Duration> {
    let started = Instant::now();
    loop {
        let view = sink_view(addr)?;
        let tailing = view["sink"]["state"] == "tailing";
        if tailing
            && view["sink"]["lag_seconds"]
                .as_f64()
                .is_some_and(|l| l < seconds)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            return Err(BenchError::Run(format!(
                "the sink did not catch up within {within:?}: {view}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Samples the sink's lag in seconds every 100 ms on a thread of its own.
pub struct LagSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(f64, f64)>>,
}

impl LagSampler {
    pub fn start(addr: SocketAddr) -> LagSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok(view) = sink_view(addr) {
                    let lag = view["sink"]["lag_seconds"].as_f64().unwrap_or(0.0);
                    samples.push((started.elapsed().as_secs_f64(), lag));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            samples
        });
        LagSampler { stop, thread }
    }

    pub fn stop(self) -> Vec<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// p50, p99 and max of the lag `samples` (seconds since the phase began, lag seconds); zeros
/// without samples.
pub fn lag_percentiles(samples: &[(f64, f64)]) -> (f64, f64, f64) {
    let mut lags: Vec<f64> = samples.iter().map(|s| s.1).collect();
    lags.sort_by(f64::total_cmp);
    let at = |p: f64| {
        lags.get(((lags.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    (at(0.5), at(0.99), lags.last().copied().unwrap_or(0.0))
}
