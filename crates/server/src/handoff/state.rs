//! What the handoff part holds and is given: the server's state (state.rs) holds one, and the
//! handoff routes and the sender's task take it as theirs, so that this part never names the
//! server's state (which holds it: the two would import each other).

use std::sync::Arc;

use parking_lot::Mutex;
use roamkv_engine::{Durability, Engine};

use super::book::Handoffs;
use super::peer::PeerLink;
use crate::departures::fence::Fences;
use crate::http::body::BodyLimits;
use crate::http::error::ApiError;
use crate::observability::status::{Departure, History};
use crate::settings::Config;

/// The handoff part's state: shared by its routes and its task.
pub struct HandoffState {
    pub engine: Arc<Engine>,
    /// What this edge knows of its handoffs (book/).
    pub handoffs: Handoffs,
    /// The fences every write path checks (departures/fence.rs): a device handed on takes none.
    pub fences: Arc<Fences>,
    /// This edge's identity (files/edge.rs).
    pub edge_id: String,
    /// How other edges reach this one (`--advertise-url`, or the address it listens on).
    pub advertise_url: String,
    pub config: HandoffConfig,
    /// How this edge reaches the others: the client (`--peer-ca-file`), the peer token
    /// (`--peer-token-file`).
    pub peer: Arc<PeerLink>,
    /// The status page's history, shared with the server: a device handed on is a departure.
    pub history: Arc<Mutex<History>>,
}

/// The server's settings the handoff part reads.
#[derive(Debug, Clone, Copy)]
pub struct HandoffConfig {
    /// A chunk is acknowledged once durable: under `sync` that is its write; otherwise a sync.
    pub durability: Durability,
    /// The most readings a chunk received may hold (`--batch-readings-max`).
    pub batch_readings_max: usize,
    /// Whether arriving EdgeX readings get entries in the index of event ids.
    pub event_id_index: bool,
    /// A chunk's body bounds.
    pub body: BodyLimits,
}

impl HandoffConfig {
    /// What the handoff part reads of the server's settings.
    pub fn of(config: &Config) -> HandoffConfig {
        HandoffConfig {
            durability: config.durability,
            batch_readings_max: config.batch_readings_max,
            event_id_index: config.event_id_index,
            body: BodyLimits {
                bytes_max: config.body_bytes_max,
                timeout: config.body_timeout,
            },
        }
    }
}

pub type Shared = Arc<HandoffState>;

impl HandoffState {
    /// Runs `f` on the blocking pool (engine calls do file I/O).
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&HandoffState) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let state = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&state)).await?
    }

    /// `device` departed here after its handoff: the status page's history records it.
    pub fn departed(&self, device: &str, how: &'static str) {
        self.history.lock().push_departure(Departure {
            at_ms: crate::clock::now_ms(),
            device: device.to_string(),
            how,
        });
    }
}
