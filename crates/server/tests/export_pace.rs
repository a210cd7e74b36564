//! An export's budget (`--export-rate-mib`, routes/export.rs): while ingest runs its output is
//! paced at the rate, and /metrics counts the waits; with ingest idle it runs at full speed.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use roamkv_wire::batch;

/// Readings of the exported device: ~60 bytes a CSV line, so ~3.6 MB of CSV, over 3 s at
/// 1 MiB/s and a fraction of a second unpaced.
const READINGS: i64 = 60_000;
const BATCH_READINGS: i64 = 5_000;

fn batch_of(device: &str, first_ts: i64, n: i64) -> Vec<u8> {
    let mut out = Vec::new();
    batch::encode_header(&mut out, n as u32);
    for i in 0..n {
        batch::encode_record(&mut out, device, "temperature", first_ts + i, b"21.5");
    }
    out
}

/// Exports `device` as CSV: its bytes and the seconds it took.
async fn export(server: &Server, device: &str) -> (usize, f64) {
    let started = Instant::now();
    let answer = server
        .client
        .get(format!(
            "{}/api/roamkv/v1/export?device={device}&format=csv",
            server.base
        ))
        .send()
        .await
        .expect("export");
    assert_eq!(answer.status(), 200);
    let body = answer.bytes().await.expect("the whole export");
    (body.len(), started.elapsed().as_secs_f64())
}

async fn paced_seconds(server: &Server) -> f64 {
    let text = server.get_text("/metrics").await.1;
    metric(&text, "roamkv_export_paced_seconds_total").expect("the metric")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_keeps_to_its_rate_while_ingest_runs_and_runs_free_when_idle() {
    let server = Server::start(|a| a.export_rate_mib = Some(1)).await;
    let first_ts = now_ns() - READINGS;
    for start in (0..READINGS).step_by(BATCH_READINGS as usize) {
        let body = batch_of("exported", first_ts + start, BATCH_READINGS);
        let (status, answer) = server
            .post("/api/roamkv/v1/readings", batch::CONTENT_TYPE, body)
            .await;
        assert_eq!(status, 201, "{answer}");
    }
    // Ingest idle (nothing written for longer than the export's notion of "running").
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (bytes, idle_s) = export(&server, "exported").await;
    assert!(bytes > 3_000_000, "a {bytes}-byte export");
    assert_eq!(paced_seconds(&server).await, 0.0, "paced with ingest idle");
    let text = server.get_text("/metrics").await.1;
    assert_eq!(
        metric(&text, "roamkv_export_rate_limit_bytes_per_second"),
        Some(1_048_576.0)
    );

    // Another device written every 20 ms while the same export runs again.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (writing, client, base) = (
            Arc::clone(&writing),
            server.client.clone(),
            server.base.clone(),
        );
        tokio::spawn(async move {
            let mut ts = now_ns();
            while writing.load(Ordering::Relaxed) {
                let answer = client
                    .post(format!("{base}/api/roamkv/v1/readings"))
                    .header("content-type", batch::CONTENT_TYPE)
                    .body(batch_of("writing", ts, 10))
                    .send()
                    .await
                    .expect("a write");
                assert_eq!(answer.status(), 201);
                ts += 10;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (paced_bytes, paced_s) = export(&server, "exported").await;
    writing.store(false, Ordering::Relaxed);
    writer.await.expect("the writer");
    assert_eq!(paced_bytes, bytes, "the same export");
    let waited = paced_seconds(&server).await;
    // At 1 MiB/s the 3.6 MB take over 3 s (the first second's worth may go at once: the pace
    // allows no more than a second behind it).
    assert!(
        paced_s > bytes as f64 / 1_048_576.0 - 1.5 && waited > 1.0,
        "paced: {paced_bytes} bytes in {paced_s:.2} s, {waited:.2} s of waits (idle: {idle_s:.2} s)"
    );
    server.stop().await;
}
