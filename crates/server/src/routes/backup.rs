//! `POST /api/roamkv/v1/backup`: a consistent copy of the running server's data directory as a
//! tar stream (`roamkv_engine::backup`), for `roamkv backup --server URL --to DIR`.
//!
//! The body (JSON, optional) says what the client's backup set already holds (`Have`): segments
//! and table files of the same log with the same name and length are not sent again. The
//! snapshot is taken before the answer starts, so a snapshot that fails is an error status; the
//! files then stream from a blocking thread through a bounded channel (`STREAM_CHUNKS_MAX`
//! chunks of `STREAM_CHUNK_BYTES`): a slow client slows the copy, never grows the server's
//! memory, and a client that goes away ends the copy at its next write, which releases the
//! snapshot's hold on the log and its staged files at once.

use std::io::Write;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use roamkv_engine::backup::{Have, write_tar};

use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::routes::stream;
use crate::state::Shared;

/// The server's own files, copied with the engine's (docs/FORMAT.md, "DIR/server").
const SERVER_DIR: &str = "server";
/// Chunks queued for a client, and their size: at most 8 MiB of a backup in memory.
const STREAM_CHUNKS_MAX: usize = 8;
const STREAM_CHUNK_BYTES: usize = 1 << 20;

pub fn routes() -> Router<Shared> {
    Router::new().route("/backup", post(backup))
}

#[utoipa::path(post, path = "/api/roamkv/v1/backup", tag = "export and backup",
    request_body(content = String, content_type = "application/json", description = "optional: what the client's backup set holds `{\"log_id\", \"files\"}`"),
    responses((status = 200, description = "the snapshot as a tar stream", content_type = "application/x-tar"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody)))]
async fn backup(
    State(state): State<Shared>,
    _: NoQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let have: Have = if body.iter().all(u8::is_ascii_whitespace) {
        Have::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body is not what the backup set holds ({{\"log_id\",\"files\"}}): {e}"
            ))
        })?
    };
    let engine = std::sync::Arc::clone(&state.engine);
    let snapshot = tokio::task::spawn_blocking(move || engine.snapshot(&[SERVER_DIR]))
        .await?
        .map_err(|e| ApiError::internal(format!("taking the backup's snapshot: {e}")))?;
    let position = snapshot.position().to_string();
    tracing::info!(%position, files = snapshot.files().len(), "backup started");
    let (writer, chunks) = stream::channel(STREAM_CHUNKS_MAX);
    tokio::task::spawn_blocking(move || {
        let mut out = std::io::BufWriter::with_capacity(STREAM_CHUNK_BYTES, writer.clone());
        let sent = write_tar(&snapshot, &have, &mut out).and_then(|summary| {
            out.flush()
                .map_err(|e| roamkv_engine::Error::Backup(format!("sending the backup: {e}")))
                .map(|()| summary)
        });
        match sent {
            Ok(summary) => tracing::info!(
                files = summary.files.len(),
                sent = summary.files.iter().filter(|f| !f.taken).count(),
                "backup sent"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "backup stopped");
                // The client sees the stream end before its summary (a partial backup).
                writer.fail(e.to_string());
            }
        }
        drop(snapshot);
    });
    let mut response = Body::from_stream(chunks).into_response();
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    if let Ok(value) = HeaderValue::from_str(&position) {
        headers.insert("x-roamkv-backup-position", value);
    }
    Ok(response)
}
