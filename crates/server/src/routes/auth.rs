//! Who may call what: bearer tokens on every route but the probes, checked in constant time;
//! the read-only token may GET and HEAD; the status page also takes a token as a Basic
//! password (a browser sends no bearer token, but asks for a password on a Basic challenge).
//! The tokens in force are the state's, which SIGHUP may replace (settings/reload.rs).

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::http::error::ApiError;
use crate::state::Shared;

/// Routes that answer without a token: probes (liveness, readiness) must work without
/// credentials, and none of them says anything of the data.
const OPEN_ROUTES: [&str; 3] = ["/health", "/ready", "/api/v3/ping"];

/// The status page's path.
const STATUS_PAGE: &str = "/";

/// Bearer auth on every route but OPEN_ROUTES, when a token is configured: the read-write token
/// may do anything, the read-only token GET and HEAD (403 otherwise). The status page takes
/// either token as the password of HTTP Basic auth too, so that a browser can open it.
pub async fn authenticate(State(state): State<Shared>, request: Request, next: Next) -> Response {
    // The tokens in force now (SIGHUP may replace them), copied out of the lock at once.
    let tokens = state.tokens.read().clone();
    let Some(token) = &tokens.write else {
        return next.run(request).await;
    };
    if OPEN_ROUTES.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    // The status page also takes the token as a Basic password, which a browser can send.
    let status_page = request.uri().path() == STATUS_PAGE;
    let authorization = request.headers().get(header::AUTHORIZATION);
    let basic = authorization
        .filter(|_| status_page)
        .and_then(|v| basic_password(v.as_bytes()));
    let presented = authorization
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .or(basic.as_deref());
    // ct_eq compares in time independent of where the bytes differ (lengths may still differ).
    let presents = |expected: Option<&Vec<u8>>| {
        presented
            .zip(expected)
            .is_some_and(|(p, t)| bool::from(p.ct_eq(t.as_slice())))
    };
    if presents(Some(token)) {
        return next.run(request).await;
    }
    if presents(tokens.read_only.as_ref()) {
        if matches!(*request.method(), Method::GET | Method::HEAD) {
            return next.run(request).await;
        }
        return ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this token may only read (GET, HEAD); {} needs the read-write token",
                request.method()
            ),
        )
        .into_response();
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        if presented.is_some() {
            "the bearer token is not valid"
        } else {
            "this route needs an Authorization: Bearer <token> header"
        },
    )
    .into_response();
    let challenges = response.headers_mut();
    challenges.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    if status_page {
        // A browser asks for a user name and a password: the token is the password.
        challenges.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(
                r#"Basic realm="roamkv status page (password: a token)", charset="UTF-8""#,
            ),
        );
    }
    response
}

/// The password of an `Authorization: Basic base64(user:password)` header (any user name).
fn basic_password(value: &[u8]) -> Option<Vec<u8>> {
    let encoded = value.strip_prefix(b"Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some(decoded[colon + 1..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_basic_header_yields_its_password_whatever_the_user() {
        let header = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("anyone:s3cret:with:colons")
        );
        assert_eq!(
            basic_password(header.as_bytes()),
            Some(b"s3cret:with:colons".to_vec())
        );
        assert_eq!(basic_password(b"Basic !!!"), None);
        assert_eq!(basic_password(b"Bearer x"), None);
    }
}
