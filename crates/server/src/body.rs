//! Reading a request body within the size limit (413) and the body timeout (408), so that an
//! oversized or trickled body is refused with a JSON error instead of holding memory or a slot.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::state::AppState;

/// How much of a body past the limit is still read, and dropped, before the 413 goes out.
/// A server that closes its side while request bytes sit unread makes the kernel reset the
/// connection, and a client that is still sending sees a broken pipe instead of the 413 (CI saw
/// exactly that for a chunked body 6 KiB over a 64 KiB limit). Reading on lets a body that is
/// somewhat too large get its answer; past this allowance the connection is closed unread, so a
/// huge upload costs at most this much reading, within the body timeout.
const OVERFLOW_DRAIN_BYTES_MAX: u64 = 1 << 20;

pub async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    let max = state.config.body_bytes_max as u64;
    let deadline = Instant::now() + state.config.body_timeout;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > max
    {
        if len - max <= OVERFLOW_DRAIN_BYTES_MAX {
            // Whatever the drain's outcome, the answer is the 413.
            let _ = tokio::time::timeout_at(deadline, drain(body, len)).await;
        }
        return Err(ApiError::too_large(format!(
            "request body is {len} bytes; the limit is {max} bytes"
        )));
    }
    let mut frames: Vec<Bytes> = Vec::new();
    let mut received: u64 = 0;
    let mut body = body;
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| "the request body could not be read")?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            received += data.len() as u64;
            if received > max + OVERFLOW_DRAIN_BYTES_MAX {
                break;
            }
            if received <= max {
                frames.push(data);
            }
        }
        Ok::<(), &str>(())
    })
    .await;
    match read {
        Err(_) if received <= max => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                state.config.body_timeout.as_secs()
            ),
        )),
        Ok(Err(message)) if received <= max => Err(ApiError::bad_request(message)),
        _ if received > max => Err(ApiError::too_large(format!(
            "request body is over the limit of {max} bytes"
        ))),
        _ => Ok(concat(frames)),
    }
}

/// Reads and drops a body of `len` bytes (the declared length), stopping early on an error.
async fn drain(mut body: Body, len: u64) {
    let mut received: u64 = 0;
    while received < len {
        match body.frame().await {
            Some(Ok(frame)) => received += frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => return,
        }
    }
}

/// One frame, the common case, is returned as is; several are copied into one buffer.
fn concat(mut frames: Vec<Bytes>) -> Bytes {
    if frames.len() == 1 {
        return frames.pop().unwrap_or_default();
    }
    let mut joined = Vec::with_capacity(frames.iter().map(Bytes::len).sum());
    for frame in &frames {
        joined.extend_from_slice(frame);
    }
    Bytes::from(joined)
}
