//! Reading a request body within the size limit (413) and the body timeout (408), so that an
//! oversized or trickled body is refused with a JSON error instead of holding memory or a slot.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use tokio::time::Instant;

use std::time::Duration;

use super::error::ApiError;

/// How much of a body past the limit is still read, and dropped, before the 413 goes out.
/// A server that closes its side while request bytes sit unread makes the kernel reset the
/// connection, and a client that writes its whole body before it reads (Python's urllib, curl
/// over TLS) sees a broken pipe or an EOF in the TLS stream instead of the 413. So an oversized
/// body is read to its end and dropped, as nginx's lingering close does: nothing of it is kept,
/// it costs the link's bytes and one request slot for at most the body timeout, and the
/// connection stays open for the next request. A body still arriving past this allowance or
/// the body timeout is cut off unread: a huge upload costs at most that much reading.
const OVERFLOW_DRAIN_BYTES_MAX: u64 = 1 << 30;

/// A body's bounds (`--body-bytes-max`, `--body-timeout-secs`).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    pub bytes_max: usize,
    pub timeout: Duration,
}

pub async fn read_body(
    limits: &BodyLimits,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    let max = limits.bytes_max as u64;
    let deadline = Instant::now() + limits.timeout;
    let declared_over = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&len| len > max);
    let declared_too_large = |len: u64| {
        ApiError::too_large(format!(
            "request body is {len} bytes; the limit is {max} bytes"
        ))
    };
    // A client that sent `Expect: 100-continue` waits for the go-ahead before it sends the
    // body (curl does for bodies over 1 MiB): it gets the 413 at once and sends nothing. So does
    // a body declared larger than the allowance for reading past the limit.
    let waits_to_send = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if let Some(len) = declared_over
        && (waits_to_send || len - max > OVERFLOW_DRAIN_BYTES_MAX)
    {
        return Err(declared_too_large(len));
    }
    // A body declared too large is read only to be dropped: nothing of it is kept.
    let keep_bytes_max = if declared_over.is_some() { 0 } else { max };
    let (read, frames, received) = read_within(body, keep_bytes_max, max, deadline).await;
    if let Some(len) = declared_over {
        // Whatever the reading's outcome, the answer is the 413.
        return Err(declared_too_large(len));
    }
    match read {
        Err(_) if received <= max => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                limits.timeout.as_secs()
            ),
        )),
        Ok(Err(message)) if received <= max => Err(ApiError::bad_request(message)),
        _ if received > max => Err(ApiError::too_large(format!(
            "request body is over the limit of {max} bytes"
        ))),
        _ => Ok(concat(frames)),
    }
}

/// Reads the body until its end, an error, `deadline`, or `max + OVERFLOW_DRAIN_BYTES_MAX`
/// bytes, keeping the frames while at most `keep_bytes_max` bytes have arrived. Returns how the
/// reading ended, the kept frames and the bytes received.
async fn read_within(
    mut body: Body,
    keep_bytes_max: u64,
    max: u64,
    deadline: Instant,
) -> (
    Result<Result<(), &'static str>, tokio::time::error::Elapsed>,
    Vec<Bytes>,
    u64,
) {
    let mut frames: Vec<Bytes> = Vec::new();
    let mut received: u64 = 0;
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| "the request body could not be read")?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            received += data.len() as u64;
            if received > max.saturating_add(OVERFLOW_DRAIN_BYTES_MAX) {
                break;
            }
            if received <= keep_bytes_max {
                frames.push(data);
            } else if !frames.is_empty() {
                // Over the limit: what was kept goes now, not after the rest is read.
                frames = Vec::new();
            }
        }
        Ok(())
    })
    .await;
    (read, frames, received)
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
