//! The transfer phases of `roamkv bench handoff`, over the shaped link between the edges' namespaces
//! (through the delay relay):
//!
//! - **bulk** (first): one device of `--bulk-mib` MiB handed over: MB/s of readings moved, as a
//!   share of the payload rate one TCP stream gets through the same path (the link probe), and
//!   what A's block device wrote meanwhile (a handoff writes at A only its record files and one
//!   DEPART) as a share of the bytes moved;
//! - **latency**: a device of `--readings` readings of `--value-bytes` (still in the upper tier:
//!   written just before) handed from A to B, `--latency-handoffs` times; from the request to A's
//!   record `done`: p50, p99, max;
//!
//! Every handoff is checked: B holds each reading A held, once, and A none.

use std::time::{Duration, Instant};

use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::stats::percentile;

use super::edge::NetEdge;
use crate::error::{BenchError, Result};

#[derive(Debug, Default, serde::Serialize)]
pub struct TransferResults {
    pub latency_ms: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Bytes of one latency-phase device (values and keys: device, sensor, ts).
    pub latency_device_bytes: u64,
    /// The link probe: bytes/s one TCP stream carried from A's namespace to B's, through the relay.
    pub link_payload_bytes_per_sec: f64,
    pub bulk_readings: u64,
    pub bulk_bytes: u64,
    pub bulk_seconds: f64,
    pub bulk_mb_per_sec: f64,
    /// The bulk rate as a share of the link probe's.
    pub bulk_link_share: f64,
    /// Bytes A's block device wrote during the bulk handoff, and as a share of the bytes moved.
    pub bulk_sender_device_bytes: u64,
    pub bulk_sender_write_share: f64,
    /// CPU seconds of A and B during the bulk handoff.
    pub bulk_sender_cpu_s: f64,
    pub bulk_receiver_cpu_s: f64,
}

/// The bulk phase's device.
pub const BULK_DEVICE: &str = "truck";

/// The bytes a reading of `device` carries: its value, its sensor `s0`..`s7`, its ts, its device.
fn reading_bytes(device: &str, value_bytes: usize) -> u64 {
    (value_bytes + 2 + 8 + device.len()) as u64
}

/// Writes `n` readings of `device` at `edge` (batches of 1,000 native JSON lines).
fn write(edge: &NetEdge, device: &str, n: usize, value_bytes: usize) -> Result<()> {
    let value = "v".repeat(value_bytes);
    for start in (0..n).step_by(1_000) {
        let body: String = (start..(start + 1_000).min(n))
            .map(|i| {
                format!(
                    "{{\"device\":\"{device}\",\"sensor\":\"s{}\",\"ts_ns\":{i},\"value\":\"{value}\"}}\n",
                    i % 8
                )
            })
            .collect();
        let (status, answer) = edge.call("POST", "/readings", Some(body))?;
        if status != 201 {
            return Err(BenchError::HttpStatus {
                request: format!("writing {device}"),
                status,
                body: answer.to_string(),
            });
        }
    }
    Ok(())
}

/// Hands `device` from `a` to `to_url` and waits for A's record to be done; how long it took.
pub fn hand_and_wait(
    a: &NetEdge,
    to_url: &str,
    device: &str,
    within: Duration,
) -> Result<Duration> {
    let started = Instant::now();
    let id = a.hand(device, to_url)?;
    loop {
        let record = a.record(&id)?;
        match record["state"].as_str() {
            Some("done") => return Ok(started.elapsed()),
            Some("aborted") => return Err(BenchError::Run(format!("handoff {id} was called off"))),
            _ => {}
        }
        if started.elapsed() > within {
            return Err(BenchError::Run(format!(
                "handoff {id} not done after {} s: {record}",
                within.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// B holds `n` readings of `device`, A none.
fn check_moved(a: &NetEdge, b: &NetEdge, device: &str, n: usize) -> Result<()> {
    let (at_b, repeated) = b.readings(device)?;
    let (at_a, _) = a.readings(device)?;
    if at_b.len() != n || repeated != 0 || !at_a.is_empty() {
        return Err(BenchError::Check(format!(
            "{device}: B holds {} readings of {n} ({repeated} repeated), A {}",
            at_b.len(),
            at_a.len()
        )));
    }
    Ok(())
}

/// The latency phase: `handoffs` devices of `readings` readings, each handed A -> B.
pub fn latency(
    a: &NetEdge,
    b: &NetEdge,
    b_via: &str,
    handoffs: usize,
    readings: usize,
    value_bytes: usize,
    r: &mut TransferResults,
) -> Result<()> {
    for i in 0..handoffs {
        let device = format!("car-{i}");
        write(a, &device, readings, value_bytes)?;
        let took = hand_and_wait(a, b_via, &device, Duration::from_secs(600))?;
        check_moved(a, b, &device, readings)?;
        r.latency_ms.push(took.as_secs_f64() * 1e3);
        r.latency_device_bytes = readings as u64 * reading_bytes(&device, value_bytes);
    }
    let mut sorted = r.latency_ms.clone();
    sorted.sort_by(f64::total_cmp);
    r.p50_ms = percentile(&sorted, 50.0);
    r.p99_ms = percentile(&sorted, 99.0);
    r.max_ms = sorted.last().copied().unwrap_or(0.0);
    println!(
        "latency: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {handoffs} handoffs of {readings} readings ({:.2} MB each)",
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
        r.latency_device_bytes as f64 / 1e6
    );
    Ok(())
}

/// The bulk phase: one device of `mib` MiB of values handed A -> B.
pub fn bulk(
    a: &NetEdge,
    b: &NetEdge,
    b_via: &str,
    mib: u64,
    value_bytes: usize,
    r: &mut TransferResults,
) -> Result<()> {
    let readings = (mib << 20) as usize / value_bytes;
    let device = BULK_DEVICE;
    write(a, device, readings, value_bytes)?;
    a.fixture().quiesce()?;
    let before = DevStat::read(a.fixture().device_name())?;
    let (cpu_a, cpu_b) = (a.cpu_seconds(), b.cpu_seconds());
    let took = hand_and_wait(a, b_via, device, Duration::from_secs(3_600))?;
    let (cpu_a, cpu_b) = (a.cpu_seconds() - cpu_a, b.cpu_seconds() - cpu_b);
    a.fixture().quiesce()?;
    let after = DevStat::read(a.fixture().device_name())?;
    check_moved(a, b, device, readings)?;
    r.bulk_readings = readings as u64;
    r.bulk_bytes = readings as u64 * reading_bytes(device, value_bytes);
    r.bulk_seconds = took.as_secs_f64();
    r.bulk_mb_per_sec = r.bulk_bytes as f64 / 1e6 / r.bulk_seconds.max(1e-9);
    r.bulk_link_share = r.bulk_mb_per_sec * 1e6 / r.link_payload_bytes_per_sec.max(1.0);
    r.bulk_sender_device_bytes = after.delta(&before).bytes_written();
    r.bulk_sender_write_share = r.bulk_sender_device_bytes as f64 / r.bulk_bytes.max(1) as f64;
    r.bulk_sender_cpu_s = cpu_a;
    r.bulk_receiver_cpu_s = cpu_b;
    println!(
        "bulk: {} readings ({:.0} MB) in {:.1} s: {:.2} MB/s = {:.0} % of the link's {:.2} MB/s; A's device wrote {:.3} % of the bytes moved; CPU A {:.1} s, B {:.1} s",
        r.bulk_readings,
        r.bulk_bytes as f64 / 1e6,
        r.bulk_seconds,
        r.bulk_mb_per_sec,
        r.bulk_link_share * 100.0,
        r.link_payload_bytes_per_sec / 1e6,
        r.bulk_sender_write_share * 100.0,
        cpu_a,
        cpu_b
    );
    Ok(())
}
