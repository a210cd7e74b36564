//! What the handoffs keep on disk, under `DATA_DIR/server/` (each file replaced atomically and
//! durably, files.rs; docs/FORMAT.md "Server files"):
//!
//! - `handoffs/out-ID.json`: a handoff this edge makes (it is A): the device, the receiver, the
//!   epoch, the state, how far the sending got;
//! - `handoffs/in-ID.json`: a handoff this edge receives (it is B): the device, the sender, the
//!   epoch, whether it is committed;
//! - `epochs.json`: for each device that was ever handed to or from this edge, the newest epoch
//!   this edge knows of. An epoch counts a device's handoffs; a handoff carries the next one, and
//!   a receiver refuses a handoff (or a chunk) of an epoch it has seen passed: a device handed
//!   A -> B -> A ends with one history, whatever old chunk is still on the wire.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files;

/// Handoff records kept at most (in and out, finished ones included): bounds the directory and
/// what a restart reads. Past it, a new handoff is refused until finished ones age out.
pub const RECORDS_MAX: usize = 10_000;
/// Devices whose epoch is kept at most; past it the oldest entries go (a device handed that
/// long ago and never since starts again from its epoch at the next edge).
pub const EPOCHS_MAX: usize = 100_000;

/// Where a handoff this edge makes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutState {
    /// The device is fenced here; the receiver has not taken the handoff yet.
    Fenced,
    /// The receiver took it; chunks are being sent.
    Sending,
    /// Every chunk is acknowledged; the commit is being sent.
    Committing,
    /// The receiver committed; this edge departs the device.
    Departing,
    /// Departed here. The fence stays (writes get 409 naming the receiver) until the record
    /// ages out.
    Done,
    /// Called off before the receiver committed: the device is writable here again.
    Aborted,
}

impl OutState {
    pub fn is_finished(self) -> bool {
        matches!(self, OutState::Done | OutState::Aborted)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OutRecord {
    pub format: u32,
    pub id: String,
    pub device: String,
    /// The receiver's base URL (`http://host:port`).
    pub to: String,
    /// The receiver's edge id, once it answered.
    pub to_edge: Option<String>,
    pub epoch: u64,
    pub state: OutState,
    /// Where the next chunk's scan resumes: after this (sensor, ts) (None: from the start).
    pub after: Option<(String, i64)>,
    pub chunks: u64,
    pub readings: u64,
    pub bytes: u64,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    /// When this edge began its DEPART of the device (wall clock, ms): never before the
    /// receiver's `committed_ms` (`roamkv bench handoff` checks it). Absent until then, and in
    /// records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub departed_ms: Option<u64>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InRecord {
    pub format: u32,
    pub id: String,
    pub device: String,
    /// The sender's edge id and base URL.
    pub from_edge: String,
    pub from: String,
    pub epoch: u64,
    pub chunks: u64,
    pub readings: u64,
    pub committed: bool,
    /// The sender called it off before committing: later chunks and the commit are refused.
    pub aborted: bool,
    pub started_ms: u64,
    pub committed_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StoredEpochs {
    format: u32,
    /// device -> (epoch, when it was set, ms).
    epochs: BTreeMap<String, (u64, u64)>,
}

/// The handoff files of one data directory.
pub struct Store {
    dir: PathBuf,
    epochs_path: PathBuf,
}

impl Store {
    pub fn new(data_dir: &Path) -> Store {
        Store {
            dir: files::server_file(data_dir, "handoffs"),
            epochs_path: files::server_file(data_dir, "epochs.json"),
        }
    }

    fn path(&self, kind: &str, id: &str) -> PathBuf {
        self.dir.join(format!("{kind}-{id}.json"))
    }

    pub fn save_out(&self, record: &OutRecord) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
        files::write_atomically(&self.path("out", &record.id), &bytes)
    }

    pub fn save_in(&self, record: &InRecord) -> Result<(), String> {
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| e.to_string())?;
        files::write_atomically(&self.path("in", &record.id), &bytes)
    }

    pub fn remove(&self, kind: &str, id: &str) -> Result<(), String> {
        let path = self.path(kind, id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("removing {}: {e}", path.display())),
        }
    }

    /// Every record on disk: (outbound, inbound). A file that does not parse is an error naming
    /// it: starting without it could take writes for a device that is leaving.
    pub fn load(&self) -> Result<(Vec<OutRecord>, Vec<InRecord>), String> {
        let (mut outs, mut ins) = (Vec::new(), Vec::new());
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((outs, ins)),
            Err(e) => return Err(format!("listing {}: {e}", self.dir.display())),
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".json") {
                continue; // a temporary left by a crash
            }
            let bytes =
                std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            let bad = |e: serde_json::Error| format!("handoff record {}: {e}", path.display());
            if name.starts_with("out-") {
                outs.push(serde_json::from_slice(&bytes).map_err(bad)?);
            } else if name.starts_with("in-") {
                ins.push(serde_json::from_slice(&bytes).map_err(bad)?);
            }
        }
        outs.sort_by_key(|r: &OutRecord| r.started_ms);
        ins.sort_by_key(|r: &InRecord| r.started_ms);
        Ok((outs, ins))
    }

    pub fn load_epochs(&self) -> Result<BTreeMap<String, (u64, u64)>, String> {
        match files::read_if_present(&self.epochs_path)? {
            Some(bytes) => {
                let stored: StoredEpochs = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("device epochs {}: {e}", self.epochs_path.display()))?;
                Ok(stored.epochs)
            }
            None => Ok(BTreeMap::new()),
        }
    }

    /// Writes the epochs, the oldest dropped past `EPOCHS_MAX`.
    pub fn save_epochs(&self, epochs: &mut BTreeMap<String, (u64, u64)>) -> Result<(), String> {
        while epochs.len() > EPOCHS_MAX {
            let oldest = epochs
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(d, _)| d.clone())
                .expect("over the maximum, so not empty");
            epochs.remove(&oldest);
        }
        let stored = StoredEpochs {
            format: 1,
            epochs: epochs.clone(),
        };
        let bytes = serde_json::to_vec_pretty(&stored).map_err(|e| e.to_string())?;
        files::write_atomically(&self.epochs_path, &bytes)
    }
}
