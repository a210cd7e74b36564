//! The OpenAPI document of the native API (`/api/roamkv/v1`), generated from the handlers'
//! `#[utoipa::path]` annotations and served at `GET /api/roamkv/v1/openapi.json`.
//! `crates/server/tests/openapi.rs` checks it against the router's routes (both ways) and a
//! running server; the Python package's tests check the client's calls against it. The EdgeX
//! routes (`/api/v3`) are EdgeX's own document's (crates/server/tests/edgex_openapi).

use axum::Json;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "roamkv native API",
        description = "What EdgeX core-data lacks: batches, paged scans, exports, retention, \
            backups, the cloud sink and handoffs (docs/SERVER.md, \"Native API\"). Every route \
            needs the bearer token when the server has one (401 without it; 403 for a write \
            with the read-only token); past the in-flight limit a request gets 429.",
    ),
    paths(
        crate::routes::native::post_readings,
        crate::routes::native::list_devices,
        crate::routes::native::engine_stats,
        crate::routes::native::depart_device,
        crate::routes::native::latest,
        crate::routes::native::scan,
        crate::routes::native::put_retention,
        crate::routes::native::get_retention,
        crate::routes::native::delete_retention,
        crate::routes::native::list_retention,
        crate::routes::cloud::sink_status,
        crate::routes::cloud::departures,
        crate::handoff::send::edge,
        crate::handoff::send::start,
        crate::handoff::receive::arrived,
        crate::handoff::send::list,
        crate::handoff::send::status,
        crate::handoff::send::abort_or_cancel,
        crate::handoff::receive::begin,
        crate::handoff::receive::chunk,
        crate::handoff::receive::commit,
        crate::routes::backup::backup,
        crate::routes::export::export,
        document,
    ),
    components(schemas(crate::http::error::ApiErrorBody)),
    modifiers(&BearerToken),
    security(("bearer" = [])),
)]
struct NativeApi;

/// The bearer token every route takes (`--auth-token-file`, `--read-only-token-file`).
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

#[utoipa::path(get, path = "/api/roamkv/v1/openapi.json", tag = "api",
    responses((status = 200, description = "this document", content_type = "application/json")))]
pub async fn document(_: crate::http::query::NoQuery) -> Response {
    let mut response = Json(NativeApi::openapi()).into_response();
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    response
}
