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
//!
//! The copy is background work (issue 57): its thread runs at a lower CPU and I/O priority than
//! ingest (`roamkv_engine::background`) and reads at most `--backup-rate-mib` MiB/s; /metrics
//! reports the rate, the bytes read, the time waited for the rate, and the backups' outcomes.

use std::io::Write;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use roamkv_engine::background::{self, Pace};
use roamkv_engine::backup::{Have, Snapshot, write_tar};

use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::observability::metrics::OutcomeLabels;
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
    let engine = Arc::clone(&state.engine);
    let snapshot = tokio::task::spawn_blocking(move || engine.snapshot(&[SERVER_DIR]))
        .await?
        .map_err(|e| ApiError::internal(format!("taking the backup's snapshot: {e}")))?;
    let position = snapshot.position().to_string();
    tracing::info!(%position, files = snapshot.files().len(), "backup started");
    let (writer, chunks) = stream::channel(STREAM_CHUNKS_MAX);
    let copy = Copy {
        snapshot,
        have,
        writer,
        state: Arc::clone(&state),
    };
    // Its own thread, at a lower priority than ingest's (a pool's thread could not be raised
    // back: `roamkv_engine::background`).
    std::thread::Builder::new()
        .name("roamkv-backup".into())
        .spawn(move || copy.run())
        .map_err(|e| ApiError::internal(format!("starting the backup's thread: {e}")))?;
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

/// A backup's copy, on its own thread.
struct Copy {
    snapshot: Snapshot,
    have: Have,
    writer: stream::ChannelWriter,
    state: Shared,
}

impl Copy {
    /// Sends the snapshot at the server's backup rate and priority, then drops it (which
    /// releases its hold on the log and its staged files).
    fn run(mut self) {
        if let Err(e) = background::lower_this_thread() {
            tracing::debug!(error = %e, "backup at normal priority");
        }
        let metrics = &self.state.metrics.backup;
        let rate = self.state.config.backup_bytes_per_sec;
        metrics
            .rate_limit_bytes_per_second
            .set(i64::try_from(rate).unwrap_or(i64::MAX));
        let pace = Arc::new(Pace::new(rate));
        self.snapshot.set_pace(Arc::clone(&pace));
        let mut out = std::io::BufWriter::with_capacity(STREAM_CHUNK_BYTES, self.writer.clone());
        let sent = write_tar(&self.snapshot, &self.have, &mut out).and_then(|summary| {
            out.flush()
                .map_err(|e| roamkv_engine::Error::Backup(format!("sending the backup: {e}")))
                .map(|()| summary)
        });
        metrics.read_bytes.inc_by(pace.bytes());
        metrics.paced_seconds.inc_by(pace.slept().as_secs_f64());
        let outcome = match sent {
            Ok(summary) => {
                tracing::info!(
                    files = summary.files.len(),
                    sent = summary.files.iter().filter(|f| !f.taken).count(),
                    paced_s = pace.slept().as_secs_f64(),
                    "backup sent"
                );
                "sent"
            }
            Err(e) => {
                tracing::warn!(error = %e, "backup stopped");
                // The client sees the stream end before its summary (a partial backup).
                self.writer.fail(e.to_string());
                "failed"
            }
        };
        metrics
            .finished
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
}
