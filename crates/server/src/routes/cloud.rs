//! The cloud sink's and the departures' views: `GET /api/roamkv/v1/sink` answers the sink's
//! state, cursor, lag (bytes, seconds, readings), retries, last error and the log's hold against
//! its cap; `GET /api/roamkv/v1/departures` the departures waiting for it (departures/). The same
//! figures go to /metrics and the status page (`CloudView`, drawn by state.rs).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::state::Shared;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/sink", get(sink_status))
        .route("/departures", get(departures))
}

#[utoipa::path(get, path = "/api/roamkv/v1/sink", tag = "cloud sink",
    responses((status = 200, description = "the cloud sink's state, lag and hold")))]
async fn sink_status(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    let view = state.blocking(|s| Ok(s.cloud_view())).await?;
    Ok(Json(json!(view)).into_response())
}

#[utoipa::path(get, path = "/api/roamkv/v1/departures", tag = "cloud sink",
    responses((status = 200, description = "departures waiting for the cloud sink")))]
async fn departures(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    let waiting = state.departing.list();
    Ok(Json(json!({
        "onDepart": state.config.on_depart.name(),
        "waiting": waiting,
    }))
    .into_response())
}
