//! The EdgeX core-data v3 routes (paths, shapes and status codes as in EdgeX's v3 OpenAPI).
//! Every handler is a thin layer: one engine call (or one bounded series of paged scans); the
//! query's parameters are parsed in `query`; the routes of events by id are in `by_id`.

mod by_id;
mod query;

pub use by_id::{delete_event_by_id, event_by_id};

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use roamkv_engine::limits::INTERNAL_DEVICE_PREFIX;
use roamkv_wire::edgex::aggregate::{Aggregation, make_numeric};
use roamkv_wire::edgex::contract::API_VERSION;
use roamkv_wire::edgex::{self, Decoded, PathNames};
use roamkv_wire::error::WireError;
use roamkv_wire::names::{check_device_name, check_resource_name};

use crate::clock::now_ns;
use crate::http::body::read_body;
use crate::http::error::ApiError;
use crate::http::query::{NoQuery, parameters};
use crate::retention::Applied;
use crate::state::{AppState, Shared};
use query::{Paging, ReadingQuery, apply_paging, window};

pub const SERVICE_NAME: &str = "core-data";

fn ok(body: Value) -> Response {
    (StatusCode::OK, Json(body)).into_response()
}

pub async fn add_event(
    State(state): State<Shared>,
    Path((service, profile, device, source)): Path<(String, String, String, String)>,
    _: NoQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = match read_body(&state.body_limits(), &headers, body).await {
        Ok(bytes) => bytes,
        Err(e) => {
            state.reject("http", &e);
            return Err(e);
        }
    };
    let cbor = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/cbor"));
    let refuse = |e: WireError| {
        let e = ApiError::from(e);
        state.reject("http", &e);
        e
    };
    // JSON is read borrowing its text from the body; CBOR (ciborium reads owned values only)
    // is read owned and viewed.
    let owned = match cbor {
        true => Some(edgex::parse_add_event(&bytes, true).map_err(refuse)?),
        false => None,
    };
    let request = match &owned {
        Some(request) => request.view(),
        None => edgex::parse_add_event_json(&bytes).map_err(refuse)?,
    };
    let path = PathNames {
        profile_name: &profile,
        device_name: &device,
        source_name: &source,
    };
    let id = state
        .ingest_event(request, Some(path), "http", bytes.len())
        .await?;
    state.republisher.publish(&service, path, &id, &bytes, cbor);
    Ok((
        StatusCode::CREATED,
        Json(Created {
            api_version: API_VERSION,
            id: &id,
            status_code: 201,
        }),
    )
        .into_response())
}

/// The answer to a written event: core-data's BaseWithIdResponse. Its fields in the order the
/// `json!` map it replaced wrote them (by name), so the bytes are the same; written from a
/// struct, not a map of owned keys.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Created<'a> {
    api_version: &'a str,
    id: &'a str,
    status_code: u16,
}

/// Newest first, as EdgeX sorts (by origin, descending); ties in a stable key order.
fn newest_first_readings(readings: &mut [Decoded]) {
    readings.sort_by(|a, b| {
        b.stored
            .origin
            .cmp(&a.stored.origin)
            .then_with(|| a.device.cmp(&b.device))
            .then_with(|| a.resource_name.cmp(&b.resource_name))
    });
}

async fn events_response(
    state: Shared,
    query: Option<String>,
    device: Option<String>,
    window_ns: Option<(i64, i64)>,
) -> Result<Response, ApiError> {
    let query = parameters(query.as_deref(), &query::EVENT_PARAMETERS)?;
    let paging = query::paging(&query, state.config.max_result_count)?;
    let numeric = query::numeric(&query)?;
    let events = state
        .blocking(move |s| {
            let (from_ns, to_ns) = scan_range(window_ns);
            let readings = s.collect(device.as_deref(), None, from_ns, to_ns)?;
            let mut events = edgex::group_events(&readings);
            if let Some((start, end)) = window_ns {
                events.retain(|e| (start..=end).contains(&e.origin));
            }
            events.sort_by(|a, b| {
                b.origin
                    .cmp(&a.origin)
                    .then_with(|| a.device_name.cmp(&b.device_name))
                    .then_with(|| a.id.cmp(&b.id))
            });
            Ok(events)
        })
        .await?;
    let (page, total) = apply_paging(events, &paging)?;
    let mut page = serde_json::to_value(page).map_err(|e| ApiError::internal(e.to_string()))?;
    if numeric {
        for event in page.as_array_mut().into_iter().flatten() {
            if let Some(readings) = event.get_mut("readings").and_then(Value::as_array_mut) {
                readings.iter_mut().for_each(make_numeric);
            }
        }
    }
    Ok(ok(json!({
        "apiVersion": API_VERSION, "statusCode": 200, "totalCount": total, "events": page,
    })))
}

/// The engine's half-open range for an inclusive window (everything without one).
fn scan_range(window_ns: Option<(i64, i64)>) -> (i64, i64) {
    match window_ns {
        Some((start, end)) => edgex::inclusive_range(start, end),
        None => (i64::MIN, i64::MAX),
    }
}

/// Which resources a reading query takes: one (from the path), a set (from a body), or all.
enum Resources {
    All,
    One(String),
    Set(Vec<String>),
}

impl Resources {
    /// The one resource the engine can narrow its scan to.
    fn one(&self) -> Option<&str> {
        match self {
            Resources::One(name) => Some(name),
            _ => None,
        }
    }

    fn takes(&self, reading: &Decoded) -> bool {
        self.takes_resource(&reading.resource_name)
    }

    fn takes_resource(&self, resource: &str) -> bool {
        match self {
            Resources::Set(names) => names.iter().any(|n| n == resource),
            _ => true,
        }
    }
}

async fn readings_response(
    state: Shared,
    query: Option<String>,
    device: Option<String>,
    resources: Resources,
    window_ns: Option<(i64, i64)>,
) -> Result<Response, ApiError> {
    let query = parameters(query.as_deref(), &query::READING_PARAMETERS)?;
    let query = query::reading_query(&query, state.config.max_result_count)?;
    if query.aggregate.is_some() {
        return aggregate_response(state, query, device, resources, window_ns).await;
    }
    let readings = state
        .blocking(move |s| {
            let (from_ns, to_ns) = scan_range(window_ns);
            let mut readings = s.collect(device.as_deref(), resources.one(), from_ns, to_ns)?;
            readings.retain(|r| resources.takes(r));
            newest_first_readings(&mut readings);
            Ok(readings)
        })
        .await?;
    let (page, total) = apply_paging(readings, &query.paging)?;
    let mut page: Vec<Value> = page
        .iter()
        .map(|d| serde_json::to_value(d.to_reading()))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if query.numeric {
        page.iter_mut().for_each(make_numeric);
    }
    Ok(ok(json!({
        "apiVersion": API_VERSION, "statusCode": 200, "totalCount": total, "readings": page,
    })))
}

/// `aggregateFunc` (and `every`): the readings folded into their groups as the engine's paged
/// scan yields them; the groups, not the readings, are paged. At most `query_readings_max`
/// groups (a narrow `every` over a long range would otherwise hold one per reading).
async fn aggregate_response(
    state: Shared,
    query: ReadingQuery,
    device: Option<String>,
    resources: Resources,
    window_ns: Option<(i64, i64)>,
) -> Result<Response, ApiError> {
    let Some(func) = query.aggregate else {
        return Err(ApiError::internal(
            "aggregate_response without aggregateFunc",
        ));
    };
    let every_ns = query.every_ns;
    let groups = state
        .blocking(move |s: &AppState| {
            let (from_ns, to_ns) = scan_range(window_ns);
            let groups_max = s.config.query_readings_max;
            let mut aggregation = Aggregation::new(func, every_ns);
            s.each_raw_page(device.as_deref(), resources.one(), from_ns, to_ns, |page| {
                for r in page.iter().filter(|r| resources.takes_resource(&r.sensor)) {
                    aggregation.add_stored(&r.device, &r.sensor, r.ts_ns, &r.value);
                }
                if aggregation.group_count() > groups_max {
                    return Err(ApiError::new(
                        StatusCode::RANGE_NOT_SATISFIABLE,
                        format!(
                            "the aggregate would hold more than {groups_max} groups; widen \
                             every, narrow the range (or raise --query-readings-max)"
                        ),
                    ));
                }
                Ok(())
            })?;
            Ok(aggregation.into_readings())
        })
        .await?;
    let Paging { offset, limit, .. } = query.paging;
    let page: Vec<Value> = groups.into_iter().skip(offset).take(limit).collect();
    Ok(ok(json!({
        "apiVersion": API_VERSION, "statusCode": 200,
        "aggregateFunc": func.name(), "readings": page,
    })))
}

pub async fn all_events(
    State(state): State<Shared>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    events_response(state, query, None, None).await
}

pub async fn events_by_device(
    State(state): State<Shared>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    events_response(state, query, Some(name), None).await
}

pub async fn events_by_time(
    State(state): State<Shared>,
    Path((start, end)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let window = window(&start, &end)?;
    events_response(state, query, None, Some(window)).await
}

async fn count_response(
    state: Shared,
    device: Option<String>,
    events: bool,
) -> Result<Response, ApiError> {
    let count = state
        .blocking(move |s| {
            let readings = s.collect(device.as_deref(), None, i64::MIN, i64::MAX)?;
            Ok(if events {
                edgex::group_events(&readings).len()
            } else {
                readings.len()
            })
        })
        .await?;
    Ok(ok(
        json!({"apiVersion": API_VERSION, "statusCode": 200, "count": count}),
    ))
}

pub async fn event_count(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    count_response(state, None, true).await
}

pub async fn event_count_by_device(
    State(state): State<Shared>,
    Path(name): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    count_response(state, Some(name), true).await
}

pub async fn reading_count(State(state): State<Shared>, _: NoQuery) -> Result<Response, ApiError> {
    count_response(state, None, false).await
}

pub async fn reading_count_by_device(
    State(state): State<Shared>,
    Path(name): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    count_response(state, Some(name), false).await
}

pub async fn all_readings(
    State(state): State<Shared>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    readings_response(state, query, None, Resources::All, None).await
}

pub async fn readings_by_device(
    State(state): State<Shared>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    readings_response(state, query, Some(name), Resources::All, None).await
}

pub async fn readings_by_resource(
    State(state): State<Shared>,
    Path(resource): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_resource_name(&resource)?;
    readings_response(state, query, None, Resources::One(resource), None).await
}

pub async fn readings_by_device_and_resource(
    State(state): State<Shared>,
    Path((name, resource)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    check_resource_name(&resource)?;
    readings_response(state, query, Some(name), Resources::One(resource), None).await
}

pub async fn readings_by_device_resource_time(
    State(state): State<Shared>,
    Path((name, resource, start, end)): Path<(String, String, String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    check_resource_name(&resource)?;
    let window = window(&start, &end)?;
    readings_response(
        state,
        query,
        Some(name),
        Resources::One(resource),
        Some(window),
    )
    .await
}

pub async fn readings_by_time(
    State(state): State<Shared>,
    Path((start, end)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let window = window(&start, &end)?;
    readings_response(state, query, None, Resources::All, Some(window)).await
}

pub async fn readings_by_resource_time(
    State(state): State<Shared>,
    Path((resource, start, end)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    check_resource_name(&resource)?;
    let window = window(&start, &end)?;
    readings_response(state, query, None, Resources::One(resource), Some(window)).await
}

/// The body core-data takes on `reading/device/name/{name}/start/{start}/end/{end}` to narrow
/// it to some resources.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceNames {
    #[serde(default)]
    resource_names: Vec<String>,
}

/// readings of a device in a time range; a body `{"resourceNames": [...]}` narrows it to those
/// resources, as core-data's does.
pub async fn readings_by_device_time(
    State(state): State<Shared>,
    Path((name, start, end)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    let window = window(&start, &end)?;
    let bytes = read_body(&state.body_limits(), &headers, body).await?;
    let resources = if bytes.iter().all(u8::is_ascii_whitespace) {
        Resources::All
    } else {
        // `null` too: go-mod-core-contracts' ReadingClient sends it when given no names, and
        // core-data decodes it into an empty map (every resource).
        let body: ResourceNames = serde_json::from_slice::<Option<ResourceNames>>(&bytes)
            .map_err(|e| {
                ApiError::bad_request(format!("body is not {{\"resourceNames\": [\"...\"]}}: {e}"))
            })?
            .unwrap_or(ResourceNames {
                resource_names: Vec::new(),
            });
        for resource in &body.resource_names {
            check_resource_name(resource)?;
        }
        if body.resource_names.is_empty() {
            Resources::All
        } else {
            Resources::Set(body.resource_names)
        }
    };
    readings_response(state, query, Some(name), resources, Some(window)).await
}

/// POST /secret: core-data keeps a service's secrets in EdgeX's secret store (Vault/OpenBao),
/// a part roamkv does not have; its own secrets are files named by its settings.
pub async fn secret_not_supported(_: NoQuery) -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "POST /secret is not supported: roamkv has no EdgeX secret store; its secrets are files \
         named by its settings (--auth-token-file, --sink-password-file, --mqtt-password-file)",
    )
}

/// DELETE event/device/name/{name}: one departure (EdgeX deletes row by row here).
pub async fn delete_device(
    State(state): State<Shared>,
    Path(name): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    check_device_name(&name)?;
    state
        .blocking(move |s| {
            let present = s.engine.devices().iter().any(|d| d.name == name);
            if present {
                s.depart(&name, "DELETE device")?;
            }
            Ok(())
        })
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"apiVersion": API_VERSION, "statusCode": 202})),
    )
        .into_response())
}

/// DELETE event/age/{age}: every reading older than now - age goes (docs/SERVER.md): a device
/// whose every reading is older departs (one DEPART), the others are trimmed (one TRIM each).
pub async fn delete_by_age(
    State(state): State<Shared>,
    Path(age): Path<String>,
    _: NoQuery,
) -> Result<Response, ApiError> {
    // An age past i64 saturates: older than every reading, so nothing goes.
    let age_ns = query::path_ns("age", &age)
        .ok()
        .filter(|a| *a >= 0)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "age {age:?} is not a non-negative number of nanoseconds"
            ))
        })?;
    // Readings with origin < cutoff go; none at or after it.
    let cutoff_ns = now_ns().saturating_sub(age_ns);
    let counts = state
        .blocking(move |s| {
            let mut counts = [0usize; 3];
            // Every engine device, the server's index of event ids too (its times are the
            // events' origins); the answer counts the clients' devices.
            for device in s.engine.devices() {
                let applied = s.apply_cutoff(&device.name, cutoff_ns, "age")?;
                if device.name.starts_with(INTERNAL_DEVICE_PREFIX) {
                    continue;
                }
                let slot = match applied {
                    Applied::Departed => 0,
                    Applied::Trimmed => 1,
                    Applied::Unchanged => 2,
                };
                counts[slot] += 1;
            }
            Ok(counts)
        })
        .await?;
    let [departed, trimmed, unchanged] = counts;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({
            "apiVersion": API_VERSION,
            "statusCode": 202,
            "message": format!(
                "readings older than the cutoff were deleted: {departed} devices had nothing newer \
                 and were removed, {trimmed} were trimmed, {unchanged} had nothing older"
            ),
        })),
    )
        .into_response())
}

pub async fn ping(_: NoQuery) -> Response {
    ok(json!({
        "apiVersion": API_VERSION,
        "timestamp": httpdate::fmt_http_date(std::time::SystemTime::now()),
        "serviceName": SERVICE_NAME,
    }))
}

pub async fn version(_: NoQuery) -> Response {
    ok(json!({
        "apiVersion": API_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "serviceName": SERVICE_NAME,
    }))
}

pub async fn config(State(state): State<Shared>, _: NoQuery) -> Response {
    ok(json!({
        "apiVersion": API_VERSION,
        "serviceName": SERVICE_NAME,
        "config": state.config.to_json(),
    }))
}
