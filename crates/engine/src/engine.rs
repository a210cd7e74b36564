//! The engine: the write path (validation, group commit, apply), the read path, departure.
//!
//! Concurrency: one `Mutex<State>` guards the mapping table, the upper-tier indexes and the
//! log's bookkeeping. Writers encode and checksum their records *outside* it, then take it
//! briefly to place the records in the log and queue them. The first queued writer that finds
//! no leader becomes the leader: it takes every queued record, releases the lock, writes them
//! with one pwrite per segment touched and (in `Sync` mode) one fdatasync, retakes the lock,
//! applies them to the indexes (or the lower tier) in log order, and wakes the others. This is
//! LevelDB's `BuildBatchGroup` idea; `lead_group` is the one place that syncs the log.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::commit_log::{self, Chunk, LogState, QueuedRecord};
use crate::dir::DataDir;
use crate::error::{Error, Result};
use crate::key;
use crate::limits::{self, SEGMENT_HEADER_BYTES};
use crate::lower::{LowerOp, LowerTier};
use crate::mapping::{DeviceId, MappingTable, Tier};
use crate::options::{Durability, Options};
use crate::record::{self, Body, Decode};
use crate::segment::Segment;
use crate::spares::Spares;
use crate::stats::{Counters, Stats};
use crate::upper::{IndexEntry, LogPosition};

/// One reading, as the caller writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub device: &'a str,
    pub sensor: &'a str,
    pub ts_ms: i64,
    pub value: &'a [u8],
}

/// One reading, as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reading {
    pub device: String,
    pub sensor: String,
    pub ts_ms: i64,
    pub value: Vec<u8>,
}

pub(crate) struct State {
    pub map: MappingTable,
    pub log: LogState,
    pub poisoned: Option<String>,
    /// The lower tier has writes that are not yet persisted (its WAL is off).
    pub lower_dirty: bool,
    pub index_bytes: u64,
    pub last_maintenance_error: Option<String>,
    /// When the lower tier was last made durable, on the engine's clock (retirement persists it
    /// at most every LOWER_PERSIST_INTERVAL_MS unless the log is under pressure).
    pub lower_persisted_at_ms: u64,
}

pub(crate) struct Recovery {
    pub ms: u64,
    pub records: u64,
    /// The largest read buffer recovery held (one segment at a time).
    pub buffer_bytes_max: u64,
    pub cut: Option<String>,
}

pub(crate) struct Inner {
    pub dir: DataDir,
    pub options: Options,
    pub state: Mutex<State>,
    /// Signalled when a group is committed (or the engine is poisoned).
    pub group_done: Condvar,
    /// Signalled when segments retire (writers stalled for log room wait on it).
    pub space_freed: Condvar,
    /// A writer is stalled or the log is under pressure: maintenance should run now.
    pub maintenance_wanted: AtomicBool,
    pub spares: Spares,
    pub lower: Box<dyn LowerTier>,
    pub counters: Arc<Counters>,
    /// Held for the whole of a migration pass: one at a time.
    pub migration: Mutex<()>,
    pub shutdown: Mutex<bool>,
    pub shutdown_signal: Condvar,
    pub recovery: Recovery,
}

/// The embedded engine. Cheap to share across threads by reference (`&Engine` is `Sync`).
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

pub(crate) fn validate_id(what: &'static str, id: &str, max: usize) -> Result<()> {
    if id.is_empty() {
        return Err(Error::EmptyId { what });
    }
    if id.len() > max {
        return Err(Error::IdTooLong {
            what,
            len: id.len(),
            max,
        });
    }
    if id.as_bytes().contains(&0) {
        return Err(Error::IdContainsNul { what });
    }
    Ok(())
}

fn validate_device(device: &str) -> Result<()> {
    validate_id("device", device, limits::DEVICE_ID_BYTES_MAX)
}
fn validate_sensor(sensor: &str) -> Result<()> {
    validate_id("sensor", sensor, limits::SENSOR_ID_BYTES_MAX)
}

/// Bytes of a reading as the user sees them: the key's parts and the value.
pub(crate) fn user_bytes(device: &str, sensor: &str, value: &[u8]) -> u64 {
    (device.len() + sensor.len() + 8 + value.len()) as u64
}

/// A write's time waiting for log room, over all its attempts.
#[derive(Default)]
pub(crate) struct Stall {
    started: Option<Instant>,
}

/// A batch encoded outside the lock: records with unsealed headers and their payload CRCs.
struct EncodedBatch {
    bytes: Vec<u8>,
    /// (start, len, payload_crc) per record.
    records: Vec<(usize, usize, u32)>,
    user_bytes: u64,
}

impl Engine {
    /// Opens (or creates) the data directory and recovers from its log. See recovery.rs.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Engine> {
        let inner = Arc::new(Inner::open(dir.as_ref(), options)?);
        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| Error::Io {
                    context: format!("starting thread {name}"),
                    source: e,
                })
        };
        let preparer = Arc::clone(&inner);
        threads.push(spawn(
            "roamkv-segments",
            Box::new(move || preparer.spares.run_preparer()),
        )?);
        if inner.options.background_maintenance {
            let maintainer = Arc::clone(&inner);
            threads.push(spawn(
                "roamkv-maintain",
                Box::new(move || maintainer.run_maintenance()),
            )?);
        }
        if let Durability::Periodic { interval_ms } = inner.options.durability {
            let flusher = Arc::clone(&inner);
            threads.push(spawn(
                "roamkv-flush",
                Box::new(move || flusher.run_periodic_sync(interval_ms)),
            )?);
        }
        Ok(Engine {
            inner,
            threads,
            closed: false,
        })
    }

    pub fn put(&self, device: &str, sensor: &str, ts_ms: i64, value: &[u8]) -> Result<()> {
        self.put_batch(&[Record {
            device,
            sensor,
            ts_ms,
            value,
        }])
    }

    /// Writes the records atomically (after a crash, all or none of them are there) and returns
    /// when they are acknowledged under the configured durability. On an input error nothing
    /// is written.
    pub fn put_batch(&self, records: &[Record<'_>]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let batch = encode_batch(records, self.inner.options.segment_bytes)?;
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let mut stall = Stall::default();
        let (new_devices, register_bytes) = loop {
            while st.log.queued_bytes > limits::PENDING_BYTES_MAX && st.poisoned.is_none() {
                inner.group_done.wait(&mut st);
            }
            inner.check_poisoned(&st)?;
            // Devices seen for the first time get a REGISTER record, placed before the batch
            // in the same contiguous run.
            let mut new_names: Vec<&str> = records
                .iter()
                .map(|r| r.device)
                .filter(|d| st.map.id(d).is_none())
                .collect();
            new_names.sort_unstable();
            new_names.dedup();
            let devices = st.map.len() as u64 + new_names.len() as u64;
            if devices > inner.options.devices_max && !new_names.is_empty() {
                return Err(Error::TooManyDevices {
                    devices: st.map.len() as u64,
                    max: inner.options.devices_max,
                });
            }
            let register_bytes: usize = new_names
                .iter()
                .map(|d| record::HEADER_BYTES + 10 + d.len())
                .sum();
            // Waiting for log room releases the lock: then what was read above is re-read.
            if inner.make_room(&mut st, register_bytes + batch.bytes.len(), &mut stall)? {
                break (new_names, register_bytes);
            }
        };

        // From here to `enqueue` the lock is held throughout: the mapping table and the log
        // placement change together.
        let now_ms = inner.options.clock.now_ms();
        let new_devices: Vec<(DeviceId, &str)> = new_devices
            .into_iter()
            .map(|d| (st.map.register(d, Tier::Upper, now_ms), d))
            .collect();
        let ids: Vec<DeviceId> = records
            .iter()
            .map(|r| st.map.id(r.device).expect("registered above"))
            .collect();
        let (segment, offset) = inner.place(&mut st, register_bytes + batch.bytes.len());
        let seq_low = segment.seq_low();

        let mut bytes = Vec::with_capacity(register_bytes + batch.bytes.len());
        let mut placed = Vec::with_capacity(new_devices.len() + records.len());
        for (id, device) in &new_devices {
            let at = bytes.len();
            record::encode_register(&mut bytes, seq_low, device, now_ms);
            placed.push((*id, at, bytes.len() - at));
        }
        let base = bytes.len();
        bytes.extend_from_slice(&batch.bytes);
        let last = batch.records.len() - 1;
        for (i, (start, len, payload_crc)) in batch.records.iter().enumerate() {
            let at = base + start;
            record::seal(&mut bytes[at..at + len], seq_low, i == last, *payload_crc);
            placed.push((ids[i], at, *len));
        }
        let ticket = st.log.enqueue(segment, offset, bytes, placed);
        inner.wait_for(st, ticket)?;

        Counters::add(&inner.counters.user_bytes, batch.user_bytes);
        Counters::add(&inner.counters.user_records, records.len() as u64);
        if inner.state.lock().index_bytes > inner.options.index_bytes_max {
            inner.migrate_for_memory()?;
        }
        Ok(())
    }

    /// The device leaves this edge: its upper-tier data is dropped at once without rewriting
    /// anything (one small DEPART record is logged); a settled device's readings are removed
    /// from the lower tier with a range delete. Unknown devices are a no-op.
    pub fn depart(&self, device: &str) -> Result<()> {
        validate_device(device)?;
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let len = record::HEADER_BYTES + 2 + device.len();
        let mut stall = Stall::default();
        loop {
            inner.check_poisoned(&st)?;
            if st.map.id(device).is_none() {
                return Ok(());
            }
            if inner.make_room(&mut st, len, &mut stall)? {
                break;
            }
        }
        let id = st
            .map
            .unmap(device)
            .expect("mapped: checked under the same lock");
        let (segment, offset) = inner.place(&mut st, len);
        let mut bytes = Vec::with_capacity(len);
        record::encode_depart(&mut bytes, segment.seq_low(), device);
        let ticket = st.log.enqueue(segment, offset, bytes, vec![(id, 0, len)]);
        inner.wait_for(st, ticket)?;
        Counters::add(&inner.counters.departures, 1);
        Ok(())
    }

    pub fn get(&self, device: &str, sensor: &str, ts_ms: i64) -> Result<Option<Vec<u8>>> {
        validate_device(device)?;
        validate_sensor(sensor)?;
        Ok(self
            .read(device, Some(sensor), ts_ms, ts_ms.saturating_add(1), true)?
            .pop()
            .map(|r| r.value))
    }

    /// Readings of one device (one sensor, if given) with from_ms <= ts < to_ms, in (sensor, ts) order.
    pub fn scan(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<Reading>> {
        validate_device(device)?;
        if let Some(sensor) = sensor {
            validate_sensor(sensor)?;
        }
        self.read(device, sensor, from_ms, to_ms, false)
    }

    fn read(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        point: bool,
    ) -> Result<Vec<Reading>> {
        // A read may race with a migration that retires and recycles the segment it is reading:
        // the record then carries another segment's sequence. Retry: the device is settled now.
        const ATTEMPTS: usize = 4;
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            match self.inner.read_once(device, sensor, from_ms, to_ms, point) {
                Ok(readings) => return Ok(readings),
                Err(ReadError::Moved(e)) => last_error = Some(e),
                Err(ReadError::Fatal(e)) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| Error::Lower("read retries exhausted".into())))
    }

    /// Runs due migrations and retires segments now (the background thread does this every
    /// `maintenance_interval_ms`; with `background_maintenance: false` the caller does).
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(true)
    }

    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The data directory's path.
    pub fn path(&self) -> &Path {
        &self.inner.dir.path
    }

    /// Stops background work, syncs the log and persists the lower tier.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.stop_threads();
        self.inner.sync_unsynced()?;
        self.inner.lower.persist()
    }

    fn stop_threads(&mut self) {
        self.closed = true;
        *self.inner.shutdown.lock() = true;
        self.inner.shutdown_signal.notify_all();
        self.inner.spares.shut_down();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }

    /// Stops as a killed process would: background threads end, and nothing more is synced or
    /// persisted (the log keeps what reached it; the lower tier loses its memtable). For crash
    /// and power-cut tests that run many "processes" in one (`tests/power_cut.rs`).
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.stop_threads();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("roamkv: closing {}: {e}", self.inner.dir.path.display());
        }
    }
}

/// Poisons the engine if a group commit's leader unwinds (see `Inner::lead_group`).
struct LeaderGuard<'a> {
    inner: &'a Inner,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        // Only reached by unwinding: the normal path forgets the guard. The leader's own state
        // guard was made after this one, so unwinding has already released it.
        let mut st = self.inner.state.lock();
        st.log.leader_active = false;
        st.poisoned
            .get_or_insert_with(|| "a group commit panicked; reopen to recover".to_string());
        self.inner.group_done.notify_all();
    }
}

/// Checks one record against the engine's limits without writing it (what `put` checks first).
pub fn validate_record(r: &Record<'_>) -> Result<()> {
    validate_device(r.device)?;
    validate_sensor(r.sensor)?;
    if r.value.len() > limits::VALUE_BYTES_MAX {
        return Err(Error::ValueTooLarge {
            len: r.value.len(),
            max: limits::VALUE_BYTES_MAX,
        });
    }
    Ok(())
}

fn encode_batch(records: &[Record<'_>], segment_bytes: u64) -> Result<EncodedBatch> {
    let mut total = 0usize;
    for r in records {
        validate_record(r)?;
        total += record::put_len(r.device, r.sensor, r.value);
    }
    // Room for one REGISTER record per record, in the worst case, must also fit in a segment.
    let worst = total + records.len() * (record::HEADER_BYTES + 10 + limits::DEVICE_ID_BYTES_MAX);
    let capacity = (segment_bytes - SEGMENT_HEADER_BYTES) as usize;
    if records.len() > limits::BATCH_RECORDS_MAX
        || total > limits::BATCH_BYTES_MAX
        || worst > capacity
    {
        return Err(Error::BatchTooLarge {
            records: records.len(),
            bytes: total,
            max_records: limits::BATCH_RECORDS_MAX,
            max_bytes: limits::BATCH_BYTES_MAX.min(capacity),
        });
    }
    let mut bytes = Vec::with_capacity(total);
    let mut placed = Vec::with_capacity(records.len());
    let mut user = 0;
    for r in records {
        let start = bytes.len();
        let crc = record::encode_put_unsealed(&mut bytes, r.device, r.sensor, r.ts_ms, r.value);
        placed.push((start, bytes.len() - start, crc));
        user += user_bytes(r.device, r.sensor, r.value);
    }
    Ok(EncodedBatch {
        bytes,
        records: placed,
        user_bytes: user,
    })
}

pub(crate) enum ReadError {
    /// The record was not where the index said: the device moved tiers meanwhile.
    Moved(Error),
    Fatal(Error),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Fatal(e)
    }
}

impl Inner {
    pub(crate) fn check_poisoned(&self, st: &State) -> Result<()> {
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Makes sure the active segment has `len` free bytes, moving to a ready spare if it lacks
    /// them. When the log is at its budget, waits (the write stall, bounded by
    /// `write_stall_ms_max` over the whole write) for maintenance to retire segments, and fails
    /// with `Error::NoSpace` past the bound. Returns false when it released the lock to wait:
    /// the caller must then re-check what it read under the lock.
    pub(crate) fn make_room(
        &self,
        st: &mut MutexGuard<'_, State>,
        len: usize,
        stall: &mut Stall,
    ) -> Result<bool> {
        if st.log.has_room(len) {
            return Ok(true);
        }
        let live_bytes = self.spares.live_bytes.load(Ordering::Relaxed);
        if live_bytes + self.options.segment_bytes > self.spares.budget_bytes {
            let started = *stall.started.get_or_insert_with(|| {
                Counters::add(&self.counters.write_stalls, 1);
                Instant::now()
            });
            let waited = started.elapsed();
            let bound = Duration::from_millis(self.options.write_stall_ms_max);
            if waited >= bound {
                Counters::add(&self.counters.write_stall_ms, waited.as_millis() as u64);
                Counters::add(&self.counters.no_space_errors, 1);
                return Err(self
                    .spares
                    .no_space("the log budget is full and maintenance freed no segment in time"));
            }
            self.wake_maintenance();
            let timeout = (bound - waited).min(Duration::from_millis(50));
            self.space_freed.wait_for(st, timeout);
            return Ok(false);
        }
        let segment = match self.spares.take() {
            Ok(segment) => Arc::new(segment),
            Err(e) => {
                if matches!(e, Error::NoSpace { .. }) {
                    Counters::add(&self.counters.no_space_errors, 1);
                }
                return Err(e);
            }
        };
        if let Some(started) = stall.started.take() {
            Counters::add(
                &self.counters.write_stall_ms,
                started.elapsed().as_millis() as u64,
            );
        }
        st.log.activate(segment);
        Ok(true)
    }

    /// Reserves `len` contiguous bytes of the active segment (`make_room` made sure they are
    /// there, under the same lock).
    pub(crate) fn place(&self, st: &mut MutexGuard<'_, State>, len: usize) -> (Arc<Segment>, u64) {
        let (segment, offset, want_spare) = st.log.place(len);
        if want_spare {
            self.spares.want();
        }
        (segment, offset)
    }

    /// Asks the maintenance thread to run now rather than at its next interval.
    pub(crate) fn wake_maintenance(&self) {
        if !self.maintenance_wanted.swap(true, Ordering::Relaxed) {
            let _guard = self.shutdown.lock();
            self.shutdown_signal.notify_all();
        }
    }

    /// Waits until `ticket` is committed, leading a group commit when no one else is.
    pub(crate) fn wait_for<'a>(&'a self, mut st: MutexGuard<'a, State>, ticket: u64) -> Result<()> {
        loop {
            if st.log.committed_ticket >= ticket {
                return Ok(());
            }
            self.check_poisoned(&st)?;
            if st.log.leader_active {
                self.group_done.wait(&mut st);
            } else {
                st = self.lead_group(st)?;
            }
        }
    }

    /// Leads one group commit: takes everything queued, writes it without the lock
    /// (`Group::write`), then applies it in log order and wakes its writers.
    fn lead_group<'a>(&'a self, mut st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        let group = st.log.take_group();
        let sync = self.options.durability == Durability::Sync;
        drop(st);
        // A panic from here to the end (in the write, or while applying under the lock) would
        // leave `leader_active` set and the group's writers waiting forever, or let a later
        // leader acknowledge records never applied: the guard poisons the engine instead.
        let guard = LeaderGuard { inner: self };
        let written = group.write(sync, self.options.log_writeback_bytes, &self.counters);
        let mut st = self.state.lock();
        st.log.leader_active = false;
        self.options.fail_points.check_group_commit_panic();
        let outcome = written.and_then(|synced| {
            self.apply_group(&mut st, &group.chunks, &group.records)?;
            Ok(synced)
        });
        std::mem::forget(guard);
        match outcome {
            Ok(synced) => {
                st.log.group_committed(&group, &synced);
                self.group_done.notify_all();
                Ok(st)
            }
            Err(e) => {
                // A failed write or sync leaves the file's state unknown (fsyncgate): refuse
                // every later write; reopening recovers from what reached the disk.
                st.poisoned = Some(e.to_string());
                self.group_done.notify_all();
                Err(e)
            }
        }
    }

    fn apply_group(
        &self,
        st: &mut State,
        chunks: &[Chunk],
        records: &[QueuedRecord],
    ) -> Result<()> {
        let mut lower_ops = Vec::new();
        for queued in records {
            let chunk = &chunks[queued.chunk];
            let bytes = &chunk.bytes[queued.at..queued.at + queued.len];
            let Decode::Record(decoded) = record::decode(bytes, chunk.segment.seq_low()) else {
                return Err(Error::Poisoned(format!(
                    "internal: a record the engine just encoded for {} at {} does not decode",
                    chunk.segment.path.display(),
                    chunk.offset + queued.at as u64
                )));
            };
            let position = LogPosition {
                segment_seq: chunk.segment.seq,
                offset: chunk.offset + queued.at as u64,
            };
            let lower_ops_before = lower_ops.len();
            apply(
                &self.counters,
                st,
                &mut lower_ops,
                queued.device,
                &decoded.body,
                position,
                queued.len as u32,
            );
            if lower_ops.len() > lower_ops_before {
                st.log.mark_lower_write(position.segment_seq);
            }
        }
        self.write_lower(st, &lower_ops)
    }

    pub(crate) fn write_lower(&self, st: &mut State, ops: &[LowerOp]) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        st.lower_dirty = true;
        self.lower.write(ops)
    }

    fn read_once(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        point: bool,
    ) -> Result<Vec<Reading>, ReadError> {
        let located: Vec<(String, IndexEntry, Arc<Segment>)> = {
            let st = self.state.lock();
            let Some((_, entry)) = st.map.lookup(device) else {
                return Ok(Vec::new());
            };
            if entry.tier == Tier::Lower {
                let lower_id = entry.lower_id;
                drop(st);
                return Ok(self.read_lower(device, lower_id, sensor, from_ms, to_ms, point)?);
            }
            let hits = match (point, sensor) {
                (true, Some(sensor)) => entry
                    .index
                    .get(sensor, from_ms)
                    .map(|e| (sensor, e))
                    .into_iter()
                    .collect(),
                _ => entry.index.range(sensor, from_ms, to_ms),
            };
            hits.into_iter()
                .map(|(sensor, e)| {
                    let segment = st.log.segment_of(&e);
                    (sensor.to_owned(), e, Arc::clone(segment))
                })
                .collect()
        };
        read_upper(device, located)
    }

    fn read_lower(
        &self,
        device: &str,
        lower_id: u64,
        sensor: Option<&str>,
        from_ms: i64,
        to_ms: i64,
        point: bool,
    ) -> Result<Vec<Reading>> {
        if let (true, Some(sensor)) = (point, sensor) {
            let value = self
                .lower
                .get(&key::reading_key(lower_id, sensor, from_ms))?;
            return Ok(value
                .map(|value| Reading {
                    device: device.into(),
                    sensor: sensor.into(),
                    ts_ms: from_ms,
                    value,
                })
                .into_iter()
                .collect());
        }
        // The range read is a page without a cursor or a bound (query.rs).
        self.page_lower(device, lower_id, sensor, from_ms, to_ms, None, usize::MAX)
    }

    /// fdatasyncs every segment written since its last sync (Periodic and None modes). A failure
    /// poisons the engine: the kernel may have dropped the pages it could not write, and a
    /// retried fdatasync would report success for data that is gone (fsyncgate).
    pub(crate) fn sync_unsynced(&self) -> Result<()> {
        let segments = self.state.lock().log.take_unsynced();
        if segments.is_empty() {
            return Ok(());
        }
        match commit_log::sync_segments(&segments, &self.counters) {
            Ok(synced) => {
                self.state.lock().log.mark_synced(&synced);
                Ok(())
            }
            Err(e) => {
                let mut st = self.state.lock();
                st.poisoned.get_or_insert_with(|| e.to_string());
                self.group_done.notify_all();
                Err(e)
            }
        }
    }

    fn run_periodic_sync(&self, interval_ms: u64) {
        let interval = std::time::Duration::from_millis(interval_ms);
        loop {
            {
                let mut stop = self.shutdown.lock();
                if !*stop {
                    self.shutdown_signal.wait_for(&mut stop, interval);
                }
                if *stop {
                    return;
                }
            }
            if self.sync_unsynced().is_err() {
                return; // poisoned: nothing more to sync
            }
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let now_ms = self.options.clock.now_ms();
        let mut stats = {
            let st = self.state.lock();
            let mut stats = Stats {
                index_bytes: st.index_bytes,
                live_segments: st.log.segments.len() as u64,
                pending_bytes: st.log.queued_bytes as u64,
                devices: st.map.len() as u64,
                last_maintenance_error: st.last_maintenance_error.clone(),
                ..Stats::default()
            };
            for (_, entry) in st.map.entries() {
                match entry.tier {
                    Tier::Upper | Tier::Migrating => {
                        stats.upper.devices += 1;
                        stats.upper.records += entry.index.records;
                        stats.upper.bytes += entry.index.record_bytes;
                        let due_at = entry
                            .registered_at_ms
                            .saturating_add(self.options.management_time_ms);
                        if now_ms >= due_at {
                            stats.migration_backlog_devices += 1;
                            stats.migration_backlog_bytes += entry.index.record_bytes;
                        }
                    }
                    Tier::Lower => stats.lower.devices += 1,
                }
            }
            stats
        };
        let (lower_records, lower_bytes) = self.lower.estimate();
        let c = &self.counters;
        stats.user_bytes = Counters::get(&c.user_bytes);
        stats.user_records = Counters::get(&c.user_records);
        stats.log_bytes_written = Counters::get(&c.log_bytes_written);
        stats.log_preallocated_bytes = Counters::get(&c.log_preallocated_bytes);
        stats.lower_bytes_written = self.lower.bytes_written();
        stats.reclaimed_bytes_without_write = Counters::get(&c.reclaimed_bytes_without_write);
        stats.lower.records = lower_records;
        stats.lower.bytes = lower_bytes;
        stats.index_bytes_max = self.options.index_bytes_max;
        stats.migrations = Counters::get(&c.migrations);
        stats.migrated_records = Counters::get(&c.migrated_records);
        stats.early_migrations = Counters::get(&c.early_migrations);
        stats.migration_failures = Counters::get(&c.migration_failures);
        stats.departures = Counters::get(&c.departures);
        stats.trims = Counters::get(&c.trims);
        stats.fdatasyncs = Counters::get(&c.fdatasyncs);
        stats.group_commits = Counters::get(&c.group_commits);
        stats.log_bytes = self.spares.log_bytes();
        stats.log_bytes_max = self.spares.budget_bytes;
        stats.spare_segments_bytes = self.spares.spare_bytes.load(Ordering::Relaxed);
        stats.segments_recycled = Counters::get(&c.segments_recycled);
        stats.segments_retired = Counters::get(&c.segments_retired);
        stats.pending_bytes_max = limits::PENDING_BYTES_MAX as u64;
        stats.devices_max = self.options.devices_max;
        stats.migration_run_bytes_max = self.migration_run_bytes_max();
        stats.log_dirty_bytes_max = 2 * self.options.log_writeback_bytes;
        stats.write_stalls = Counters::get(&c.write_stalls);
        stats.write_stall_ms = Counters::get(&c.write_stall_ms);
        stats.no_space_errors = Counters::get(&c.no_space_errors);
        stats.lower_persists = Counters::get(&c.lower_persists);
        stats.recovery_ms = self.recovery.ms;
        stats.recovered_records = self.recovery.records;
        stats.recovery_buffer_bytes_max = self.recovery.buffer_bytes_max;
        stats.recovery_cut = self.recovery.cut.clone();
        stats
    }
}

/// Reads the chosen upper-tier records from the log (outside the state lock).
pub(crate) fn read_upper(
    device: &str,
    chosen: Vec<(String, IndexEntry, Arc<Segment>)>,
) -> Result<Vec<Reading>, ReadError> {
    let mut readings = Vec::with_capacity(chosen.len());
    for (sensor, entry, segment) in chosen {
        let bytes = segment.read_record(entry.offset as u64, entry.len)?;
        let error = |reason: String| Error::Corrupt {
            file: segment.path.clone(),
            offset: entry.offset as u64,
            reason,
        };
        match at_index(&bytes, segment.seq_low(), &entry) {
            AtIndex::Put {
                device: d,
                sensor: s,
                value,
            } if d == device && s == sensor => readings.push(Reading {
                device: device.into(),
                sensor,
                ts_ms: entry.ts_ms,
                value: value.to_vec(),
            }),
            AtIndex::Put { .. } => {
                return Err(ReadError::Moved(error(
                    "the index points at another device's record".into(),
                )));
            }
            AtIndex::Elsewhere(reason) => return Err(ReadError::Moved(error(reason))),
            AtIndex::Corrupt(reason) => return Err(ReadError::Fatal(error(reason))),
        }
    }
    Ok(readings)
}

/// What the log holds where an index entry points.
pub(crate) enum AtIndex<'a> {
    /// The indexed reading (same timestamp): its device, sensor and value.
    Put {
        device: &'a str,
        sensor: &'a str,
        value: &'a [u8],
    },
    /// Not the indexed reading: the segment was retired and reused meanwhile (why, in words).
    Elsewhere(String),
    /// Bytes of this segment that fail their checksum: damage on disk. (A reused segment fails
    /// the sequence check instead, which reads as `Elsewhere`.)
    Corrupt(String),
}

/// Decodes the record at an index entry (`bytes` = the entry's `len` bytes at its offset).
pub(crate) fn at_index<'a>(bytes: &'a [u8], seq_low: u32, entry: &IndexEntry) -> AtIndex<'a> {
    match record::decode(bytes, seq_low) {
        Decode::Record(d) => match d.body {
            Body::Put {
                device,
                sensor,
                ts_ms,
                value,
            } if ts_ms == entry.ts_ms => AtIndex::Put {
                device,
                sensor,
                value,
            },
            _ => AtIndex::Elsewhere("the index points at another record".into()),
        },
        Decode::End => AtIndex::Elsewhere("the index points at no record of this segment".into()),
        Decode::Corrupt(reason) => AtIndex::Corrupt(reason),
    }
}

/// Applies one logged record to the in-memory state (live path and recovery alike).
pub(crate) fn apply(
    counters: &Counters,
    st: &mut State,
    lower_ops: &mut Vec<LowerOp>,
    id: DeviceId,
    body: &Body<'_>,
    position: LogPosition,
    len: u32,
) {
    let State {
        map,
        log,
        index_bytes,
        ..
    } = st;
    let Some(entry) = map.entry_mut(id) else {
        return; // the incarnation is gone (departed and already dropped)
    };
    match *body {
        Body::Register { .. } => {
            if entry.tier != Tier::Lower {
                let before = entry.index.index_bytes();
                entry.index.hold_segment(position.segment_seq);
                *index_bytes += entry.index.index_bytes() - before;
                log.hold(position.segment_seq);
            }
        }
        Body::Put {
            sensor,
            ts_ms,
            value,
            ..
        } => match entry.tier {
            Tier::Upper | Tier::Migrating => {
                let index_entry = IndexEntry {
                    ts_ms,
                    segment_seq: position.segment_seq,
                    offset: u32::try_from(position.offset).expect("segment offsets fit in u32"),
                    len,
                };
                let before = entry.index.index_bytes();
                entry.index.insert(sensor, index_entry);
                entry.index.hold_segment(position.segment_seq);
                *index_bytes += entry.index.index_bytes() - before;
                log.hold(position.segment_seq);
            }
            Tier::Lower => lower_ops.push(LowerOp::Put(
                key::reading_key(entry.lower_id, sensor, ts_ms),
                value.to_vec(),
            )),
        },
        Body::Depart { .. } => match entry.tier {
            Tier::Upper => {
                let Some(entry) = map.remove(id) else { return };
                Counters::add(
                    &counters.reclaimed_bytes_without_write,
                    entry.index.record_bytes,
                );
                *index_bytes -= entry.index.index_bytes();
                log.release(&entry.index);
            }
            Tier::Migrating => entry.departed = true,
            Tier::Lower => {
                let (start, end) = key::device_reading_range(entry.lower_id);
                lower_ops.push(LowerOp::DeleteRange(start, end));
                lower_ops.push(LowerOp::Delete(key::device_key(entry.lower_id)));
                map.remove(id);
            }
        },
        Body::Trim { before_ms, .. } => {
            entry.apply_trim(index_bytes, lower_ops, before_ms, position);
        }
        // Not a device's record: it only closes its segment (never queued for `apply`).
        Body::SegmentEnd { .. } => {}
    }
}
