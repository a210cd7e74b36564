//! The native API, for what EdgeX lacks (under /api/roamkv/v1):
//! - `POST /readings`: a batch of readings as JSON lines, or in the compact binary form
//!   (`Content-Type: application/vnd.roamkv.batch`, `roamkv_wire::batch`), one engine batch
//!   (atomic);
//! - `GET /devices`: every device with its tier and age;
//! - `GET /stats`: the engine's statistics, every field of `roamkv_engine::Stats`
//!   (`roamkv_wire::report`; `roamkv stats --json` prints the same);
//! - `GET /devices/{device}/latest[?sensor=S]`: the newest reading of each sensor;
//! - `GET /devices/{device}/readings?sensor=&from=&to=&limit=&after=`: a paged scan whose
//!   `next` token resumes it (each page is one engine call that reads only that page); `from`
//!   and `to` are RFC 3339 times, relative times (`-1h`) or epoch milliseconds
//!   (`roamkv_wire::time_arg`), `from_ns` and `to_ns` the same in nanoseconds;
//! - `DELETE /devices/{device}`: the device departs (200), or under `--on-depart cloud` is
//!   fenced and departs once the cloud sink has its readings (202, departures/departing.rs);
//! - `GET /sink`, `GET /departures`: the cloud sink and the departures waiting for it
//!   (cloud.rs);
//! - `POST /backup`: a consistent copy of the data directory as a tar stream (backup.rs);
//! - `GET /export`: readings streamed out as Parquet, Arrow, CSV or JSON lines (export.rs,
//!   merged by the router: it reads its times as the scan does, with `parse_bound`);
//! - `PUT|GET|DELETE /devices/{device}/retention` (`{"max_age_ms": N}`), `GET /retention`: the
//!   device's maximum reading age, kept across restarts and applied every
//!   `--retention-interval-s` (retention.rs).
//!
//! A query parameter a route does not take is refused with 400 naming it (`crate::http::query`).
//!
//! Readings carry `ts_ns` (nanoseconds since the epoch, the engine's key) and `ts` (the same
//! in RFC 3339). A line written to `POST /readings` gives `ts_ns`, or `ts` in RFC 3339 or epoch
//! milliseconds.

use std::collections::HashMap;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use roamkv_engine::ScanCursor;
use serde::Deserialize;
use serde_json::{Value, json};

use roamkv_wire::KeyedReading;
use roamkv_wire::batch;
use roamkv_wire::edgex::event_index::is_deleted;
use roamkv_wire::edgex::readable::reading_json;
use roamkv_wire::names::{check_device_name, check_not_internal};
use roamkv_wire::report;
use roamkv_wire::time_arg::parse_time;

use crate::clock::now_ms;
use crate::http::body::read_body;
use crate::http::error::ApiError;
use crate::http::query::{NoQuery, parameters};
use crate::retention;
use crate::state::{DepartOutcome, Shared};

/// The query parameters of `GET /devices/{device}/latest`; any other is refused with 400.
const LATEST_PARAMETERS: [&str; 1] = ["sensor"];

/// The query parameters of `GET /devices/{device}/readings`: a typo (`form=-1m`) must not
/// widen the scan to the whole history.
const SCAN_PARAMETERS: [&str; 7] = ["sensor", "from", "to", "from_ns", "to_ns", "limit", "after"];

/// Default and largest page of a native scan.
const PAGE_READINGS_DEFAULT: usize = 1000;
const PAGE_READINGS_MAX: usize = 10_000;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/readings", post(post_readings))
        .route("/devices", get(list_devices))
        .route("/stats", get(engine_stats))
        .route("/devices/{device}", axum::routing::delete(depart_device))
        .route("/devices/{device}/latest", get(latest))
        .route("/devices/{device}/readings", get(scan))
        .route(
            "/devices/{device}/retention",
            get(get_retention)
                .put(put_retention)
                .delete(delete_retention),
        )
        .route("/retention", get(list_retention))
}

/// One line of a batch. `value` is text; `value_b64` carries binary values.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    device: String,
    sensor: String,
    #[serde(default)]
    ts_ns: Option<i64>,
    #[serde(default)]
    ts: Option<Value>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_b64: Option<String>,
}

fn parse_lines(body: &[u8], max: usize) -> Result<Vec<KeyedReading>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        if out.len() == max {
            return Err(ApiError::too_large(format!(
                "batch has more than {max} readings (the limit)"
            )));
        }
        let at = |msg: String| ApiError::bad_request(format!("line {}: {msg}", i + 1));
        let line: Line = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let ts_ns = match (line.ts_ns, &line.ts) {
            (Some(ns), None) => ns,
            (None, Some(Value::Number(ms))) => roamkv_engine::ms_to_ns(
                ms.as_i64()
                    .ok_or_else(|| at(format!("ts {ms} is not an integer")))?,
            ),
            (None, Some(Value::String(text))) => parse_time(text).map_err(at)?,
            _ => {
                return Err(at(
                    "give exactly one of ts_ns (nanoseconds) and ts (RFC 3339 or milliseconds)"
                        .into(),
                ));
            }
        };
        let value = match (line.value, line.value_b64) {
            (Some(v), None) => v.into_bytes(),
            (None, Some(b)) => STANDARD
                .decode(b)
                .map_err(|e| at(format!("value_b64 is not base64: {e}")))?,
            _ => return Err(at("give exactly one of value and value_b64".into())),
        };
        let record = roamkv_engine::Record {
            device: &line.device,
            sensor: &line.sensor,
            ts_ns,
            value: &value,
        };
        roamkv_engine::validate_record(&record).map_err(|e| at(e.to_string()))?;
        out.push(KeyedReading {
            device: line.device,
            sensor: line.sensor,
            ts_ns,
            value,
        });
    }
    if out.is_empty() {
        return Err(ApiError::bad_request("the batch has no readings"));
    }
    Ok(out)
}

#[utoipa::path(post, path = "/api/roamkv/v1/readings", tag = "readings",
    request_body(content = String, content_type = "application/jsonl",
        description = "JSON lines `{\"device\",\"sensor\",\"ts_ns\"|\"ts\",\"value\"|\"value_b64\"}`, or a binary batch (`application/vnd.roamkv.batch`)"),
    responses((status = 201, description = "written as one engine batch: `{\"written\": N}`"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 409, description = "a device is fenced (handed off)", body = crate::http::error::ApiErrorBody),
        (status = 413, description = "over the batch or value limits", body = crate::http::error::ApiErrorBody),
        (status = 507, description = "no room in the log's budget; nothing written", body = crate::http::error::ApiErrorBody)))]
async fn post_readings(
    State(state): State<Shared>,
    _: NoQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let result = async {
        let bytes = read_body(&state.body_limits(), &headers, body).await?;
        let binary = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(batch::CONTENT_TYPE));
        let readings = if binary {
            batch::decode(&bytes, state.config.batch_readings_max)?
        } else {
            parse_lines(&bytes, state.config.batch_readings_max)?
        };
        // The server's own devices (U+0001 first) take no client writes.
        for (i, r) in readings.iter().enumerate() {
            check_not_internal(&format!("reading {i}: device"), &r.device)?;
        }
        let n = readings.len();
        state.write(readings, "native", bytes.len()).await?;
        Ok(n)
    }
    .await;
    match result {
        Ok(n) => Ok((StatusCode::CREATED, Json(json!({"written": n}))).into_response()),
        Err(e) => {
            state.reject("native", &e);
            Err(e)
        }
    }
}

#[utoipa::path(get, path = "/api/roamkv/v1/devices", tag = "devices",
    responses((status = 200, description = "`{\"devices\": [{\"device\",\"tier\",\"registered_at_ms\",\"age_ms\",\"log_readings\",\"lower_runs\"}]}`")))]
async fn list_devices(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    let devices = state.blocking(|s| Ok(s.devices())).await?;
    let now = now_ms();
    let devices: Vec<Value> = devices
        .iter()
        .map(|d| report::device_to_json(d, now))
        .collect();
    Ok(Json(json!({ "devices": devices })).into_response())
}

/// The engine's statistics, as `roamkv stats --json` prints them (`roamkv_wire::report`).
#[utoipa::path(get, path = "/api/roamkv/v1/stats", tag = "devices",
    responses((status = 200, description = "every field of the engine's `Stats`, and `write_amplification`")))]
async fn engine_stats(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    let stats = state.blocking(|s| Ok(s.engine.stats())).await?;
    Ok(Json(report::stats_to_json(&stats)).into_response())
}

#[utoipa::path(get, path = "/api/roamkv/v1/devices/{device}/latest", tag = "readings",
    params(("device" = String, Path, description = "the device"),
        ("sensor" = Option<String>, Query, description = "only this sensor")),
    responses((status = 200, description = "`{\"readings\": [...]}`: the newest reading of each sensor"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody)))]
async fn latest(
    State(state): State<Shared>,
    Path(device): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = parameters(query.as_deref(), &LATEST_PARAMETERS)?;
    check_device_name(&device)?;
    let readings = state
        .blocking(move |s| {
            s.engine
                .latest(&device, query.get("sensor").map(String::as_str))
                .map_err(ApiError::from_engine)
        })
        .await?;
    let readings: Vec<Value> = readings
        .into_iter()
        .filter(|r| !is_deleted(&r.value))
        .map(reading_json)
        .collect();
    Ok(Json(json!({ "readings": readings })).into_response())
}

/// The continuation token: base64url of "sensor NUL ts" (ids hold no NUL).
fn encode_token(cursor: &ScanCursor) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}\0{}", cursor.sensor, cursor.ts_ns))
}

fn decode_token(token: &str) -> Result<ScanCursor, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "after token {token:?} is not one this server gave out"
        ))
    };
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    let (sensor, ts) = text.split_once('\0').ok_or_else(bad)?;
    Ok(ScanCursor {
        sensor: sensor.to_string(),
        ts_ns: ts.parse().map_err(|_| bad())?,
    })
}

/// A window bound: `NAME_ns` (integer nanoseconds) or `NAME` (`roamkv_wire::time_arg`), not both.
pub(crate) fn parse_bound(
    query: &HashMap<String, String>,
    name: &str,
    default: i64,
) -> Result<i64, ApiError> {
    let ns_name = format!("{name}_ns");
    match (query.get(name), query.get(&ns_name)) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(format!(
            "give {name} or {ns_name}, not both"
        ))),
        (Some(text), None) => {
            parse_time(text).map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
        }
        (None, Some(text)) => text.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "{ns_name} {text:?} is not an integer (nanoseconds since the epoch)"
            ))
        }),
        (None, None) => Ok(default),
    }
}

#[utoipa::path(get, path = "/api/roamkv/v1/devices/{device}/readings", tag = "readings",
    params(("device" = String, Path, description = "the device"),
        ("sensor" = Option<String>, Query, description = "only this sensor"),
        ("from" = Option<String>, Query, description = "first time: RFC 3339, relative (-1h) or epoch ms"),
        ("to" = Option<String>, Query, description = "end time (exclusive), the same forms"),
        ("from_ns" = Option<i64>, Query, description = "first time in ns"),
        ("to_ns" = Option<i64>, Query, description = "end time in ns"),
        ("limit" = Option<usize>, Query, description = "readings per page (default 1000, at most 10000)"),
        ("after" = Option<String>, Query, description = "the last page's `next` token")),
    responses((status = 200, description = "`{\"readings\": [...], \"next\": TOKEN|null}`"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody)))]
async fn scan(
    State(state): State<Shared>,
    Path(device): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let query = parameters(query.as_deref(), &SCAN_PARAMETERS)?;
    check_device_name(&device)?;
    let from = parse_bound(&query, "from", i64::MIN)?;
    let to = parse_bound(&query, "to", i64::MAX)?;
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=PAGE_READINGS_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!("limit {text:?} is not in 1..={PAGE_READINGS_MAX}"))
            })?,
        None => PAGE_READINGS_DEFAULT,
    };
    let after = query.get("after").map(|t| decode_token(t)).transpose()?;
    let sensor = query.get("sensor").cloned();
    let page = state
        .blocking(move |s| {
            s.engine
                .scan_page(&device, sensor.as_deref(), from, to, after.as_ref(), limit)
                .map_err(ApiError::from_engine)
        })
        .await?;
    let next = page.next.as_ref().map(encode_token);
    // Readings of events deleted by id are gone from every answer (ingest/event_ids.rs).
    let readings: Vec<Value> = page
        .readings
        .into_iter()
        .filter(|r| !is_deleted(&r.value))
        .map(reading_json)
        .collect();
    Ok(Json(json!({ "readings": readings, "next": next })).into_response())
}

/// The body of `PUT /devices/{device}/retention`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionSetting {
    /// Readings older than now - max_age_ms (by their own timestamps) are deleted.
    max_age_ms: u64,
}

fn parse_retention(body: &[u8]) -> Result<u64, ApiError> {
    let setting: RetentionSetting = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "body is not {{\"max_age_ms\": N}} with N a positive integer: {e}"
        ))
    })?;
    if setting.max_age_ms == 0 {
        return Err(ApiError::bad_request(
            "max_age_ms must be at least 1 (to delete a device, DELETE /devices/{device})",
        ));
    }
    if i64::try_from(setting.max_age_ms).is_err() {
        return Err(ApiError::bad_request(format!(
            "max_age_ms {} is larger than the largest timestamp",
            setting.max_age_ms
        )));
    }
    Ok(setting.max_age_ms)
}

/// Sets the device's retention (durably), applies it once now, and answers what that did.
#[utoipa::path(put, path = "/api/roamkv/v1/devices/{device}/retention", tag = "retention",
    params(("device" = String, Path, description = "the device")),
    request_body(content = String, content_type = "application/json", description = "`{\"max_age_ms\": N}`"),
    responses((status = 200, description = "the setting, and what it did at once"), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 507, description = "over the limit of settings", body = crate::http::error::ApiErrorBody)))]
async fn put_retention(
    State(state): State<Shared>,
    Path(device): Path<String>,
    _: NoQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_device_name(&device)?;
    let bytes = read_body(&state.body_limits(), &headers, body).await?;
    let max_age_ms = parse_retention(&bytes)?;
    let applied = state
        .blocking(move |s| {
            s.retention.set(&device, max_age_ms)?;
            s.apply_retention(&device)
        })
        .await?;
    Ok(Json(json!({
        "max_age_ms": max_age_ms,
        "applied_now": applied,
        "interval_s": state.config.retention_interval.as_secs(),
    }))
    .into_response())
}

#[utoipa::path(get, path = "/api/roamkv/v1/devices/{device}/retention", tag = "retention",
    params(("device" = String, Path, description = "the device")),
    responses((status = 200, description = "`{\"max_age_ms\": N}`"),
        (status = 404, description = "no setting", body = crate::http::error::ApiErrorBody)))]
async fn get_retention(
    State(state): State<Shared>,
    Path(device): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    check_device_name(&device)?;
    match state.retention.get(&device) {
        Some(max_age_ms) => {
            Ok(Json(json!({"device": device, "max_age_ms": max_age_ms})).into_response())
        }
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("device {device:?} has no retention setting"),
        )),
    }
}

#[utoipa::path(delete, path = "/api/roamkv/v1/devices/{device}/retention", tag = "retention",
    params(("device" = String, Path, description = "the device")),
    responses((status = 200, description = "removed (nothing deleted)"),
        (status = 404, description = "no setting", body = crate::http::error::ApiErrorBody)))]
async fn delete_retention(
    State(state): State<Shared>,
    Path(device): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    check_device_name(&device)?;
    let name = device.clone();
    if state.blocking(move |s| s.retention.remove(&name)).await? {
        Ok(Json(json!({"device": device, "removed": true})).into_response())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("device {device:?} has no retention setting"),
        ))
    }
}

#[utoipa::path(get, path = "/api/roamkv/v1/retention", tag = "retention",
    responses((status = 200, description = "every setting, the interval and the limit")))]
async fn list_retention(State(state): State<Shared>, _: NoQuery) -> Response {
    let settings: Vec<Value> = state
        .retention
        .all()
        .into_iter()
        .map(|(device, max_age_ms)| json!({"device": device, "max_age_ms": max_age_ms}))
        .collect();
    Json(json!({
        "retention": settings,
        "interval_s": state.config.retention_interval.as_secs(),
        "default_max_age_ms": state.config.retention_default_ms,
        "limit": retention::SETTINGS_MAX,
    }))
    .into_response()
}

#[utoipa::path(delete, path = "/api/roamkv/v1/devices/{device}", tag = "devices",
    params(("device" = String, Path, description = "the device")),
    responses((status = 200, description = "departed"),
        (status = 202, description = "fenced; departs once the cloud sink has its readings (--on-depart cloud)"),
        (status = 404, description = "not here", body = crate::http::error::ApiErrorBody)))]
async fn depart_device(
    State(state): State<Shared>,
    Path(device): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    let outcome = state
        .blocking(move |s| {
            check_device_name(&device)?;
            if s.engine.devices().iter().any(|d| d.name == device) {
                s.depart(&device, "native")
            } else {
                Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("device {device:?} is not here"),
                ))
            }
        })
        .await?;
    Ok(match outcome {
        DepartOutcome::Departed => (StatusCode::OK, Json(json!({"departed": true}))),
        DepartOutcome::Waiting => (
            StatusCode::ACCEPTED,
            Json(json!({
                "departed": false,
                "waiting": true,
                "message": "the device is fenced and departs once the cloud sink has its readings (GET /api/roamkv/v1/departures)",
            })),
        ),
    }
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_foreign_ones_are_refused() {
        let cursor = ScanCursor {
            sensor: "speed".into(),
            ts_ns: -42,
        };
        assert_eq!(decode_token(&encode_token(&cursor)).expect("token"), cursor);
        assert!(decode_token("!!").is_err());
        assert!(decode_token(&URL_SAFE_NO_PAD.encode("no-separator")).is_err());
    }

    #[test]
    fn batches_name_their_bad_line() {
        let body =
            b"{\"device\":\"a\",\"sensor\":\"s\",\"ts\":1,\"value\":\"x\"}\n{\"device\":\"a\"}\n";
        let error = parse_lines(body, 10).expect_err("bad line");
        assert!(error.message.starts_with("line 2"), "{}", error.message);
        let ok = parse_lines(
            &body[..body.iter().position(|b| *b == b'\n').unwrap_or(0)],
            10,
        )
        .expect("one line");
        assert_eq!(ok.len(), 1);
        let two = b"{\"device\":\"a\",\"sensor\":\"s\",\"ts\":1,\"value\":\"x\"}\n{\"device\":\"a\",\"sensor\":\"s\",\"ts\":2,\"value\":\"x\"}\n";
        assert_eq!(
            parse_lines(two, 1).err().map(|e| e.status),
            Some(StatusCode::PAYLOAD_TOO_LARGE)
        );
        assert!(parse_lines(b"\n\n", 10).is_err());
    }
}
