//! What this edge knows of its handoffs (the files are the truth across restarts; this is what
//! the rest of the server shares): the records, the devices' epochs, the counts.
//! It imports nothing of the server's state, which holds it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub mod store;

use crate::clock::now_ms;

use store::{InRecord, OutRecord, Store};

/// Readings per chunk at most (B's `--batch-readings-max` is 10,000 by default); a chunk B
/// refuses as too large (413) is sent again at half the size.
pub const CHUNK_READINGS_MAX: usize = 2_000;
/// How long a finished handoff's record (and its fence: writes of the device at A get 409 and
/// B's address) is kept.
pub const FINISHED_KEEP_MS: u64 = 10 * 60 * 1000;

/// What this edge knows of its handoffs, in memory (the files are the truth across restarts).
#[derive(Default)]
pub struct Book {
    pub outs: BTreeMap<String, OutRecord>,
    pub ins: BTreeMap<String, InRecord>,
    /// device -> (newest epoch known here, when it was set).
    pub epochs: BTreeMap<String, (u64, u64)>,
}

impl Book {
    /// The unfinished handoff of `device` this edge makes, if any.
    pub fn active_out(&self, device: &str) -> Option<&OutRecord> {
        self.outs
            .values()
            .find(|r| r.device == device && !r.state.is_finished())
    }

    /// The uncommitted handoff of `device` this edge receives, if any.
    pub fn open_in(&self, device: &str) -> Option<&InRecord> {
        self.ins
            .values()
            .find(|r| r.device == device && !r.committed && !r.aborted)
    }

    pub fn epoch(&self, device: &str) -> u64 {
        self.epochs.get(device).map_or(0, |(e, _)| *e)
    }
}

/// Counters of finished handoffs, for /metrics.
#[derive(Default)]
pub struct Counters {
    pub done: AtomicU64,
    pub aborted: AtomicU64,
    pub received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    pub chunks_resent: AtomicU64,
    /// Sum of the finished handoffs' durations, in ms.
    pub duration_ms: AtomicU64,
}

pub struct Handoffs {
    pub store: Store,
    pub book: parking_lot::Mutex<Book>,
    /// Woken when a handoff is started or resumed.
    pub work: tokio::sync::Notify,
    pub counters: Counters,
    /// Held by a received chunk that merges EdgeX events' index entries, from the merge to its
    /// write: a sender has several chunks on the wire, and two chunks with readings of one event,
    /// each merged with the entry as it was before the other, would lose one's readings.
    pub index_merge: parking_lot::Mutex<()>,
}

impl Handoffs {
    /// Loads the records of `data_dir`.
    pub fn open(data_dir: &std::path::Path) -> Result<Handoffs, String> {
        let store = Store::new(data_dir);
        let (outs, ins) = store.load()?;
        let mut epochs = store.load_epochs()?;
        // A record is saved before its epoch is noted: a crash between the two leaves the
        // record's epoch the newer.
        let recorded = outs
            .iter()
            .map(|r| (&r.device, r.epoch, r.started_ms))
            .chain(ins.iter().map(|r| (&r.device, r.epoch, r.started_ms)));
        for (device, epoch, at) in recorded {
            let known = epochs.entry(device.clone()).or_insert((0, at));
            if known.0 < epoch {
                *known = (epoch, at);
            }
        }
        Ok(Handoffs {
            store,
            book: parking_lot::Mutex::new(Book {
                outs: outs.into_iter().map(|r| (r.id.clone(), r)).collect(),
                ins: ins.into_iter().map(|r| (r.id.clone(), r)).collect(),
                epochs,
            }),
            work: tokio::sync::Notify::new(),
            counters: Counters::default(),
            index_merge: parking_lot::Mutex::new(()),
        })
    }

    /// Sets a device's epoch (at least what it is) and keeps it durably.
    pub fn note_epoch(&self, device: &str, epoch: u64) -> Result<(), String> {
        let mut book = self.book.lock();
        if book.epoch(device) >= epoch {
            return Ok(());
        }
        let mut epochs = book.epochs.clone();
        epochs.insert(device.to_string(), (epoch, now_ms()));
        self.store.save_epochs(&mut epochs)?;
        book.epochs = epochs;
        Ok(())
    }

    /// Handoffs made that are not finished, and finished ones still fencing.
    pub fn in_flight(&self) -> (u64, u64) {
        let book = self.book.lock();
        let out = book
            .outs
            .values()
            .filter(|r| !r.state.is_finished())
            .count() as u64;
        let inbound = book
            .ins
            .values()
            .filter(|r| !r.committed && !r.aborted)
            .count() as u64;
        (out, inbound)
    }

    pub fn bytes_sent(&self) -> u64 {
        self.counters.bytes_sent.load(Ordering::Relaxed)
    }
}
