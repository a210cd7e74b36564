//! Every way a request reaches the server, and the layers it passes: the route table (here) of
//! EdgeX core-data's v3 API (`v3/`), the native API (`native`, `export`, `backup`, `cloud`: the
//! sink's and departures' views) and its OpenAPI document (`openapi`), and EdgeX's message bus
//! (`mqtt`: events in as device services publish them). Each handler is engine calls through
//! the server's state (state.rs); the parts they use (ingest, departures, handoff, retention)
//! never name that state, so they sit below it. The layers: metrics (latency by route), bearer
//! auth (constant-time compare), and the concurrency limit (429 rather than an unbounded queue).

mod auth;
pub mod backup;
pub mod cloud;
pub mod export;
pub mod mqtt;
pub mod native;
pub mod openapi;
pub mod stream;
pub mod v3;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};

use crate::clock::now_ms;
use crate::http::error::ApiError;
use crate::http::query::NoQuery;
use crate::observability::metrics::exposition::{self, Format};
use crate::observability::metrics::{RequestLabels, RouteLabels};
use crate::observability::status;
use crate::state::Shared;

/// The header EdgeX traces a request by.
const CORRELATION_HEADER: &str = "x-correlation-id";

/// X-Correlation-ID on the EdgeX routes, as core-data handles it: a request's id is echoed on its
/// answer, a request without one (or with an empty one, as EdgeX's middleware takes it) gets a
/// new one (v4) on its answer; one that is not a UUID (the contract's format) is refused with
/// 400, and changes nothing.
async fn correlation_id(request: Request, next: Next) -> Response {
    let id = match request.headers().get(CORRELATION_HEADER) {
        None => new_correlation_id(),
        Some(value) if value.is_empty() => new_correlation_id(),
        Some(value) => match value
            .to_str()
            .ok()
            // The hyphenated form only (36 characters), the contract's `format: uuid`.
            .filter(|t| t.len() == 36 && uuid::Uuid::parse_str(t).is_ok())
        {
            // The request's own value, echoed as it came (no copy of its text).
            Some(_) => value.clone(),
            None => {
                return ApiError::bad_request(format!("X-Correlation-ID {value:?} is not a UUID"))
                    .into_response();
            }
        },
    };
    let mut response = next.run(request).await;
    response.headers_mut().insert(CORRELATION_HEADER, id);
    response
}

/// A new correlation id: a random (v4) UUID, hyphenated. Its bytes come from the thread's
/// generator (`rand::random`, seeded from the OS), not from a `getrandom` call per request as
/// `Uuid::new_v4` makes.
fn new_correlation_id() -> HeaderValue {
    let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    let mut text = [0; uuid::fmt::Hyphenated::LENGTH];
    let text = id.hyphenated().encode_lower(&mut text);
    HeaderValue::from_str(text).expect("a UUID's text is a header value")
}

/// EdgeX core-data's v3 routes (under /api/v3), with its correlation id.
fn v3_routes() -> Router<Shared> {
    Router::new()
        .route(
            "/event/{service_name}/{profile_name}/{device_name}/{source_name}",
            post(v3::add_event),
        )
        .route("/event/all", get(v3::all_events))
        .route("/event/count", get(v3::event_count))
        .route(
            "/event/count/device/name/{name}",
            get(v3::event_count_by_device),
        )
        .route(
            "/event/device/name/{name}",
            get(v3::events_by_device).delete(v3::delete_device),
        )
        .route("/event/start/{start}/end/{end}", get(v3::events_by_time))
        .route("/event/age/{age}", delete(v3::delete_by_age))
        .route(
            "/event/id/{id}",
            get(v3::event_by_id).delete(v3::delete_event_by_id),
        )
        .route("/reading/all", get(v3::all_readings))
        .route("/reading/count", get(v3::reading_count))
        .route(
            "/reading/count/device/name/{name}",
            get(v3::reading_count_by_device),
        )
        .route("/reading/device/name/{name}", get(v3::readings_by_device))
        .route(
            "/reading/resourceName/{resource_name}",
            get(v3::readings_by_resource),
        )
        .route(
            "/reading/device/name/{name}/resourceName/{resource_name}",
            get(v3::readings_by_device_and_resource),
        )
        .route(
            "/reading/device/name/{name}/resourceName/{resource_name}/start/{start}/end/{end}",
            get(v3::readings_by_device_resource_time),
        )
        .route(
            "/reading/start/{start}/end/{end}",
            get(v3::readings_by_time),
        )
        .route(
            "/reading/resourceName/{resource_name}/start/{start}/end/{end}",
            get(v3::readings_by_resource_time),
        )
        .route(
            "/reading/device/name/{name}/start/{start}/end/{end}",
            get(v3::readings_by_device_time),
        )
        .route("/secret", post(v3::secret_not_supported))
        .route("/ping", get(v3::ping))
        .route("/version", get(v3::version))
        .route("/config", get(v3::config))
        .layer(middleware::from_fn(correlation_id))
}

pub fn build(state: Shared) -> Router {
    Router::new()
        .nest("/api/v3", v3_routes())
        .nest(
            "/api/roamkv/v1",
            native::routes()
                .merge(export::routes())
                .merge(cloud::routes())
                .merge(backup::routes())
                .merge(crate::handoff::routes().with_state(Arc::clone(&state.handoff))),
        )
        .route("/api/roamkv/v1/openapi.json", get(openapi::document))
        .route("/", get(status_page))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            limit_in_flight,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), measure))
        .with_state(state)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", request.method(), request.uri().path()),
    )
}

/// Liveness: the process answers.
async fn health(_: NoQuery) -> Response {
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"status": "ok"})),
    )
        .into_response()
}

/// Readiness: the engine is open and the server is not shutting down.
/// 200 while the server takes everything it was configured to take: 503 once shutdown began,
/// and while a configured MQTT broker is not connected (ingest from the bus is stopped; a load
/// balancer or an orchestrator should know).
async fn ready(State(state): State<Shared>, _: NoQuery) -> Response {
    if !state.is_ready() {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    if let Some(mqtt) = &state.config.mqtt
        && state.metrics.mqtt.connected.get() == 0
    {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not subscribed to the MQTT broker {}:{}: events on the bus are not being \
                 taken (reconnecting)",
                mqtt.host, mqtt.port
            ),
        )
        .into_response();
    }
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"status": "ready"})),
    )
        .into_response()
}

/// The metrics, in the format the scraper asks for (OpenMetrics, or the classic text: see
/// observability/metrics/exposition.rs).
async fn metrics(
    State(state): State<Shared>,
    _: NoQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let text = state
        .blocking(|s| Ok(s.metrics.render(&s.engine, &s.cloud_view())))
        .await?;
    let text = match format {
        Format::OpenMetrics => text,
        Format::Classic => exposition::classic(&text),
    };
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    Ok(response)
}

async fn status_page(State(state): State<Shared>, _: NoQuery) -> Result<Html<String>, ApiError> {
    state
        .blocking(|s| {
            let stats = s.engine.stats();
            let devices = s.devices();
            let cloud = s.cloud_view();
            let history = s.history.lock();
            Ok(Html(status::render(&status::PageInput {
                stats: &stats,
                cloud: &cloud,
                devices: &devices,
                history: &history,
                now_ms: now_ms(),
                management_time_ms: s.config.management_time_ms,
                segment_bytes: s.config.sizes.segment_bytes,
                version: env!("CARGO_PKG_VERSION"),
            })))
        })
        .await
}

/// Serves at most `concurrent_requests_max` requests at once; beyond that 429 at once, so a
/// burst cannot queue without bound. /health is exempt.
async fn limit_in_flight(State(state): State<Shared>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    match Arc::clone(&state.in_flight).try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => {
            let mut response = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "the server is already serving {} requests (its limit); retry shortly",
                    state.config.concurrent_requests_max
                ),
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

/// Counts every request by route and status, and its latency by route; with the access log on,
/// logs a line for it.
async fn measure(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    // What the access log needs, taken only when it is on (it may change on SIGHUP).
    let access = state.access_log.load(Ordering::Relaxed).then(|| {
        let client = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.to_string());
        (request.uri().path().to_string(), client)
    });
    let started = Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    if let Some((path, client)) = access {
        tracing::info!(
            target: "roamkv::access",
            method = %method,
            route = %route,
            path = %path,
            status = response.status().as_u16(),
            ms = elapsed.as_secs_f64() * 1e3,
            client = client.as_deref().unwrap_or("-"),
            "request"
        );
    }
    state
        .metrics
        .request_seconds
        .get_or_create(&RouteLabels {
            route: route.clone(),
        })
        .observe(elapsed.as_secs_f64());
    state
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}
