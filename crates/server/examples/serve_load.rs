//! A first load test of `roamkv serve` (not the full benchmark: no InfluxDB side, one run).
//! Starts the server in-process on a loopback port over a fresh data directory, drives it with
//! concurrent clients posting EdgeX events for a fixed time, then writes the same batches into
//! an in-process engine (the ceiling). Prints readings/s and request latency percentiles.
//!
//! cargo run --release -p roamkv-server --example serve_load -- CLIENTS READINGS_PER_EVENT SECONDS DURABILITY

use std::sync::Arc;
use std::time::{Duration, Instant};

use roamkv_engine::{Durability, Engine, Options, Record};
use roamkv_server::{Config, ServeArgs};
use serde_json::{Value, json};

const NS_PER_MS: i64 = 1_000_000;

fn event(device: &str, origin_ms: i64, readings: usize) -> Value {
    let readings: Vec<Value> = (0..readings)
        .map(|i| {
            json!({"deviceName": device, "resourceName": format!("sensor-{i}"), "profileName": "load",
                   "origin": origin_ms * NS_PER_MS, "valueType": "Float64", "value": "21.5"})
        })
        .collect();
    json!({"apiVersion": "v3", "event": {
        "id": uuid::Uuid::new_v4().to_string(), "deviceName": device, "profileName": "load",
        "sourceName": "load", "origin": origin_ms * NS_PER_MS, "readings": readings}})
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.into());
    let clients: usize = arg(0, "16").parse().expect("CLIENTS");
    let per_event: usize = arg(1, "100").parse().expect("READINGS_PER_EVENT");
    let seconds: u64 = arg(2, "10").parse().expect("SECONDS");
    let durability = arg(3, "sync");
    let dir = tempfile::tempdir().expect("tempdir");

    let config = Config::resolve(&ServeArgs {
        data: Some(dir.path().join("served")),
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        durability: Some(durability.clone()),
        concurrent_requests_max: Some(clients * 2),
        ..ServeArgs::default()
    })
    .expect("config");
    let running = roamkv_server::start(config).await.expect("server");
    let url = format!("http://{}", running.addr);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let device = format!("load-{c}");
            let route = format!("{url}/api/v3/event/load/load/{device}/load");
            let mut latencies = Vec::new();
            let mut origin_ms = 1_700_000_000_000i64;
            while Instant::now() < deadline {
                origin_ms += 1;
                let body = event(&device, origin_ms, per_event).to_string();
                let started = Instant::now();
                let response = client
                    .post(&route)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .expect("POST");
                assert_eq!(response.status().as_u16(), 201);
                latencies.push(started.elapsed());
            }
            latencies
        }));
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("client"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let events = latencies.len();
    println!(
        "http: {clients} clients, {per_event} readings/event, {durability}: {events} events, {:.0} readings/s, p50 {:.2} ms, p99 {:.2} ms",
        (events * per_event) as f64 / elapsed,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    running.shutdown();
    running.wait().await.expect("shutdown");

    // The ceiling: the same batches from as many threads into an in-process engine.
    let engine = Arc::new(
        Engine::open(
            dir.path().join("direct"),
            Options {
                durability: Durability::parse(&durability).expect("durability"),
                ..Options::default()
            },
        )
        .expect("engine"),
    );
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                let device = format!("load-{c}");
                let sensors: Vec<String> = (0..per_event).map(|i| format!("sensor-{i}")).collect();
                let value = vec![0u8; 140]; // about the size of a stored EdgeX reading (CBOR, two UUIDs)
                let mut batches = 0usize;
                let mut ts = 1_700_000_000_000i64;
                while Instant::now() < deadline {
                    ts += 1;
                    let records: Vec<Record<'_>> = sensors
                        .iter()
                        .map(|s| Record {
                            device: &device,
                            sensor: s,
                            ts_ms: ts,
                            value: &value,
                        })
                        .collect();
                    engine.put_batch(&records).expect("put");
                    batches += 1;
                }
                batches
            })
        })
        .collect();
    let batches: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
    println!(
        "in-process engine, {clients} threads, same batches: {:.0} readings/s",
        (batches * per_event) as f64 / started.elapsed().as_secs_f64()
    );
}
