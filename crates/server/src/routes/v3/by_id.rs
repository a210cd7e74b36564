//! The routes of events by id (`GET`/`DELETE event/id/{id}`): each one lookup in the index of
//! event ids, then the event's readings by their keys (crates/server/src/ingest/event_ids.rs).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use roamkv_wire::edgex::contract::API_VERSION;

use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::state::{AppState, Shared};

/// The id of `event/id/{id}`, a UUID; and the index must be on (`--event-id-index`).
fn event_id(state: &AppState, id: &str) -> Result<(), ApiError> {
    if !state.config.event_id_index {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "events are not indexed by id on this server (--event-id-index false); query by \
             device and time instead",
        ));
    }
    if id.len() != 36 || uuid::Uuid::parse_str(id).is_err() {
        return Err(ApiError::bad_request(format!(
            "event id {id:?} is not a UUID"
        )));
    }
    Ok(())
}

fn no_event(id: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("no event with id {id}"))
}

/// GET event/id/{id}: one index lookup, then the event's readings by their keys.
pub async fn event_by_id(
    State(state): State<Shared>,
    Path(id): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    event_id(&state, &id)?;
    let event = state
        .blocking(move |s| {
            s.find_event(&id)?
                .and_then(|found| found.event())
                .ok_or_else(|| no_event(&id))
        })
        .await?;
    Ok(Json(json!({"apiVersion": API_VERSION, "statusCode": 200, "event": event})).into_response())
}

/// DELETE event/id/{id}: the event's readings and its index entry overwritten in one batch
/// (ingest/event_ids.rs); their keys go with retention or the device's departure.
pub async fn delete_event_by_id(
    State(state): State<Shared>,
    Path(id): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    event_id(&state, &id)?;
    state
        .blocking(move |s| match s.delete_event(&id)? {
            true => Ok(()),
            false => Err(no_event(&id)),
        })
        .await?;
    Ok(Json(json!({"apiVersion": API_VERSION, "statusCode": 200})).into_response())
}
