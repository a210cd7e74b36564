//! What every request handler and the MQTT task share, and the operations they have in common:
//! ingesting an event, reading a bounded set of readings, departing a device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use roamkv_engine::limits::INTERNAL_DEVICE_PREFIX;
use roamkv_engine::{DeviceInfo, Engine, LogPos, Reading, Record, ScanCursor};
use roamkv_wire::KeyedReading;
use roamkv_wire::edgex::{self, AddEventView, Decoded, PathNames, event_index};
use tokio::sync::Semaphore;

use crate::clock::now_ms;
use crate::departures::cloud::DepartureHost;
use crate::departures::departing::{Departing, Waiting};
use crate::departures::fence::Fences;
use crate::handoff::state::HandoffState;
use crate::http::body::BodyLimits;
use crate::http::error::ApiError;
use crate::ingest::event_ids;
use crate::observability::cloud_view::{CloudView, HandoffFigures};
use crate::observability::metrics::{Metrics, RejectLabels, SourceLabels};
use crate::observability::status::{Departure, History};
use crate::retention::{Applied, Retained, RetentionStore};
use crate::settings::{Config, OnDepart, Tokens};

pub struct AppState {
    pub engine: Arc<Engine>,
    pub config: Config,
    pub metrics: Metrics,
    /// The status page's history (shared with the handoff part, which records its departures).
    pub history: Arc<parking_lot::Mutex<History>>,
    /// The bearer tokens in force (SIGHUP may replace them: settings/reload.rs).
    pub tokens: Arc<parking_lot::RwLock<Tokens>>,
    /// Whether each request gets an access-log line (`--access-log`; SIGHUP may change it).
    pub access_log: Arc<AtomicBool>,
    /// Requests served at once (429 beyond).
    pub in_flight: Arc<Semaphore>,
    /// False once shutdown began: /ready answers 503.
    pub ready: AtomicBool,
    /// Per-device retention settings (kept in DATA_DIR/server/retention.json).
    pub retention: RetentionStore,
    /// This edge's identity (DATA_DIR/server/edge.json).
    pub edge_id: String,
    /// The cloud sink, when `--sink` is given.
    pub sink: Option<roamkv_sink::Sink>,
    /// Devices that take no writes here now (departing for the cloud); shared with the ingest
    /// threads.
    pub fences: Arc<Fences>,
    /// The threads that write requests' readings, gathered (ingest/writers.rs).
    pub ingest: crate::ingest::writers::Ingest,
    /// Departures waiting for the cloud sink (`--on-depart cloud`).
    pub departing: Departing,
    /// Handoffs of devices to and from other edges: the handoff part's own state (handoff/).
    pub handoff: Arc<HandoffState>,
    /// REST-posted events out to the MQTT bus, as core-data publishes them (ingest/republish.rs).
    pub republisher: crate::ingest::republish::Republisher,
}

/// What a departure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepartOutcome {
    /// The DEPART is written.
    Departed,
    /// The device is fenced and its DEPART waits for the cloud sink (`--on-depart cloud`).
    Waiting,
}

pub type Shared = Arc<AppState>;

/// Readings read per engine call while collecting a query's answer.
const QUERY_PAGE_READINGS: usize = 10_000;

impl AppState {
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn reject(&self, source: &'static str, error: &ApiError) {
        self.metrics
            .rejected
            .get_or_create(&RejectLabels {
                source,
                status: error.status.as_u16(),
            })
            .inc();
    }

    /// Checks and writes one EdgeX event (one engine batch: all its readings or none).
    /// Returns the event id.
    pub async fn ingest_event(
        self: &Arc<Self>,
        request: AddEventView<'_>,
        path: Option<PathNames<'_>>,
        source: &'static str,
        bytes: usize,
    ) -> Result<String, ApiError> {
        let id = request.event.id.to_string();
        let (origin, device) = (request.event.origin, request.event.device_name.to_string());
        let checked = edgex::event_to_readings(request, path, self.config.batch_readings_max)
            .and_then(|mut readings| {
                // The index entry rides in the event's batch: both or neither after a crash.
                if self.config.event_id_index {
                    let entry = event_index::index_reading(&id, origin, &device, &readings)?;
                    readings.push(entry);
                }
                Ok(readings)
            });
        let result = match checked {
            Ok(readings) => self.write(readings, source, bytes).await,
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(()) => Ok(id),
            Err(e) => {
                self.reject(source, &e);
                Err(e)
            }
        }
    }

    /// Writes readings as one engine batch, by the ingest threads (ingest/writers.rs: the group commit
    /// blocks, and requests are gathered into one engine call).
    pub async fn write(
        self: &Arc<Self>,
        readings: Vec<KeyedReading>,
        source: &'static str,
        bytes: usize,
    ) -> Result<(), ApiError> {
        // Readings, not the server's own records (the event's index entry).
        let n = readings
            .iter()
            .filter(|r| !r.device.starts_with(INTERNAL_DEVICE_PREFIX))
            .count() as u64;
        self.ingest.put(readings, "writes").await?;
        let labels = SourceLabels { source };
        self.metrics
            .ingested_readings
            .get_or_create(&labels)
            .inc_by(n);
        self.metrics.ingested_events.get_or_create(&labels).inc();
        self.metrics
            .ingested_bytes
            .get_or_create(&labels)
            .inc_by(bytes as u64);
        Ok(())
    }

    /// Puts `readings` as one engine batch unless a device of theirs is fenced (409 naming it,
    /// and what it takes no more of: `what`). The fences are held until the engine has the
    /// batch: a fence waits for this write (departures/fence.rs). Blocking.
    pub fn put_fenced(&self, readings: &[KeyedReading], what: &str) -> Result<(), ApiError> {
        let fences = self.fences.read();
        if let Some(refused) = fences.refuse(readings.iter().map(|r| r.device.as_str()), what) {
            return Err(refused);
        }
        let records: Vec<Record<'_>> = readings.iter().map(KeyedReading::record).collect();
        self.engine
            .put_batch(&records)
            .map_err(ApiError::from_engine)
    }

    /// Runs a blocking engine call on the blocking pool.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&AppState) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let state = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&state)).await?
    }

    /// Every reading of the given devices (all devices if `None`) in the window, decoded; at
    /// most `query_readings_max` of them, else 416 (the query is too broad to answer).
    pub fn collect(
        &self,
        device: Option<&str>,
        resource: Option<&str>,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<Decoded>, ApiError> {
        let budget = self.config.query_readings_max;
        let mut out = Vec::new();
        self.each_page(device, resource, from_ns, to_ns, |page| {
            if out.len() + page.len() > budget {
                return Err(ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    format!(
                        "the query would read more than {budget} readings; narrow it by \
                         device, resource or time range (or raise --query-readings-max)"
                    ),
                ));
            }
            out.extend(page);
            Ok(())
        })?;
        Ok(out)
    }

    /// The devices clients wrote, sorted by name: the engine's, without the server's own
    /// (`INTERNAL_DEVICE_PREFIX`: the index of event ids).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let mut devices = self.engine.devices();
        devices.retain(|d| !d.name.starts_with(INTERNAL_DEVICE_PREFIX));
        devices
    }

    /// Hands every reading of the given devices (all devices if `None`) in the window to
    /// `visit`, decoded, one engine page at a time: what a fold over a range holds is one page,
    /// never the range. Devices in name order, readings in (resource, time) order; readings of
    /// deleted events are not handed (event_index.rs).
    pub fn each_page(
        &self,
        device: Option<&str>,
        resource: Option<&str>,
        from_ns: i64,
        to_ns: i64,
        mut visit: impl FnMut(Vec<Decoded>) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        self.each_raw_page(device, resource, from_ns, to_ns, |page| {
            visit(page.into_iter().map(edgex::decode).collect())
        })
    }

    /// `each_page` without the decoding: the engine's readings as they are stored (for a fold
    /// that decodes only what it needs).
    pub fn each_raw_page(
        &self,
        device: Option<&str>,
        resource: Option<&str>,
        from_ns: i64,
        to_ns: i64,
        mut visit: impl FnMut(Vec<Reading>) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let devices: Vec<String> = match device {
            Some(d) => vec![d.to_string()],
            None => self.devices().into_iter().map(|d| d.name).collect(),
        };
        for device in &devices {
            let mut after: Option<ScanCursor> = None;
            loop {
                let page = self
                    .engine
                    .scan_page(
                        device,
                        resource,
                        from_ns,
                        to_ns,
                        after.as_ref(),
                        QUERY_PAGE_READINGS,
                    )
                    .map_err(ApiError::from_engine)?;
                let mut readings = page.readings;
                readings.retain(|r| !event_index::is_deleted(&r.value));
                visit(readings)?;
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// One departure: the device's data goes (upper tier: dropped; lower tier: a range delete)
    /// now, or, under `--on-depart cloud`, once the cloud sink has it (departures/departing.rs). Blocking.
    pub fn depart(&self, device: &str, how: &'static str) -> Result<DepartOutcome, ApiError> {
        if self.config.on_depart == OnDepart::Cloud {
            self.depart_after_cloud(device, how, None)?;
            return Ok(DepartOutcome::Waiting);
        }
        self.engine.depart(device).map_err(ApiError::from_engine)?;
        self.history.lock().push_departure(Departure {
            at_ms: now_ms(),
            device: device.to_string(),
            how,
        });
        Ok(DepartOutcome::Departed)
    }

    /// Fences the device and records its departure for the departing task (departures/departing.rs).
    fn depart_after_cloud(
        &self,
        device: &str,
        how: &'static str,
        cutoff_ns: Option<i64>,
    ) -> Result<(), ApiError> {
        self.fences
            .fence(
                device,
                "it is departing: its readings are on their way to the cloud",
            )
            .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
        let recorded = self.departing.add(Waiting {
            device: device.to_string(),
            how: how.to_string(),
            cutoff_ns,
            requested_at_ms: now_ms(),
        });
        if recorded.is_err() && !self.departing.list().iter().any(|w| w.device == device) {
            self.fences.unfence(device);
        }
        recorded
    }

    /// Applies a cutoff (nanoseconds since the epoch) to one device: departs it if every reading is
    /// older, else trims its older readings. Blocking (engine calls).
    pub fn apply_cutoff(
        &self,
        device: &str,
        cutoff_ns: i64,
        how: &'static str,
    ) -> Result<Applied, ApiError> {
        if self.config.on_depart == OnDepart::Cloud {
            if self.departing.list().iter().any(|w| w.device == device) {
                return Ok(Applied::Departed);
            }
            let newest = self
                .engine
                .latest(device, None)
                .map_err(ApiError::from_engine)?;
            if !newest.is_empty() && newest.iter().all(|r| r.ts_ns < cutoff_ns) {
                self.depart_after_cloud(device, how, Some(cutoff_ns))?;
                return Ok(Applied::Departed);
            }
        } else if self
            .engine
            .depart_if_older_than(device, cutoff_ns)
            .map_err(ApiError::from_engine)?
        {
            self.history.lock().push_departure(Departure {
                at_ms: now_ms(),
                device: device.to_string(),
                how,
            });
            return Ok(Applied::Departed);
        }
        Ok(
            if self
                .engine
                .trim_before(device, cutoff_ns)
                .map_err(ApiError::from_engine)?
            {
                Applied::Trimmed
            } else {
                Applied::Unchanged
            },
        )
    }

    /// Applies one device's retention now: its own setting, or the default
    /// (`--retention-default-h`) when it has none (a no-op without either).
    pub fn apply_retention(&self, device: &str) -> Result<Applied, ApiError> {
        match self
            .retention
            .get(device)
            .or(self.config.retention_default_ms)
        {
            Some(max_age_ms) => self.apply_cutoff(device, cutoff_for(max_age_ms), "retention"),
            None => Ok(Applied::Unchanged),
        }
    }

    /// A request body's bounds (`--body-bytes-max`, `--body-timeout-secs`).
    pub fn body_limits(&self) -> BodyLimits {
        BodyLimits {
            bytes_max: self.config.body_bytes_max,
            timeout: self.config.body_timeout,
        }
    }

    /// The event with id `id` (ingest/event_ids.rs). Blocking.
    pub fn find_event(&self, id: &str) -> Result<Option<event_ids::Found>, ApiError> {
        event_ids::find_event(&self.engine, id)
    }

    /// Deletes the event with id `id`: false if there is none. One engine batch, held to the
    /// device's fence as a write is (a device leaving this edge takes no deletions). Blocking.
    pub fn delete_event(&self, id: &str) -> Result<bool, ApiError> {
        let Some(found) = self.find_event(id)? else {
            return Ok(false);
        };
        self.put_fenced(&event_ids::deletion_of(id, &found)?, "deletions")?;
        Ok(true)
    }

    /// What the server shows of the sink and the departures waiting for it (observability/cloud_view.rs), as of
    /// now. Blocking (engine stats).
    pub fn cloud_view(&self) -> CloudView {
        let sink = self.sink.as_ref().map(|s| s.status());
        let feed = self.engine.feed().status();
        let stats = self.engine.stats();
        let bytes_per_reading = stats.log_bytes_written / stats.user_records.max(1);
        let lag_bytes = sink
            .as_ref()
            .and_then(|s| s.cursor.as_deref())
            .and_then(|c| c.parse::<LogPos>().ok())
            .map(|cursor| self.engine.feed().lag_bytes(&cursor));
        CloudView {
            sink,
            lag_bytes,
            lag_readings: lag_bytes.unwrap_or(0) / bytes_per_reading.max(1),
            hold_bytes: feed.hold_bytes,
            hold_bytes_max: feed.hold_bytes_max,
            holds_released: feed.holds_released,
            on_depart: self.config.on_depart.name(),
            departures_waiting: self.departing.list(),
            handoffs: self.handoff_figures(),
        }
    }

    fn handoff_figures(&self) -> HandoffFigures {
        use std::sync::atomic::Ordering::Relaxed;
        let (out_in_flight, in_in_flight) = self.handoff.handoffs.in_flight();
        let c = &self.handoff.handoffs.counters;
        HandoffFigures {
            out_in_flight,
            in_in_flight,
            done: c.done.load(Relaxed),
            aborted: c.aborted.load(Relaxed),
            received: c.received.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
            bytes_received: c.bytes_received.load(Relaxed),
            seconds: c.duration_ms.load(Relaxed) as f64 / 1e3,
        }
    }
}

/// The cutoff (ns since the epoch) of a maximum age in milliseconds: readings with
/// ts < now - max_age are past their retention.
fn cutoff_for(max_age_ms: u64) -> i64 {
    roamkv_engine::ms_to_ns(i64::try_from(now_ms().saturating_sub(max_age_ms)).unwrap_or(i64::MAX))
}

impl Retained for AppState {
    fn device_names(&self) -> Vec<String> {
        self.engine.devices().into_iter().map(|d| d.name).collect()
    }

    fn settings(&self) -> &RetentionStore {
        &self.retention
    }

    fn default_ms(&self) -> Option<u64> {
        self.config.retention_default_ms
    }

    fn apply_retention(&self, device: &str) -> Result<Applied, ApiError> {
        AppState::apply_retention(self, device)
    }
}

impl DepartureHost for AppState {
    fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    fn departing(&self) -> &Departing {
        &self.departing
    }

    fn fences(&self) -> &Fences {
        &self.fences
    }

    fn sink(&self) -> Option<&roamkv_sink::Sink> {
        self.sink.as_ref()
    }

    fn departed(&self, device: &str, how: &'static str) {
        self.history.lock().push_departure(Departure {
            at_ms: now_ms(),
            device: device.to_string(),
            how,
        });
    }
}
