//! Reading a request body within the size limit (413) and the body timeout (408), so that an
//! oversized or trickled body is refused with a JSON error instead of holding memory or a slot.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    let max = state.config.body_bytes_max;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > max as u64
    {
        return Err(too_large(len, max));
    }
    match tokio::time::timeout(state.config.body_timeout, axum::body::to_bytes(body, max)).await {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                state.config.body_timeout.as_secs()
            ),
        )),
        Ok(Err(e)) => {
            let inner = e.into_inner();
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*inner);
            let mut limit_hit = false;
            while let Some(error) = cause {
                limit_hit |= error.is::<http_body_util::LengthLimitError>();
                cause = error.source();
            }
            if limit_hit {
                Err(ApiError::too_large(format!(
                    "request body is over the limit of {max} bytes"
                )))
            } else {
                Err(ApiError::bad_request("the request body could not be read"))
            }
        }
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

fn too_large(len: u64, max: usize) -> ApiError {
    ApiError::too_large(format!(
        "request body is {len} bytes; the limit is {max} bytes"
    ))
}
