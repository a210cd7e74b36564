//! The message bus rows of `roamkv bench serve`: EdgeX events published as device services
//! publish them, through a real mosquitto, into `roamkv serve --mqtt-broker`, and the same
//! messages into mosquitto's own subscriber (`mosquitto_sub`, which writes nothing): that
//! path's ceiling.
//!
//! Each client is one publisher (its own MQTT connection and device), sending device-sdk-go
//! v4's form: an AddEventRequest (the HTTP rows' very JSON) as the object payload of a
//! go-mod-messaging `MessageEnvelope`, on `edgex/events/device/{service}/{profile}/{device}/
//! {source}`. A publisher sends its next event once the last is sent (QoS 0: written to the
//! socket) or acknowledged by the broker (QoS 1: PUBACK), as go-mod-messaging's Publish
//! returns, and all of them together stay at most `--bus-backlog-events` ahead of what the
//! subscriber has taken (publisher.rs, `Backlog`: the bus's closed loop). The broker's
//! acknowledgement says nothing of the subscriber, so the rate is not the publishers': it is
//! what the subscriber took in the measured window (roamkv's counter of readings written from
//! MQTT; the bytes mosquitto_sub printed). After the window the publishers stop, the
//! subscriber is waited for until it has every message (the drain time is reported), and
//! roamkv is stopped and its data directory counted, as the HTTP rows are: stored must equal
//! what the broker took.
//!
//! The broker runs with mosquitto's defaults but for `max_queued_messages 0`: a subscriber
//! that falls behind is queued for, not dropped from (the default drops after 1,000 queued
//! messages, which would make the check fail rather than the rate show it).

mod publisher;
mod subscriber;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roamkv_testbed::command::process_cpu_seconds;
use roamkv_testbed::mosquitto::Mosquitto;
use rumqttc::QoS;

use crate::error::{BenchError, Result};
use crate::serve::results::{ServeRun, ServeSummary};
use crate::serve::targets::Target;
use publisher::{Backlog, Published, publish};
use roamkv_engine::Durability;
use subscriber::Subscriber;

/// A subscriber that takes nothing more for this long after the publishers stopped is
/// given up on: the check then says what it lacks.
const DRAIN_STALL: Duration = Duration::from_secs(30);
/// How often the publishers' backlog learns what the subscriber has taken. For roamkv each
/// look is a GET of /metrics, ~0.55 ms of its CPU (200 scrapes took 110 ms on the project's
/// machine): 2 % of a core at this period, counted in its CPU per reading.
const TAKEN_POLL: Duration = Duration::from_millis(25);

/// What is missing here for `target`, if anything.
pub fn missing(target: Target) -> Option<String> {
    let tools: &[&str] = match target {
        Target::MosquittoQos0 | Target::MosquittoQos1 => &["mosquitto", "mosquitto_sub"],
        _ => &["mosquitto"],
    };
    let found = |tool: &str| {
        ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
            .iter()
            .any(|dir| Path::new(dir).join(tool).exists())
    };
    tools.iter().find(|t| !found(t)).map(|tool| {
        format!("{tool} is not installed (Debian: apt-get install mosquitto mosquitto-clients)")
    })
}

/// What a bus run takes of the invocation's plan (plan.rs, which names this module's checks:
/// the plan is passed in pieces so that neither imports the other).
pub(super) struct BusPlan {
    pub(super) clients: usize,
    pub(super) warmup: Duration,
    pub(super) measured: Duration,
    pub(super) durability: Durability,
    /// `Backlog`'s bound for this run's event size; None: unbounded.
    pub(super) backlog_events: Option<u64>,
}

/// One run of a bus row: a fresh broker and subscriber (roamkv on a fresh data directory
/// under `work_dir`, or mosquitto_sub), `plan.clients` publishers for the warm-up and the
/// measured window, then the drain and the count.
pub(super) fn run(
    plan: &BusPlan,
    work_dir: &Path,
    target: Target,
    size: usize,
    repeat: usize,
    base_ms: i64,
) -> Result<ServeRun> {
    let qos = target.bus_qos().unwrap_or(QoS::AtLeastOnce);
    let dir = tempfile::Builder::new()
        .prefix(&format!("serve-{}-", target.name()))
        .tempdir_in(work_dir)
        .map_err(|e| BenchError::io("making a directory under", work_dir, e))?;
    let broker =
        Mosquitto::start_for_load(|_| "allow_anonymous true\nmax_queued_messages 0\n".into());
    let data = dir.path().join("data");
    let subscriber = Subscriber::start(target, &broker, &data, plan.durability)?;
    let broker_stat = format!("/proc/{}/stat", broker.pid());
    let cpu = || {
        [
            subscriber.cpu_seconds(),
            process_cpu_seconds(&broker_stat),
            process_cpu_seconds("/proc/self/stat"),
        ]
    };
    let cpu_0 = cpu();
    let (published, taken) = publish_window(plan, broker.port, &subscriber, qos, size, base_ms);
    let (at_0, at_1, measured_s) = taken?;
    let acked_readings = published.iter().map(|p| p.events).sum::<u64>() * size as u64;
    let drain_s = drain(&subscriber, acked_readings, size)?;
    let cpu_1 = cpu();
    let stored = subscriber.finish(plan.clients, size)?;
    let errors: Vec<&String> = published.iter().filter_map(|p| p.error.as_ref()).collect();
    let nan = f64::NAN;
    Ok(ServeRun {
        target: target.name().into(),
        readings_per_event: size,
        phase: "peak",
        repeat,
        clients: plan.clients,
        offered_readings_per_sec: None,
        readings_per_sec: (at_1 - at_0) as f64 / measured_s,
        events: (at_1 - at_0) / size as u64,
        // Latency to an acknowledgement that means stored has no counterpart on the bus.
        p50_ms: nan,
        p99_ms: nan,
        p999_ms: nan,
        max_ms: nan,
        errors: errors.len() as u64,
        first_error: errors.first().map(|e| e.to_string()),
        server_cpu_s: cpu_1[0] - cpu_0[0],
        client_cpu_s: cpu_1[2] - cpu_0[2],
        server_cpu_us_per_reading: (cpu_1[0] - cpu_0[0]) * 1e6 / acked_readings.max(1) as f64,
        acked_readings,
        stored_readings: stored,
        check: if stored == acked_readings {
            "ok".into()
        } else {
            format!("MISMATCH: {stored} stored, {acked_readings} taken by the broker")
        },
        measured_s,
        broker_cpu_s: Some(cpu_1[1] - cpu_0[1]),
        drain_s: Some(drain_s),
        readings_per_commit: None,
    })
}

/// The publishers at work for the warm-up and the measured window, their backlog kept up to
/// date, and the subscriber's count sampled at the window's two ends.
fn publish_window(
    plan: &BusPlan,
    port: u16,
    subscriber: &Subscriber,
    qos: QoS,
    size: usize,
    base_ms: i64,
) -> (Vec<Published>, Result<(u64, u64, f64)>) {
    // Time for every publisher to connect before the first publish.
    let start = Instant::now() + Duration::from_millis(500);
    let window = (start + plan.warmup, start + plan.warmup + plan.measured);
    let backlog = Backlog::new(plan.backlog_events);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let publishers: Vec<_> = (0..plan.clients)
            .map(|c| {
                let backlog = &backlog;
                scope
                    .spawn(move || publish(backlog, port, c, qos, size, (start, window.1), base_ms))
            })
            .collect();
        let polling = scope.spawn(|| poll_taken(subscriber, size, &backlog, &done));
        let taken = sample_window(subscriber, size, window);
        let published: Vec<Published> = publishers
            .into_iter()
            .map(|p| p.join().expect("a publisher panicked"))
            .collect();
        done.store(true, Ordering::Relaxed);
        let _ = polling.join();
        (published, taken)
    })
}

/// The subscriber's readings at the start and the end of the measured window, and the
/// seconds between the two samples.
fn sample_window(
    subscriber: &Subscriber,
    size: usize,
    (from, to): (Instant, Instant),
) -> Result<(u64, u64, f64)> {
    std::thread::sleep(from.saturating_duration_since(Instant::now()));
    let (t_0, at_0) = (Instant::now(), subscriber.readings_taken(size)?);
    std::thread::sleep(to.saturating_duration_since(Instant::now()));
    let (t_1, at_1) = (Instant::now(), subscriber.readings_taken(size)?);
    Ok((at_0, at_1, (t_1 - t_0).as_secs_f64()))
}

/// The bus rows against their targets (at 10 readings/event: roamkv over the bus >= the HTTP
/// route's rate and >= 0.8 x mosquitto's own rate for the same messages), from the medians.
pub(super) fn verdict(summaries: &[ServeSummary], size: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let find = |target: &str| {
        summaries
            .iter()
            .find(|s| s.target == target && s.readings_per_event == size)
    };
    let http = find("roamkv");
    for q in [0, 1] {
        let (Some(bus), ceiling) = (
            find(&format!("roamkv-bus-qos{q}")),
            find(&format!("mosquitto-qos{q}")),
        ) else {
            continue;
        };
        let mut line = format!(
            "{size}/event: roamkv over the bus at QoS {q} {:.0} readings/s (CPU {:.1} µs/reading, mosquitto's {:.1}; drained {:.1} s after the publishers stopped)",
            bus.readings_per_sec,
            bus.server_cpu_us_per_reading,
            bus.broker_cpu_us_per_reading.unwrap_or(f64::NAN),
            bus.drain_s.unwrap_or(f64::NAN)
        );
        if let Some(c) = ceiling {
            line.push_str(&format!(
                " = {:.2}x mosquitto's own rate {:.0} (target at 10/event: >= 0.8x)",
                bus.readings_per_sec / c.readings_per_sec,
                c.readings_per_sec
            ));
        }
        if let Some(h) = http {
            line.push_str(&format!(
                " = {:.2}x the HTTP route's {:.0} (CPU {:.1} µs/reading; target at 10/event: >= 1x)",
                bus.readings_per_sec / h.readings_per_sec,
                h.readings_per_sec,
                h.server_cpu_us_per_reading
            ));
        }
        lines.push(line);
    }
    lines
}

/// Tells the publishers' backlog what the subscriber has taken, every `TAKEN_POLL`, until
/// `done`.
fn poll_taken(subscriber: &Subscriber, size: usize, backlog: &Backlog, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        if let Ok(readings) = subscriber.readings_taken(size) {
            backlog.taken(readings / size as u64);
        }
        std::thread::sleep(TAKEN_POLL);
    }
}

/// Waits until `subscriber` has taken `readings`, or has taken nothing more for
/// `DRAIN_STALL`. Returns the seconds it took.
pub fn drain(subscriber: &Subscriber, readings: u64, readings_per_event: usize) -> Result<f64> {
    let started = Instant::now();
    let (mut last, mut progressed) = (0, Instant::now());
    loop {
        let taken = subscriber.readings_taken(readings_per_event)?;
        if taken >= readings {
            return Ok(started.elapsed().as_secs_f64());
        }
        if taken > last {
            (last, progressed) = (taken, Instant::now());
        } else if progressed.elapsed() > DRAIN_STALL {
            return Ok(started.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
