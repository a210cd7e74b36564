//! The sending side (edge A): the routes that start, show and call off a handoff, and the task
//! that carries each handoff through its states (store.rs, `OutState`), persisting each step
//! before the next, resuming from the record after a restart, retrying while the receiver is
//! away (backoff to `RETRY_MAX`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use roamkv_engine::crash_point;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

use super::book::FINISHED_KEEP_MS;
use super::book::store::{OutRecord, OutState};
use super::state::{HandoffState, Shared};
use super::step::{advance, expect_status};
use crate::clock::now_ms;
use crate::http::error::ApiError;
use crate::http::query::NoQuery;

/// The longest wait between attempts while the receiver is away or refuses: a receiver that
/// comes back is found within this (`roamkv bench handoff` measured resumes of up to 1.24 s
/// after a restarted receiver was ready with 2 s here; the cloud sink retries the same way).
const RETRY_MAX: Duration = Duration::from_millis(500);
const RETRY_MIN: Duration = Duration::from_millis(50);

/// The fence's reason while a device is being handed off, and after.
fn fence_reason(to: &str, done: bool) -> String {
    if done {
        format!("it moved to another edge, {to}")
    } else {
        format!("it is being handed off to {to}")
    }
}

/// `GET /edge`: this edge's id (a sender asks it to refuse a handoff to itself).
#[utoipa::path(get, path = "/api/roamkv/v1/edge", tag = "handoff",
    responses((status = 200, description = "`{\"edge_id\"}`: this edge's identity")))]
pub async fn edge(State(state): State<Shared>, _: NoQuery) -> Response {
    Json(json!({"edge_id": state.edge_id})).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The receiver's base URL, `http://host:port` or `https://host:port`.
    pub to: String,
}

/// `POST /devices/{device}/handoff {"to": URL}`: fences the device, records the handoff, and
/// answers 202; the task does the rest.
#[utoipa::path(post, path = "/api/roamkv/v1/devices/{device}/handoff", tag = "handoff",
    params(("device" = String, Path, description = "the device")),
    request_body(content = String, content_type = "application/json", description = "`{\"to\": \"http://host:port\"}`: the next edge"),
    responses((status = 202, description = "fenced and recorded; the handoff runs"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 404, description = "not here", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "already being handed off", body = crate::http::error::ApiErrorBody)))]
pub async fn start(
    State(state): State<Shared>,
    _: NoQuery,
    Path(device): Path<String>,
    Json(request): Json<StartRequest>,
) -> Result<Response, ApiError> {
    let to = normalize_url(&request.to)?;
    // A handoff to itself is refused at once when the receiver answers (an unreachable one is
    // normal: the task retries).
    if let Ok(answer) = state
        .peer
        .request(Method::GET, &format!("{to}/api/roamkv/v1/edge"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        && let Ok(body) = answer.json::<serde_json::Value>().await
        && body["edge_id"] == state.edge_id.as_str()
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{to} is this edge: a handoff to itself is refused"),
        ));
    }
    let record = state.blocking(move |s| begin_here(s, &device, &to)).await?;
    state.handoffs.work.notify_one();
    Ok((StatusCode::ACCEPTED, Json(json!(record))).into_response())
}

/// `http(s)://host:port` without a trailing slash; anything else is a 400.
fn normalize_url(url: &str) -> Result<String, ApiError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ApiError::bad_request(format!("\"to\": {url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(ApiError::bad_request(format!(
            "\"to\": {url:?}: give the receiving edge as http://host:port (https:// for one \
             that serves HTTPS)"
        )));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// The first step, blocking: checks, the fence, the record (durable before the answer).
fn begin_here(s: &HandoffState, device: &str, to: &str) -> Result<OutRecord, ApiError> {
    let newest = s
        .engine
        .latest(device, None)
        .map_err(ApiError::from_engine)?;
    if newest.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("device {device:?} is not here"),
        ));
    }
    let epoch = {
        let book = s.handoffs.book.lock();
        if let Some(moving) = book.active_out(device) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "{device:?} is being handed off already ({}, to {})",
                    moving.id, moving.to
                ),
            ));
        }
        if let Some(coming) = book.open_in(device) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "{device:?} is still arriving from {} ({})",
                    coming.from, coming.id
                ),
            ));
        }
        book.epoch(device) + 1
    };
    if s.fences.is_fenced(device) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{device:?} takes no writes here now (departing, or moved): it cannot be handed off"
            ),
        ));
    }
    s.fences
        .fence_to(device, &fence_reason(to, false), Some(to.to_string()))
        .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
    let record = OutRecord {
        format: 1,
        id: uuid::Uuid::new_v4().to_string(),
        device: device.to_string(),
        to: to.to_string(),
        to_edge: None,
        epoch,
        state: OutState::Fenced,
        after: None,
        chunks: 0,
        readings: 0,
        bytes: 0,
        started_ms: now_ms(),
        finished_ms: None,
        departed_ms: None,
        last_error: None,
    };
    let saved = s
        .handoffs
        .store
        .save_out(&record)
        .and_then(|()| s.handoffs.note_epoch(device, epoch));
    if let Err(e) = saved {
        s.fences.unfence(device);
        return Err(ApiError::internal(e));
    }
    crash_point("handoff.after_record");
    s.handoffs
        .book
        .lock()
        .outs
        .insert(record.id.clone(), record.clone());
    Ok(record)
}

/// `GET /handoffs`: every handoff made and received that this edge keeps.
#[utoipa::path(get, path = "/api/roamkv/v1/handoffs", tag = "handoff",
    responses((status = 200, description = "`{\"out\": [...], \"in\": [...]}`")))]
pub async fn list(State(state): State<Shared>, _: NoQuery) -> Response {
    let book = state.handoffs.book.lock();
    let outs: Vec<&OutRecord> = book.outs.values().collect();
    let ins: Vec<_> = book.ins.values().collect();
    Json(json!({"out": outs, "in": ins})).into_response()
}

/// `GET /handoffs/{id}`: one handoff, made or received.
#[utoipa::path(get, path = "/api/roamkv/v1/handoffs/{id}", tag = "handoff",
    params(("id" = String, Path, description = "the handoff")),
    responses((status = 200, description = "`{\"direction\", \"handoff\"}`"),
        (status = 404, description = "no such handoff", body = crate::http::error::ApiErrorBody)))]
pub async fn status(
    State(state): State<Shared>,
    _: NoQuery,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let book = state.handoffs.book.lock();
    if let Some(r) = book.outs.get(&id) {
        return Ok(Json(json!({"direction": "out", "handoff": r})).into_response());
    }
    if let Some(r) = book.ins.get(&id) {
        return Ok(Json(json!({"direction": "in", "handoff": r})).into_response());
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no handoff {id} here"),
    ))
}

/// `DELETE /handoffs/{id}`: a handoff this edge makes is called off (before the receiver
/// committed: the device is writable here again); one it receives is marked called off by its
/// sender (later chunks and the commit are refused).
#[utoipa::path(delete, path = "/api/roamkv/v1/handoffs/{id}", tag = "handoff",
    params(("id" = String, Path, description = "the handoff")),
    responses((status = 200, description = "aborted (sender) or cancelled (receiver)"),
        (status = 404, description = "no such handoff", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "too late: committed", body = crate::http::error::ApiErrorBody)))]
pub async fn abort_or_cancel(
    State(state): State<Shared>,
    _: NoQuery,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let receiving = state.handoffs.book.lock().ins.contains_key(&id);
    if receiving {
        return super::receive::cancel(&state, &id).await;
    }
    let record = state
        .handoffs
        .book
        .lock()
        .outs
        .get(&id)
        .cloned()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no handoff {id} here")))?;
    match record.state {
        OutState::Fenced | OutState::Sending => {}
        OutState::Aborted => return Ok(Json(json!(record)).into_response()),
        other => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "handoff {id} is {other:?}: the receiver has committed it (or may have), so it completes"
                ),
            ));
        }
    }
    // Tell the receiver first (best effort): it refuses this handoff's chunks from now on.
    let _ = state
        .peer
        .request(
            Method::DELETE,
            &format!("{}/api/roamkv/v1/handoffs/{id}", record.to),
        )
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    let aborted = state
        .blocking(move |s| finish(s, &id, OutState::Aborted))
        .await?;
    Ok(Json(json!(aborted)).into_response())
}

/// Moves a handoff to a finished state durably, unless it went on meanwhile; lifts the fence of
/// an aborted one.
fn finish(s: &HandoffState, id: &str, to: OutState) -> Result<OutRecord, ApiError> {
    let mut record = {
        let book = s.handoffs.book.lock();
        book.outs
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no handoff {id}")))?
    };
    if to == OutState::Aborted && !matches!(record.state, OutState::Fenced | OutState::Sending) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("handoff {id} went on to {:?} meanwhile", record.state),
        ));
    }
    record.state = to;
    record.finished_ms = Some(now_ms());
    s.handoffs
        .store
        .save_out(&record)
        .map_err(ApiError::internal)?;
    s.handoffs
        .book
        .lock()
        .outs
        .insert(id.to_string(), record.clone());
    if to == OutState::Aborted {
        s.fences.unfence(&record.device);
        s.handoffs.counters.aborted.fetch_add(1, Ordering::Relaxed);
    }
    Ok(record)
}

/// The sending task: carries every unfinished handoff through its steps, oldest first, until
/// shutdown; forgets finished records after `FINISHED_KEEP_MS` (and lifts their fences).
pub async fn run(state: Shared, mut stop: watch::Receiver<bool>) {
    let mut wait = RETRY_MIN;
    loop {
        if *stop.borrow() {
            return;
        }
        let next = {
            let book = state.handoffs.book.lock();
            book.outs.values().find(|r| !r.state.is_finished()).cloned()
        };
        let pause = match next {
            None => {
                prune(&state).await;
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = state.handoffs.work.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                }
                continue;
            }
            Some(record) => match step(&state, record).await {
                Ok(()) => {
                    wait = RETRY_MIN;
                    None
                }
                Err(e) => {
                    note_error(&state, &e);
                    wait = (wait * 2).min(RETRY_MAX);
                    Some(wait)
                }
            },
        };
        if let Some(pause) = pause {
            tokio::select! {
                _ = stop.changed() => return,
                _ = state.handoffs.work.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// An error of a step: (handoff id, what went wrong). Shown on the record; the step is tried
/// again.
type StepError = (String, String);

fn note_error(state: &Shared, (id, error): &StepError) {
    tracing::warn!(handoff = %id, %error, "handoff step failed; retrying");
    if let Some(r) = state.handoffs.book.lock().outs.get_mut(id) {
        r.last_error = Some(error.clone());
    }
}

/// One step of one handoff.
async fn step(state: &Shared, record: OutRecord) -> Result<(), StepError> {
    let id = record.id.clone();
    let fail = |e: String| (id.clone(), e);
    match record.state {
        OutState::Fenced => begin_there(state, record).await.map_err(fail),
        OutState::Sending => super::chunks::send(state, record).await.map_err(fail),
        OutState::Committing => commit_there(state, record).await.map_err(fail),
        OutState::Departing => depart_here(state, record).await.map_err(fail),
        OutState::Done | OutState::Aborted => Ok(()),
    }
}

async fn begin_there(state: &Shared, mut record: OutRecord) -> Result<(), String> {
    let answer = state
        .peer
        .request(
            Method::POST,
            &format!("{}/api/roamkv/v1/handoffs/{}/begin", record.to, record.id),
        )
        .json(&json!({
            "device": record.device,
            "epoch": record.epoch,
            "from_edge": state.edge_id,
            "from": state.advertise_url,
        }))
        .send()
        .await;
    let answer = expect_status(answer, StatusCode::CREATED, "begin", &record.to).await?;
    let body: serde_json::Value = answer.json().await.map_err(|e| format!("begin: {e}"))?;
    crash_point("handoff.after_begin");
    record.to_edge = body["edge_id"].as_str().map(str::to_string);
    record.state = OutState::Sending;
    record.last_error = None;
    advance(state, record).await
}

async fn commit_there(state: &Shared, mut record: OutRecord) -> Result<(), String> {
    let answer = state
        .peer
        .request(
            Method::POST,
            &format!("{}/api/roamkv/v1/handoffs/{}/commit", record.to, record.id),
        )
        .json(&json!({
            "device": record.device,
            "epoch": record.epoch,
            "chunks": record.chunks,
            "readings": record.readings,
        }))
        .send()
        .await;
    expect_status(answer, StatusCode::OK, "commit", &record.to).await?;
    crash_point("handoff.after_commit");
    record.state = OutState::Departing;
    record.last_error = None;
    advance(state, record).await
}

/// The receiver owns the device: it departs here (one DEPART record). The fence stays, now
/// naming where the device went.
async fn depart_here(state: &Shared, mut record: OutRecord) -> Result<(), String> {
    let s = Arc::clone(state);
    let device = record.device.clone();
    record.departed_ms = Some(now_ms());
    tokio::task::spawn_blocking(move || s.engine.depart(&device))
        .await
        .map_err(|e| format!("departing: {e}"))?
        .map_err(|e| format!("departing: {e}"))?;
    crash_point("handoff.after_depart");
    let _ = state.fences.fence_to(
        &record.device,
        &fence_reason(&record.to, true),
        Some(record.to.clone()),
    );
    record.state = OutState::Done;
    record.finished_ms = Some(now_ms());
    let took = now_ms().saturating_sub(record.started_ms);
    let c = &state.handoffs.counters;
    c.done.fetch_add(1, Ordering::Relaxed);
    c.duration_ms.fetch_add(took, Ordering::Relaxed);
    state.departed(&record.device, "handed off");
    advance(state, record).await
}

/// Forgets finished records older than `FINISHED_KEEP_MS`, lifting the fences of done ones.
async fn prune(state: &Shared) {
    let old: Vec<OutRecord> = {
        let book = state.handoffs.book.lock();
        book.outs
            .values()
            .filter(|r| {
                r.finished_ms
                    .is_some_and(|f| now_ms().saturating_sub(f) > FINISHED_KEEP_MS)
            })
            .cloned()
            .collect()
    };
    for r in old {
        let s = Arc::clone(state);
        let removed = tokio::task::spawn_blocking(move || {
            s.handoffs.store.remove("out", &r.id)?;
            let mut book = s.handoffs.book.lock();
            book.outs.remove(&r.id);
            if r.state == OutState::Done
                && book.active_out(&r.device).is_none()
                && book.epoch(&r.device) == r.epoch
            {
                s.fences.unfence(&r.device);
            }
            Ok::<(), String>(())
        })
        .await;
        match removed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "forgetting a finished handoff failed"),
            Err(e) => tracing::warn!(error = %e, "forgetting a finished handoff failed"),
        }
    }
    let s = Arc::clone(state);
    let _ = tokio::task::spawn_blocking(move || super::receive::prune(&s)).await;
}

/// At start, before the server serves: every device a handoff is moving (or moved, recently)
/// is fenced again.
pub fn refence(state: &HandoffState) -> Result<(), String> {
    let book = state.handoffs.book.lock();
    for r in book.outs.values() {
        match r.state {
            OutState::Aborted => {}
            // Handed back here since (a newer epoch came): not fenced.
            OutState::Done if book.epoch(&r.device) > r.epoch => {}
            OutState::Done => {
                state
                    .fences
                    .fence_to(&r.device, &fence_reason(&r.to, true), Some(r.to.clone()))?
            }
            _ => {
                state
                    .fences
                    .fence_to(&r.device, &fence_reason(&r.to, false), Some(r.to.clone()))?
            }
        }
    }
    Ok(())
}
