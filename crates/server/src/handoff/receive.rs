//! The receiving side (edge B): a handoff begins (recorded durably, its epoch checked), its
//! chunks are written (each acknowledged only once durable), and it commits (recorded durably:
//! from then on this edge owns the device). And `POST /devices/{d}/arrived`, by which this edge
//! says it now sees a device and asks the edge that has its history to hand it over.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use roamkv_engine::{Durability, Record, crash_point};
use roamkv_wire::names::check_device_name;
use roamkv_wire::{KeyedReading, batch};
use serde::Deserialize;
use serde_json::json;

use super::book::store::InRecord;
use super::peer::{message_of, token_refused, unanswered};
use super::state::{HandoffState, Shared};
use crate::clock::now_ms;
use crate::http::body::read_body;
use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::ingest::event_ids;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginRequest {
    pub device: String,
    pub epoch: u64,
    pub from_edge: String,
    pub from: String,
}

/// `POST /handoffs/{id}/begin`: takes the handoff (idempotent by id).
#[utoipa::path(post, path = "/api/roamkv/v1/handoffs/{id}/begin", tag = "handoff",
    params(("id" = String, Path, description = "the handoff")),
    request_body(content = String, content_type = "application/json", description = "edge to edge: the device, its epoch, the sender"),
    responses((status = 201, description = "recorded: `{\"edge_id\"}`"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "a stale epoch, or the device handed on here", body = crate::http::error::ApiErrorBody)))]
pub async fn begin(
    State(state): State<Shared>,
    _: NoQuery,
    Path(id): Path<String>,
    Json(request): Json<BeginRequest>,
) -> Result<Response, ApiError> {
    let edge_id = state.edge_id.clone();
    state.blocking(move |s| take(s, &id, request)).await?;
    Ok((StatusCode::CREATED, Json(json!({"edge_id": edge_id}))).into_response())
}

fn conflict(message: String) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, message)
}

/// The checks of a begin, then the record (durable) and the device's epoch.
fn take(s: &HandoffState, id: &str, request: BeginRequest) -> Result<(), ApiError> {
    if request.from_edge == s.edge_id {
        return Err(conflict(format!(
            "a handoff from this edge to itself ({}) is refused",
            s.edge_id
        )));
    }
    check_device_name(&request.device)?;
    {
        let book = s.handoffs.book.lock();
        if let Some(known) = book.ins.get(id) {
            if known.device == request.device && known.epoch == request.epoch && !known.aborted {
                // The same begin again (its first answer was lost).
                drop(book);
                return s
                    .handoffs
                    .note_epoch(&request.device, request.epoch)
                    .map_err(ApiError::internal);
            }
            return Err(conflict(format!("handoff {id} is another handoff here")));
        }
        let epoch = book.epoch(&request.device);
        if request.epoch <= epoch {
            return Err(conflict(format!(
                "handoff {id} of {:?} is of epoch {}, and this edge knows epoch {epoch}: a newer handoff of the device came by",
                request.device, request.epoch
            )));
        }
        if let Some(out) = book.active_out(&request.device) {
            return Err(conflict(format!(
                "{:?} is being handed off from this edge ({}, {:?}): try again once that is done",
                request.device, out.id, out.state
            )));
        }
    }
    let record = InRecord {
        format: 1,
        id: id.to_string(),
        device: request.device.clone(),
        from_edge: request.from_edge,
        from: request.from,
        epoch: request.epoch,
        chunks: 0,
        readings: 0,
        committed: false,
        aborted: false,
        started_ms: now_ms(),
        committed_ms: None,
    };
    s.handoffs
        .store
        .save_in(&record)
        .and_then(|()| s.handoffs.note_epoch(&request.device, request.epoch))
        .map_err(ApiError::internal)?;
    crash_point("handoff_in.after_begin");
    // The device comes back (it left this edge before): writes of it are taken again.
    s.fences.unfence(&request.device);
    s.handoffs.book.lock().ins.insert(id.to_string(), record);
    Ok(())
}

/// The handoff `id` as a chunk or a commit may use it: begun here, not called off, of the epoch
/// the request names, not overtaken by a newer one.
fn usable(s: &HandoffState, id: &str, epoch: Option<u64>) -> Result<InRecord, ApiError> {
    let book = s.handoffs.book.lock();
    let record = book.ins.get(id).cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no handoff {id} has begun here"),
        )
    })?;
    if record.aborted {
        return Err(conflict(format!(
            "handoff {id} was called off by its sender"
        )));
    }
    if epoch.is_some_and(|e| e != record.epoch) || book.epoch(&record.device) > record.epoch {
        return Err(conflict(format!(
            "handoff {id} is of epoch {}: a newer handoff of {:?} came by (epoch {})",
            record.epoch,
            record.device,
            book.epoch(&record.device)
        )));
    }
    Ok(record)
}

/// `PUT /handoffs/{id}/chunks/{n}`: a native binary batch of the device's readings, written as
/// one engine batch and made durable before the 201.
#[utoipa::path(put, path = "/api/roamkv/v1/handoffs/{id}/chunks/{n}", tag = "handoff",
    params(("id" = String, Path, description = "the handoff"), ("n" = u64, Path, description = "the chunk's number"),
        ("x-roamkv-epoch" = u64, Header, description = "the handoff's epoch")),
    request_body(content = Vec<u8>, content_type = "application/vnd.roamkv.batch", description = "a binary batch of the device's readings"),
    responses((status = 201, description = "durable: `{\"applied\": N}`"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 404, description = "no such handoff", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "a stale epoch or a cancelled handoff", body = crate::http::error::ApiErrorBody)))]
pub async fn chunk(
    State(state): State<Shared>,
    _: NoQuery,
    Path((id, n)): Path<(String, u64)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let epoch = headers
        .get("x-roamkv-epoch")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| ApiError::bad_request("a chunk needs an X-Roamkv-Epoch header"))?;
    let bytes = read_body(&state.config.body, &headers, body).await?;
    let readings = batch::decode(&bytes, state.config.batch_readings_max)?;
    let applied = readings.len();
    state
        .blocking(move |s| {
            let record = usable(s, &id, Some(epoch))?;
            if record.committed {
                return Ok(()); // a chunk sent again after the commit: it is all here
            }
            if let Some(other) = readings.iter().find(|r| r.device != record.device) {
                return Err(ApiError::bad_request(format!(
                    "chunk {n} of handoff {id} holds a reading of {:?}, not {:?}",
                    other.device, record.device
                )));
            }
            // The events' index entries ride in the chunk's batch (ingest/event_ids.rs), merged and
            // written under one hold (chunks without events let it go at once).
            let mut merging = Some(s.handoffs.index_merge.lock());
            let index = if s.config.event_id_index {
                event_ids::index_entries_for(&s.engine, &readings)?
            } else {
                Vec::new()
            };
            if index.is_empty() {
                merging = None;
            }
            let records: Vec<Record<'_>> = readings
                .iter()
                .chain(&index)
                .map(KeyedReading::record)
                .collect();
            s.engine
                .put_batch(&records)
                .map_err(ApiError::from_engine)?;
            drop(merging);
            if s.config.durability != Durability::Sync {
                s.engine.sync().map_err(ApiError::from_engine)?;
            }
            crash_point("handoff_in.after_chunk");
            let mut book = s.handoffs.book.lock();
            if let Some(r) = book.ins.get_mut(&id) {
                r.chunks = r.chunks.max(n + 1);
                r.readings += readings.len() as u64;
            }
            s.handoffs
                .counters
                .bytes_received
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(())
        })
        .await?;
    Ok((StatusCode::CREATED, Json(json!({"applied": applied}))).into_response())
}

/// `POST /handoffs/{id}/commit`: recorded durably before the 200; idempotent.
#[utoipa::path(post, path = "/api/roamkv/v1/handoffs/{id}/commit", tag = "handoff",
    params(("id" = String, Path, description = "the handoff")),
    responses((status = 200, description = "committed: this edge owns the device"),
        (status = 404, description = "no such handoff", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "cancelled", body = crate::http::error::ApiErrorBody)))]
pub async fn commit(
    State(state): State<Shared>,
    _: NoQuery,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let record = state
        .blocking(move |s| {
            let mut record = usable(s, &id, None)?;
            if record.committed {
                return Ok(record);
            }
            record.committed = true;
            record.committed_ms = Some(now_ms());
            s.handoffs
                .store
                .save_in(&record)
                .map_err(ApiError::internal)?;
            crash_point("handoff_in.after_commit");
            s.handoffs
                .book
                .lock()
                .ins
                .insert(id.clone(), record.clone());
            s.handoffs.counters.received.fetch_add(1, Ordering::Relaxed);
            Ok(record)
        })
        .await?;
    Ok(Json(json!({"committed": true, "handoff": record})).into_response())
}

/// The sender called a handoff off (`DELETE /handoffs/{id}` on this, the receiving edge): later
/// chunks and the commit are refused. What chunks wrote stays: readings the sender keeps too.
pub async fn cancel(state: &Shared, id: &str) -> Result<Response, ApiError> {
    let id = id.to_string();
    let record = state
        .blocking(move |s| {
            let mut record = s
                .handoffs
                .book
                .lock()
                .ins
                .get(&id)
                .cloned()
                .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no handoff {id}")))?;
            if record.committed {
                return Err(conflict(format!(
                    "handoff {id} is committed here: it cannot be called off"
                )));
            }
            record.aborted = true;
            s.handoffs
                .store
                .save_in(&record)
                .map_err(ApiError::internal)?;
            s.handoffs.book.lock().ins.insert(id, record.clone());
            Ok(record)
        })
        .await?;
    Ok(Json(json!(record)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrivedRequest {
    /// The edge that has the device's history, `http://host:port` (or `https://`).
    pub from: String,
}

/// `POST /devices/{device}/arrived {"from": URL}`: this edge sees the device now; the edge that
/// has its history is asked to hand it over (its answer is passed on).
#[utoipa::path(post, path = "/api/roamkv/v1/devices/{device}/arrived", tag = "handoff",
    params(("device" = String, Path, description = "the device")),
    request_body(content = String, content_type = "application/json", description = "`{\"from\": \"http://host:port\"}`: the edge it left"),
    responses((status = 202, description = "asked the edge it left to hand it here (its answer)"),
        (status = 502, description = "the edge it left did not answer, or refused this edge's peer token", body = crate::http::error::ApiErrorBody), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody)))]
pub async fn arrived(
    State(state): State<Shared>,
    _: NoQuery,
    Path(device): Path<String>,
    Json(request): Json<ArrivedRequest>,
) -> Result<Response, ApiError> {
    check_device_name(&device)?;
    let from = request.from.trim_end_matches('/').to_string();
    let answer = state
        .peer
        .request(
            Method::POST,
            &format!("{from}/api/roamkv/v1/devices/{device}/handoff"),
        )
        .json(&json!({"to": state.advertise_url}))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "asking {from} to hand {device:?} over: {}",
                    unanswered(&from, e)
                ),
            )
        })?;
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let text = answer.text().await.unwrap_or_default();
    // A refusal of this edge's peer token is not the caller's: a 502 that says what to do.
    if let Some(sentence) = token_refused(&from, status.as_u16(), &message_of(&text)) {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "asking {from} to hand {device:?} over: {sentence} ({status}: {})",
                message_of(&text)
            ),
        ));
    }
    let body: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| json!({"error": e.to_string()}));
    Ok((status, Json(body)).into_response())
}

/// Inbound records of devices no longer arriving, kept for their epochs' sake in epochs.json:
/// committed or called off ones older than `FINISHED_KEEP_MS` are forgotten.
pub fn prune(state: &Arc<HandoffState>) {
    let old: Vec<String> = {
        let book = state.handoffs.book.lock();
        book.ins
            .values()
            .filter(|r| r.committed || r.aborted)
            .filter(|r| {
                now_ms().saturating_sub(r.committed_ms.unwrap_or(r.started_ms))
                    > super::book::FINISHED_KEEP_MS
            })
            .map(|r| r.id.clone())
            .collect()
    };
    for id in old {
        if state.handoffs.store.remove("in", &id).is_ok() {
            state.handoffs.book.lock().ins.remove(&id);
        }
    }
}
