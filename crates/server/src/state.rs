//! What every request handler and the MQTT task share, and the operations they have in common:
//! ingesting an event, reading a bounded set of readings, departing a device.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use roamkv_engine::limits::INTERNAL_DEVICE_PREFIX;
use roamkv_engine::{DeviceInfo, Engine, Reading, Record, ScanCursor};
use roamkv_wire::KeyedReading;
use roamkv_wire::edgex::{self, AddEventRequest, Decoded, PathNames, event_index};
use tokio::sync::Semaphore;

use crate::departing::{Departing, Waiting};
use crate::error::ApiError;
use crate::fence::Fences;
use crate::observability::metrics::{Metrics, RejectLabels, SourceLabels};
use crate::observability::status::{Departure, History};
use crate::retention::{Applied, Retained, RetentionStore};
use crate::settings::{Config, OnDepart};

pub struct AppState {
    pub engine: Arc<Engine>,
    pub config: Config,
    pub metrics: Metrics,
    pub history: parking_lot::Mutex<History>,
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
    /// The threads that write requests' readings, gathered (ingest.rs).
    pub ingest: crate::ingest::Ingest,
    /// Departures waiting for the cloud sink (`--on-depart cloud`).
    pub departing: Departing,
    /// Handoffs of devices to and from other edges (handoff/).
    pub handoffs: crate::handoff_book::Handoffs,
    /// How other edges reach this one (`--advertise-url`, or the address it listens on).
    pub advertise_url: String,
    /// REST-posted events out to the MQTT bus, as core-data publishes them (republish.rs).
    pub republisher: crate::republish::Republisher,
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

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

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
        request: AddEventRequest,
        path: Option<PathNames<'_>>,
        source: &'static str,
        bytes: usize,
    ) -> Result<String, ApiError> {
        let id = request.event.id.clone();
        let (origin, device) = (request.event.origin, request.event.device_name.clone());
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

    /// Writes readings as one engine batch, by the ingest threads (ingest.rs: the group commit
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
    /// batch: a fence waits for this write (fence.rs). Blocking.
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
    /// now, or, under `--on-depart cloud`, once the cloud sink has it (departing.rs). Blocking.
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

    /// Fences the device and records its departure for the departing task (departing.rs).
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
}

/// The cutoff (ns since the epoch) of a maximum age in milliseconds: readings with
/// ts < now - max_age are past their retention.
fn cutoff_for(max_age_ms: u64) -> i64 {
    roamkv_engine::ms_to_ns(i64::try_from(now_ms().saturating_sub(max_age_ms)).unwrap_or(i64::MAX))
}

/// The retention pass's port (retention/): the device list, the settings, one device applied.
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
