//! The sender's chunks (edge A, state `sending`): the device's readings read from both tiers in
//! (sensor, ts) order, a page at a time, each `PUT` to the receiver as a native binary batch,
//! with up to `CHUNKS_IN_FLIGHT` chunks on the wire at once.
//!
//! Why several: the receiver answers a chunk only once it is durable (an fdatasync), so one chunk
//! at a time leaves the link idle for a round trip and a sync per chunk: 56 % of a 100 Mbit/s
//! link with 20 ms of round trip, measured by `roamkv bench handoff` (docs/BENCHMARKS.md).
//! Chunks hold distinct keys, so the receiver may write them in any order; the sender's record
//! moves past a chunk only once it and every chunk before it were acknowledged, so a crash
//! resends at most what was in flight or unsaved (harmlessly: the same keys, the same values).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use reqwest::Method;
use roamkv_engine::{ScanCursor, crash_point};
use roamkv_wire::batch;

use super::book::CHUNK_READINGS_MAX;
use super::book::store::{OutRecord, OutState};
use super::state::Shared;
use super::step::{advance, expect_status};

/// Chunks sent and not yet acknowledged, at most: enough to keep a link busy through the
/// receiver's sync and a round trip of tens of ms (4 x 2,000 readings).
const CHUNKS_IN_FLIGHT: usize = 4;
/// Bytes of chunks acknowledged between two saves of the record: a crash resends at most this
/// much (plus what was in flight), and the sender writes its record about once per this many
/// bytes moved, not once per chunk.
const SAVE_EVERY_BYTES: u64 = 8 << 20;
/// ...or this often, whichever comes first.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// A chunk on the wire: its answer to come, and where the record moves once it is acknowledged.
struct InFlight {
    answer: tokio::task::JoinHandle<Result<reqwest::Response, reqwest::Error>>,
    readings: u64,
    last: (String, i64),
    more: bool,
    bytes: u64,
}

/// Sends the device's chunks until the last is acknowledged (the record moves to
/// `committing`), the handoff is called off, or the receiver fails one (the error; what was
/// acknowledged before it is saved).
pub async fn send(state: &Shared, mut record: OutRecord) -> Result<(), String> {
    let mut saved = (Instant::now(), 0u64);
    let mut limit = CHUNK_READINGS_MAX;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    // Where the next chunk read starts: past the last one put on the wire.
    let mut read_after = record.after.clone();
    let mut more = true;
    loop {
        if called_off(state, &record.id) {
            return Ok(());
        }
        while more && in_flight.len() < CHUNKS_IN_FLIGHT {
            let Some((readings, (last, next), body)) =
                read_chunk(state, &record.device, read_after.clone(), limit).await?
            else {
                more = false;
                break;
            };
            let n = record.chunks + in_flight.len() as u64;
            let bytes = body.len() as u64;
            let put = state
                .peer
                .request(
                    Method::PUT,
                    &format!(
                        "{}/api/roamkv/v1/handoffs/{}/chunks/{n}",
                        record.to, record.id
                    ),
                )
                .header("content-type", batch::CONTENT_TYPE)
                .header("x-roamkv-epoch", record.epoch.to_string())
                .body(body);
            read_after = Some(last.clone());
            more = next;
            in_flight.push_back(InFlight {
                answer: tokio::spawn(put.send()),
                readings,
                last,
                more: next,
                bytes,
            });
        }
        let Some(chunk) = in_flight.pop_front() else {
            record.state = OutState::Committing;
            return advance(state, record).await;
        };
        let answer = chunk
            .answer
            .await
            .map_err(|e| format!("a chunk's request: {e}"))?;
        if let Ok(a) = &answer
            && a.status() == StatusCode::PAYLOAD_TOO_LARGE
            && limit > 1
        {
            // Smaller chunks from the last acknowledged one; those in flight are let go.
            limit /= 2;
            in_flight.clear();
            (read_after, more) = (record.after.clone(), true);
            continue;
        }
        if let Err(e) = expect_status(answer, StatusCode::CREATED, "a chunk", &record.to).await {
            // What was acknowledged so far is kept (a crash would resend it, harmlessly).
            if saved.1 != record.bytes {
                advance(state, record).await?;
            }
            return Err(e);
        }
        crash_point("handoff.after_chunk");
        acknowledged(state, &mut record, chunk.readings, chunk.last, chunk.bytes);
        if !chunk.more {
            record.state = OutState::Committing;
            return advance(state, record).await;
        }
        if record.bytes - saved.1 >= SAVE_EVERY_BYTES || saved.0.elapsed() >= SAVE_EVERY {
            advance(state, record.clone()).await?;
            saved = (Instant::now(), record.bytes);
        }
    }
}

fn called_off(state: &Shared, id: &str) -> bool {
    state
        .handoffs
        .book
        .lock()
        .outs
        .get(id)
        .is_some_and(|r| r.state == OutState::Aborted)
}

/// The record moves past an acknowledged chunk.
fn acknowledged(
    state: &Shared,
    record: &mut OutRecord,
    readings: u64,
    last: (String, i64),
    bytes: u64,
) {
    state
        .handoffs
        .counters
        .bytes_sent
        .fetch_add(bytes, Ordering::Relaxed);
    record.chunks += 1;
    record.readings += readings;
    record.bytes += bytes;
    record.after = Some(last);
    record.last_error = None;
}

/// The next chunk of `device` after `after`: (readings, (its last (sensor, ts), whether more
/// follow), the encoded batch); None when there is nothing left.
async fn read_chunk(
    state: &Shared,
    device: &str,
    after: Option<(String, i64)>,
    limit: usize,
) -> Result<Option<(u64, ((String, i64), bool), Vec<u8>)>, String> {
    let device = device.to_string();
    let engine = Arc::clone(&state.engine);
    let page = tokio::task::spawn_blocking(move || {
        let cursor = after.map(|(sensor, ts_ns)| ScanCursor { sensor, ts_ns });
        engine.scan_page(&device, None, i64::MIN, i64::MAX, cursor.as_ref(), limit)
    })
    .await
    .map_err(|e| format!("reading the device: {e}"))?
    .map_err(|e| format!("reading the device: {e}"))?;
    let Some(last) = page.readings.last() else {
        return Ok(None);
    };
    let last = (last.sensor.clone(), last.ts_ns);
    let mut body = Vec::new();
    batch::encode_header(&mut body, page.readings.len() as u32);
    for r in &page.readings {
        batch::encode_record(&mut body, &r.device, &r.sensor, r.ts_ns, &r.value);
    }
    Ok(Some((
        page.readings.len() as u64,
        (last, page.next.is_some()),
        body,
    )))
}
