//! Errors as EdgeX answers them: an HTTP status and an ErrorResponse body
//! `{"apiVersion":"v3","statusCode":N,"message":"..."}` whose message names the problem.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use roamkv_wire::WireError;
use roamkv_wire::edgex::contract::API_VERSION;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Sent as the `Location` header: where the client should go instead (a device that moved
    /// to another edge).
    pub location: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            location: None,
        }
    }

    pub fn with_location(mut self, location: Option<String>) -> ApiError {
        self.location = location;
        self
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// Maps an engine error: the caller's input is a 400 (413 for size limits); no room in the
    /// log budget (or too many devices) is a 507 that changed nothing and may be retried; the
    /// rest 500.
    pub fn from_engine(error: roamkv_engine::Error) -> ApiError {
        use roamkv_engine::Error as E;
        match error {
            E::ValueTooLarge { .. } | E::BatchTooLarge { .. } => {
                ApiError::too_large(error.to_string())
            }
            e if e.is_invalid_input() => ApiError::bad_request(e.to_string()),
            e if e.is_retryable() => ApiError::new(StatusCode::INSUFFICIENT_STORAGE, e.to_string()),
            e => ApiError::internal(format!("storage engine: {e}")),
        }
    }
}

/// The body of every refusal, as the OpenAPI document shows it (`error_body` makes it).
#[derive(utoipa::ToSchema)]
#[allow(non_snake_case, dead_code)]
pub struct ApiErrorBody {
    /// Always "v3" (EdgeX's ErrorResponse).
    apiVersion: String,
    /// The HTTP status again.
    statusCode: u16,
    /// What was wrong, in words.
    message: String,
}

pub fn error_body(status: StatusCode, message: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": API_VERSION,
        "statusCode": status.as_u16(),
        "message": message,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(status = self.status.as_u16(), message = %self.message, "request failed");
        } else {
            tracing::debug!(status = self.status.as_u16(), message = %self.message, "request refused");
        }
        let mut response =
            (self.status, Json(error_body(self.status, &self.message))).into_response();
        if let Some(location) = self
            .location
            .and_then(|l| axum::http::HeaderValue::from_str(&l).ok())
        {
            response
                .headers_mut()
                .insert(axum::http::header::LOCATION, location);
        }
        response
    }
}

impl From<tokio::task::JoinError> for ApiError {
    fn from(e: tokio::task::JoinError) -> ApiError {
        ApiError::internal(format!("engine task failed: {e}"))
    }
}

/// The wire contract's refusals keep the statuses they always had: bad input 400, over a limit
/// 413, a reading that would not encode 500; the message goes out unchanged.
impl From<WireError> for ApiError {
    fn from(e: WireError) -> ApiError {
        match e {
            WireError::BadInput { message } => ApiError::bad_request(message),
            WireError::TooLarge { message } => ApiError::too_large(message),
            WireError::Encoding { message } => ApiError::internal(message),
        }
    }
}
