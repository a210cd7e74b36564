//! `GET /api/roamkv/v1/export?device=&sensor=&start=&end=&format=`: readings streamed out as
//! Parquet, an Arrow IPC stream, CSV or JSON lines (`roamkv_export`), while the server serves.
//!
//! `device` may be given more than once (none: every device); `start` and `end` take what the
//! scan's `from` and `to` take (RFC 3339, `-1h`, epoch milliseconds; `start_ns`, `end_ns` in
//! nanoseconds); `format` is `parquet` (the default), `arrow`, `csv` or `jsonl`. The request is
//! checked and the export's read view taken before the answer starts, so a bad one is a 4xx
//! that wrote nothing: an unknown format, an empty range (400), a device not here (404). The
//! export then writes from a blocking thread through a bounded channel (`stream.rs`): its
//! memory is `roamkv_export::limits` plus `STREAM_CHUNKS_MAX` chunks, whatever the range. A
//! client that leaves ends it at its next write. While ingest runs, the output is paced at
//! `--export-rate-mib` (`PacedOutput`).

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::metrics::gauge::Gauge;
use roamkv_engine::background::Pace;
use roamkv_export::limits::OUTPUT_BUFFER_BYTES;
use roamkv_export::{Export, ExportError, Format, Request, Selection};

use crate::http::error::ApiError;
use crate::http::query::pairs;
use crate::routes::native::parse_bound;
use crate::routes::stream;
use crate::state::Shared;

/// Lowers the calling thread (the export's own, not the runtime's blocking pool: a thread's
/// priority cannot be raised back without privilege, and the pool's threads serve ingest too)
/// to a background copy's CPU and I/O priority (`roamkv_engine::background`): under full
/// ingest it takes the CPU that ingest leaves (a share of about a tenth of a core's against a
/// writer at 0), idle it takes all. A failure leaves it as it was: the export runs, only at
/// the writers' priority.
fn lower_priority() {
    if let Err(e) = roamkv_engine::background::lower_this_thread() {
        tracing::debug!(error = %e, "export at normal priority");
    }
}

/// The export's output on its way to the client, paced at `--export-rate-mib` while ingest runs
/// (the ingest threads wrote a request within `INGEST_QUIET`) and at full speed otherwise: an
/// export's work (the scan, the encoding, the body's copies, the client's reading) grows with
/// its rate, and unpaced, back-to-back exports took 40 % of full ingest on two cores even at a
/// lower priority (docs/BENCHMARKS.md, "Ingest during exports, paced"). Each chunk (at most
/// `OUTPUT_BUFFER_BYTES`) waits for its share of the rate before it goes, so an ingest that
/// pauses lets the rest go at once.
struct PacedOutput {
    inner: stream::ChannelWriter,
    pace: Arc<Pace>,
    state: Shared,
    /// The ingest threads' count of requests written when last read, and when it last moved.
    written: (u64, Option<Instant>),
}

/// Ingest counts as running until this long after its last write: longer than the gaps of a
/// steady stream of requests, short enough that an export after ingest stops runs unpaced.
const INGEST_QUIET: Duration = Duration::from_millis(500);

impl PacedOutput {
    fn ingest_runs(&mut self) -> bool {
        let written = self.state.ingest.requests_written();
        if written != self.written.0 {
            self.written = (written, Some(Instant::now()));
        }
        self.written.1.is_some_and(|at| at.elapsed() < INGEST_QUIET)
    }
}

impl Write for PacedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.ingest_runs() {
            self.pace.take(buf.len() as u64);
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Exports written at once; one more is refused with 429 (each holds up to ~64 MiB and a
/// thread: many clients at once must not add up to the server's memory).
const EXPORTS_IN_FLIGHT_MAX: i64 = 2;

/// Chunks (each up to `OUTPUT_BUFFER_BYTES`) queued for a client: at most 4 MiB in flight.
const STREAM_CHUNKS_MAX: usize = 4;

/// The query parameters an export takes (`device` again for more); any other is refused with
/// 400, as on every route (`crate::http::query`): a typo must not widen an export.
const PARAMETERS: [&str; 7] = [
    "device", "sensor", "start", "end", "start_ns", "end_ns", "format",
];

pub fn routes() -> Router<Shared> {
    Router::new().route("/export", get(export))
}

/// The request a query asks for.
fn parse_request(query: Option<&str>) -> Result<Request, ApiError> {
    let mut single: HashMap<String, String> = HashMap::new();
    let mut devices = Vec::new();
    for (name, value) in pairs(query, &PARAMETERS, &["device"])? {
        if name == "device" {
            devices.push(value);
        } else {
            single.insert(name, value);
        }
    }
    let format = match single.get("format") {
        Some(name) => Format::parse(name).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => Format::Parquet,
    };
    Ok(Request {
        selection: if devices.is_empty() {
            Selection::All
        } else {
            Selection::Devices(devices)
        },
        sensor: single.get("sensor").cloned(),
        from_ns: parse_bound(&single, "start", i64::MIN)?,
        to_ns: parse_bound(&single, "end", i64::MAX)?,
        format,
    })
}

fn api_error(e: ExportError) -> ApiError {
    match e {
        ExportError::BadRequest(_) => ApiError::bad_request(e.to_string()),
        ExportError::UnknownDevice(_) => ApiError::new(StatusCode::NOT_FOUND, e.to_string()),
        ExportError::Engine(e) => ApiError::from_engine(e),
        other => ApiError::internal(other.to_string()),
    }
}

#[utoipa::path(get, path = "/api/roamkv/v1/export", tag = "export and backup",
    params(("device" = Option<Vec<String>>, Query, description = "a device (again for more; none: all)", explode = true),
        ("sensor" = Option<String>, Query, description = "only this sensor"),
        ("start" = Option<String>, Query, description = "first time: RFC 3339, relative (-1h) or epoch ms"),
        ("end" = Option<String>, Query, description = "end time (exclusive), the same forms"),
        ("start_ns" = Option<i64>, Query, description = "first time in ns"),
        ("end_ns" = Option<i64>, Query, description = "end time in ns"),
        ("format" = Option<String>, Query, description = "parquet (default), arrow, csv or jsonl")),
    responses((status = 200, description = "the readings, streamed (docs/SERVER.md, \"Export\")",
            content((Vec<u8> = "application/vnd.apache.parquet"), (Vec<u8> = "application/vnd.apache.arrow.stream"),
                (String = "text/csv"), (String = "application/jsonl"))), (status = 400, description = "bad input: the message says what", body = crate::http::error::ApiErrorBody),
        (status = 404, description = "a device not here", body = crate::http::error::ApiErrorBody),
        (status = 429, description = "as many exports as the limit are being written", body = crate::http::error::ApiErrorBody)))]
async fn export(
    State(state): State<Shared>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let request = parse_request(query.as_deref())?;
    // Taken before the view; given back when the export's thread ends, or when this handler
    // ends without one (a refusal, a client gone while the view was taken).
    let slot = InFlight::take(&state.metrics.exports_in_flight).ok_or_else(|| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("{EXPORTS_IN_FLIGHT_MAX} exports are being written (the limit): retry later"),
        )
    })?;
    let plan = plan(&state, request).await?;
    stream_export(&state, plan, slot)
}

/// One export counted in `roamkv_exports_in_flight` for as long as it lives.
struct InFlight(Gauge);

impl InFlight {
    /// A place among the `EXPORTS_IN_FLIGHT_MAX`, if one is free.
    fn take(gauge: &Gauge) -> Option<InFlight> {
        if gauge.inc() >= EXPORTS_IN_FLIGHT_MAX {
            gauge.dec();
            return None;
        }
        Some(InFlight(gauge.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn plan(state: &Shared, request: Request) -> Result<Export, ApiError> {
    let engine = Arc::clone(&state.engine);
    tokio::task::spawn_blocking(move || Export::plan(&engine, request))
        .await?
        .map_err(api_error)
}

/// The export written by its own thread into the answer's body; the thread holds `slot`.
fn stream_export(state: &Shared, plan: Export, slot: InFlight) -> Result<Response, ApiError> {
    let format = plan.format();
    let (writer, chunks) = stream::channel(STREAM_CHUNKS_MAX);
    let engine = Arc::clone(&state.engine);
    let rate = state.config.export_bytes_per_sec;
    state
        .metrics
        .export_rate_limit_bytes_per_second
        .set(i64::try_from(rate).unwrap_or(i64::MAX));
    let pace = Arc::new(Pace::new(rate));
    let paced = PacedOutput {
        inner: writer.clone(),
        pace: Arc::clone(&pace),
        state: Arc::clone(state),
        written: (state.ingest.requests_written(), None),
    };
    let exported = state.metrics.exported_readings.clone();
    let paced_seconds = state.metrics.export_paced_seconds.clone();
    let spawned = std::thread::Builder::new()
        .name("roamkv-export".into())
        .spawn(move || {
            lower_priority();
            let out = std::io::BufWriter::with_capacity(OUTPUT_BUFFER_BYTES, paced);
            let done = plan.write(&engine, out).and_then(|(summary, mut out)| {
                out.flush()?;
                Ok(summary)
            });
            drop(slot);
            paced_seconds.inc_by(pace.slept().as_secs_f64());
            match done {
                Ok(summary) => {
                    exported.inc_by(summary.readings);
                    tracing::info!(
                        readings = summary.readings,
                        devices = summary.devices,
                        view = %summary.view,
                        exact = summary.exact,
                        paced_s = pace.slept().as_secs_f64(),
                        "export sent"
                    );
                }
                Err(e) => {
                    tracing::warn!(error = %e, "export stopped");
                    writer.fail(e.to_string());
                }
            }
        });
    if let Err(e) = spawned {
        return Err(ApiError::internal(format!(
            "starting the export's thread: {e}"
        )));
    }
    let mut response = Body::from_stream(chunks).into_response();
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_and_bad_ones_are_refused() {
        let r = parse_request(Some("device=a&device=b%20c&format=csv&start_ns=5&end_ns=9"))
            .expect("parses");
        assert_eq!(
            r.selection,
            Selection::Devices(vec!["a".into(), "b c".into()])
        );
        assert_eq!((r.from_ns, r.to_ns, r.format), (5, 9, Format::Csv));
        let r = parse_request(None).expect("no query: everything, as Parquet");
        assert_eq!(r.selection, Selection::All);
        assert_eq!(r.format, Format::Parquet);
        for bad in ["format=xml", "devices=a", "sensor=a&sensor=b", "start=soon"] {
            let e = parse_request(Some(bad)).expect_err(bad);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}: {}", e.message);
        }
    }
}
