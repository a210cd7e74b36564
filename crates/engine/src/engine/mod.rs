//! The engine's public face: `Engine`, its write path (validation and encoding outside the
//! lock, then placing and queueing under it) and the calls that hand off to the modules that
//! do the work: the group commit (`commit`), reads and queries (`query`), trimming
//! (`trim`), maintenance (`maintenance`) and opening (`recovery`). `Engine` holds the shared
//! state (`state::Inner`) and the background threads.
//!
//! The top room: it may name every other, and none names it. `snapshot` gathers `Engine::stats`;
//! `trim` is `Engine::trim_before`.

mod encode;
mod snapshot;
mod trim;

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::commit::group_commit::{self, Stall};
use crate::commit::index_apply;
use crate::commit_log::record;
use crate::feed::{self, Feed};
use crate::maintenance;
use crate::model::error::{Error, Result};
use crate::model::ids::DeviceId;
use crate::model::limits;
use crate::model::reading::{Reading, Record, validate_device};
use crate::options::{Durability, IndexApply, Options};
use crate::query::{self, DeviceInfo, ReadView, ScanCursor, ScanPage};
use crate::recovery;
use crate::state::{Inner, State};
use crate::stats::timed_mutex::TimedGuard;
use crate::stats::{Counters, Stats};
use encode::{EncodedBatch, encode_batch};

/// The embedded engine. Cheap to share across threads by reference (`&Engine` is `Sync`).
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    closed: bool,
}

/// A batch queued for the group commit: what its writer waits for and counts once it commits.
struct Queued {
    ticket: u64,
    user_bytes: u64,
    records: u64,
    /// The index was over its cap when it was queued: the log ages early once it commits.
    over_index_cap: bool,
}

impl Engine {
    /// Opens (or creates) the data directory and recovers from its log. See recovery/.
    /// `Options::read_only`: opens an existing one and writes nothing, with no threads.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<Engine> {
        let inner = Arc::new(recovery::open(dir.as_ref(), options)?);
        let mut threads = Vec::new();
        if inner.options.read_only {
            return Ok(Engine {
                inner,
                threads,
                closed: false,
            });
        }
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| Error::Io {
                    context: format!("starting thread {name}"),
                    source: e,
                })
        };
        if inner.options.index_apply == IndexApply::AfterAck {
            let applier = Arc::clone(&inner);
            threads.push(spawn(
                "roamkv-index",
                Box::new(move || index_apply::run(&applier)),
            )?);
        }
        let preparer = Arc::clone(&inner);
        threads.push(spawn(
            "roamkv-segments",
            Box::new(move || preparer.spares.run_preparer()),
        )?);
        if inner.options.background_maintenance {
            let maintainer = Arc::clone(&inner);
            threads.push(spawn(
                "roamkv-maintain",
                Box::new(move || maintenance::run(&maintainer)),
            )?);
        }
        if let Durability::Periodic { interval_ms } = inner.options.durability {
            let flusher = Arc::clone(&inner);
            threads.push(spawn(
                "roamkv-flush",
                Box::new(move || group_commit::run_periodic_sync(&flusher, interval_ms)),
            )?);
        }
        Ok(Engine {
            inner,
            threads,
            closed: false,
        })
    }

    /// Writes one reading; `ts_ns` is nanoseconds since the Unix epoch (see `put_batch`).
    pub fn put(&self, device: &str, sensor: &str, ts_ns: i64, value: &[u8]) -> Result<()> {
        self.put_batch(&[Record {
            device,
            sensor,
            ts_ns,
            value,
        }])
    }

    /// Writes the records atomically (after a crash, all or none of them are there) and returns
    /// when they are acknowledged under the configured durability. On an input error nothing
    /// is written. A record with the device, sensor and timestamp of one already stored replaces
    /// it (a retried write is stored once).
    pub fn put_batch(&self, records: &[Record<'_>]) -> Result<()> {
        self.inner.writable()?;
        if records.is_empty() {
            return Ok(());
        }
        let batch = encode_batch(records, self.inner.options.segment_bytes)?;
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let queued = self.enqueue_batch(&mut st, records, batch)?;
        group_commit::wait_for(inner, st, queued.ticket)?;
        self.note_committed(&[queued])
    }

    /// Writes several batches, each atomically as `put_batch` writes one, queued together and
    /// waited for once: for a caller that collects the batches of many clients on one thread
    /// (the server's ingest), one wake-up per group instead of a thread per batch. A batch's
    /// input error fails that batch only; the answers come in the batches' order. Batches are
    /// independent: one may be acknowledged while a later one is refused (no log room).
    pub fn put_batches(&self, batches: &[&[Record<'_>]]) -> Vec<Result<()>> {
        if self.inner.writable().is_err() {
            return batches.iter().map(|_| self.inner.writable()).collect();
        }
        let segment_bytes = self.inner.options.segment_bytes;
        let encoded: Vec<Result<Option<EncodedBatch>>> = batches
            .iter()
            .map(|records| {
                (!records.is_empty())
                    .then(|| encode_batch(records, segment_bytes))
                    .transpose()
            })
            .collect();
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let mut queued = Vec::with_capacity(batches.len());
        let mut answers: Vec<Result<()>> = Vec::with_capacity(batches.len());
        for (records, batch) in batches.iter().zip(encoded) {
            answers.push(match batch {
                Ok(Some(batch)) => self
                    .enqueue_batch(&mut st, records, batch)
                    .map(|q| queued.push(q)),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            });
        }
        let Some(last) = queued.last() else {
            return answers;
        };
        let committed = group_commit::wait_for(inner, st, last.ticket)
            .and_then(|()| self.note_committed(&queued));
        if let Err(e) = committed {
            // A failed commit poisons the engine: none of the queued batches is acknowledged.
            let reason = e.to_string();
            let mut first = Some(e);
            for answer in answers.iter_mut().filter(|a| a.is_ok()) {
                *answer = Err(first
                    .take()
                    .unwrap_or_else(|| Error::Poisoned(reason.clone())));
            }
        }
        answers
    }

    /// Places an encoded batch in the log and queues it for the group commit (under the state
    /// lock, which it may release while it waits for room). Returns its ticket.
    fn enqueue_batch(
        &self,
        st: &mut TimedGuard<'_, State>,
        records: &[Record<'_>],
        mut batch: EncodedBatch,
    ) -> Result<Queued> {
        let inner = &*self.inner;
        let mut stall = Stall::default();
        let (new_devices, register_bytes) = loop {
            while st.log.queued_bytes > limits::PENDING_BYTES_MAX {
                inner.check_poisoned(st)?;
                st.wait(&inner.group_done);
            }
            index_apply::wait_for_lag(inner, st)?;
            inner.check_poisoned(st)?;
            let (new_names, register_bytes) =
                devices_to_register(st, records, inner.options.devices_max)?;
            // Waiting for log room releases the lock: then what was read above is re-read.
            if group_commit::make_room(inner, st, register_bytes + batch.bytes.len(), &mut stall)? {
                break (new_names, register_bytes);
            }
        };
        // From here to `enqueue` the lock is held throughout: the mapping table and the log
        // placement change together.
        let now_ms = inner.options.clock.now_ms();
        let new_devices: Vec<(DeviceId, &str)> = new_devices
            .into_iter()
            .map(|d| (st.map.register(d, now_ms), d))
            .collect();
        let ids: Vec<DeviceId> = records
            .iter()
            .map(|r| st.map.id(r.device).expect("registered above"))
            .collect();
        let (segment, offset) = group_commit::place(inner, st, register_bytes + batch.bytes.len());
        let seq_low = segment.seq_low();
        if !new_devices.is_empty() {
            let mut registers = Vec::with_capacity(register_bytes);
            let mut placed = Vec::with_capacity(new_devices.len());
            for (id, device) in &new_devices {
                let at = registers.len();
                record::encode_register(&mut registers, seq_low, device, now_ms);
                placed.push((*id, at, registers.len() - at));
            }
            st.log
                .enqueue(Arc::clone(&segment), offset, registers, placed);
        }
        // The batch goes to the log as the writer encoded it: sealed in place, queued as one
        // piece of the group's pwritev (never copied again).
        let last = batch.records.len() - 1;
        let mut placed = Vec::with_capacity(batch.records.len());
        for (i, r) in batch.records.iter().enumerate() {
            record::seal(
                &mut batch.bytes[r.start..r.start + r.len],
                seq_low,
                i == last,
                r.payload_crc,
            );
            placed.push((ids[r.first], r.start, r.len));
        }
        let ticket = st
            .log
            .enqueue(segment, offset + register_bytes as u64, batch.bytes, placed);
        st.map.note_last_ticket(&ids, ticket);
        Ok(Queued {
            ticket,
            user_bytes: batch.user_bytes,
            records: records.len() as u64,
            over_index_cap: st.index_account.bytes > inner.options.index_bytes_max,
        })
    }

    /// Counts committed batches, and ages the log early if the index was over its cap when
    /// they were queued.
    fn note_committed(&self, queued: &[Queued]) -> Result<()> {
        let inner = &*self.inner;
        for q in queued {
            Counters::add(&inner.counters.user_bytes, q.user_bytes);
            Counters::add(&inner.counters.user_records, q.records);
        }
        if queued.iter().any(|q| q.over_index_cap) {
            maintenance::age_for_memory(inner)?;
        }
        Ok(())
    }

    /// The device leaves this edge: its readings are dropped at once without rewriting anything
    /// (one small DEPART record is logged): in the log they are simply no longer indexed; in the
    /// lower tier their windows lose them, and a window drops whole once nobody reads it.
    /// Unknown devices are a no-op.
    pub fn depart(&self, device: &str) -> Result<()> {
        self.inner.writable()?;
        validate_device(device)?;
        let inner = &*self.inner;
        let mut st = inner.state.lock();
        let len = record::depart_len(device);
        let mut stall = Stall::default();
        loop {
            inner.check_poisoned(&st)?;
            if st.map.id(device).is_none() {
                return Ok(());
            }
            if group_commit::make_room(inner, &mut st, len, &mut stall)? {
                break;
            }
        }
        let id = st
            .map
            .unmap(device)
            .expect("mapped: checked under the same lock");
        let (segment, offset) = group_commit::place(inner, &mut st, len);
        let mut bytes = Vec::with_capacity(len);
        record::encode_depart(&mut bytes, segment.seq_low(), device);
        let ticket = st.log.enqueue(segment, offset, bytes, vec![(id, 0, len)]);
        group_commit::wait_for(inner, st, ticket)?;
        Counters::add(&inner.counters.departures, 1);
        Ok(())
    }

    /// The reading of `device`'s `sensor` at `ts_ns`, if there is one.
    pub fn get(&self, device: &str, sensor: &str, ts_ns: i64) -> Result<Option<Vec<u8>>> {
        // query::read checks the device, then the sensor.
        let end_ns = ts_ns.saturating_add(1);
        let mut found = query::read(&self.inner, device, Some(sensor), ts_ns, end_ns, true)?;
        Ok(found.pop().map(|r| r.value))
    }

    /// Readings of one device (one sensor, if given) with from_ns <= ts < to_ns, in (sensor, ts)
    /// order.
    pub fn scan(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ns: i64,
        to_ns: i64,
    ) -> Result<Vec<Reading>> {
        query::read(&self.inner, device, sensor, from_ns, to_ns, false)
    }

    /// Every device mapped now, sorted by name. Costs one pass over the mapping table under
    /// the state lock (no I/O).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        query::devices(&self.inner)
    }

    /// One device's entry, if it is mapped: `devices` for one name, without the pass.
    pub fn device(&self, name: &str) -> Option<DeviceInfo> {
        query::device(&self.inner, name)
    }

    /// The newest reading of each sensor of a device (of one sensor, if given), in sensor
    /// order. The log: the last index entry per sensor; the lower tier: one reverse seek per
    /// sensor and run. An unknown device has none.
    pub fn latest(&self, device: &str, sensor: Option<&str>) -> Result<Vec<Reading>> {
        query::latest(&self.inner, device, sensor)
    }

    /// Up to `limit` readings of a device (one sensor, if given) with from_ns <= ts < to_ns, in
    /// (sensor, ts) order, starting strictly after `after`. `next` is set when more may follow:
    /// pass it back as `after` for the next page. A page costs its own size, not the window's.
    pub fn scan_page(
        &self,
        device: &str,
        sensor: Option<&str>,
        from_ns: i64,
        to_ns: i64,
        after: Option<&ScanCursor>,
        limit: usize,
    ) -> Result<ScanPage> {
        query::scan_page(
            &self.inner,
            None,
            device,
            sensor,
            from_ns,
            to_ns,
            after,
            limit,
        )
    }

    /// A view for reading many devices page by page as of now (an export): the devices mapped
    /// and the end of what is acknowledged, taken together (`ReadView`).
    pub fn read_view(&self) -> Result<ReadView> {
        query::read_view(&self.inner)
    }

    /// `scan_page` in a view: the same page, without the log's readings written after the view
    /// was taken. Readings that leave the log meanwhile are found in the lower tier, as by any
    /// page; a device that departed since has none.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_page_in(
        &self,
        view: &ReadView,
        device: &str,
        sensor: Option<&str>,
        from_ns: i64,
        to_ns: i64,
        after: Option<&ScanCursor>,
        limit: usize,
    ) -> Result<ScanPage> {
        let inner = &self.inner;
        query::scan_page(
            inner,
            Some(view),
            device,
            sensor,
            from_ns,
            to_ns,
            after,
            limit,
        )
    }

    /// Whether the lower tier still holds nothing written after `view` was taken: true until the
    /// log segment being written then leaves the log (its management time, or log pressure).
    /// Pages read while this holds are exactly the view's; later ones may add readings of the
    /// view's devices written after it (never lose one written before).
    pub fn view_is_exact(&self, view: &ReadView) -> bool {
        query::view_is_exact(&self.inner, view)
    }

    /// Retention at device granularity: if every reading of `device` is older than `cutoff_ns`
    /// (by reading timestamp), the device departs (one DEPART record, see `depart`) and this
    /// returns true. A device with any reading at or after the cutoff is left whole.
    ///
    /// A write to the device that races with this call (acknowledged after the check) departs
    /// with it, as any write racing with `depart` does.
    pub fn depart_if_older_than(&self, device: &str, cutoff_ns: i64) -> Result<bool> {
        let latest = self.latest(device, None)?;
        match latest.iter().map(|r| r.ts_ns).max() {
            Some(newest_ns) if newest_ns < cutoff_ns => {
                self.depart(device)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Deletes every reading of `device` with ts < `before_ns`, wherever it is, durably: one
    /// TRIM record (about 26 bytes + the name), acknowledged under the configured durability
    /// like a write. Readings written after the call returns are not touched, whatever their
    /// timestamps. Returns false, writing nothing, when the device is not here or holds no
    /// reading older than the cutoff (a write racing with the call may then be kept; one
    /// acknowledged before the call began is never missed).
    ///
    /// Cost: a pass over the device's index under the engine's lock; for readings already in the
    /// lower tier, one seek per sensor and run to decide, and no write at all: reads skip them at
    /// once, and their space returns with their runs (trim.rs).
    pub fn trim_before(&self, device: &str, before_ns: i64) -> Result<bool> {
        self.inner.writable()?;
        trim::trim_before(&self.inner, device, before_ns)
    }

    /// Makes every write acknowledged so far durable (an fdatasync of the log's segments written
    /// since their last one): with `Durability::Periodic` or `None`, for a caller that must not
    /// answer before what it wrote survives a power cut (a handoff's receiver). With `Sync`
    /// there is nothing to do. A failed fdatasync poisons the engine, as on the write path.
    pub fn sync(&self) -> Result<()> {
        group_commit::sync_unsynced(&self.inner)
    }

    /// Runs due maintenance now: segments whose management time ended leave the log, runs are
    /// consolidated and dropped (the background thread does this every
    /// `maintenance_interval_ms`; with `background_maintenance: false` the caller does).
    pub fn maintain(&self) -> Result<()> {
        self.inner.writable()?;
        maintenance::maintain(&self.inner)
    }

    /// Bytes of acknowledged groups the index's thread has not applied yet (`Stats::
    /// index_lag_bytes`), read without waiting for it: for tests that stop that thread.
    #[doc(hidden)]
    pub fn index_lag_bytes(&self) -> u64 {
        self.inner.state.lock().log.unapplied_bytes as u64
    }

    pub fn stats(&self) -> Stats {
        crate::engine::snapshot::stats(&self.inner)
    }

    /// The commit log as a change feed: positions, reads, and durable slots that hold the log
    /// for their readers (feed/mod.rs).
    pub fn feed(&self) -> Feed<'_> {
        Feed { inner: &self.inner }
    }

    /// A consistent copy of the data directory's files while writes go on, for a backup
    /// (`backup::Snapshot`): every write acknowledged before the call is in it, and nothing
    /// after its recorded position. `extra_dirs`: directories of the data directory to copy
    /// with it, unread (the server's own files).
    pub fn snapshot(&self, extra_dirs: &[&str]) -> Result<crate::backup::Snapshot> {
        self.inner.writable()?;
        crate::backup::Snapshot::take(&self.inner, extra_dirs)
    }

    /// The data directory's path.
    pub fn path(&self) -> &Path {
        &self.inner.dir.path
    }

    /// Stops background work and syncs the log.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.stop_threads();
        let synced = group_commit::sync_unsynced(&self.inner);
        synced.and(feed::flush(&self.inner))
    }

    fn stop_threads(&mut self) {
        self.closed = true;
        *self.inner.shutdown.lock() = true;
        self.inner.shutdown_signal.notify_all();
        self.inner.spares.shut_down();
        index_apply::stop(&self.inner);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }

    /// Stops as a killed process would: background threads end, and nothing more is synced
    /// (the log keeps what reached it). For crash and power-cut tests that run many "processes"
    /// in one (`tests/power_cut.rs`).
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

/// Devices of the batch seen for the first time, sorted, and the bytes of their REGISTER
/// records (placed before the batch, in the same contiguous run). Fails when they would take
/// the engine past `devices_max`.
fn devices_to_register<'a>(
    st: &State,
    records: &[Record<'a>],
    devices_max: u64,
) -> Result<(Vec<&'a str>, usize)> {
    let mut new_names: Vec<&str> = records
        .iter()
        .map(|r| r.device)
        .filter(|d| st.map.id(d).is_none())
        .collect();
    new_names.sort_unstable();
    new_names.dedup();
    let devices = st.map.len() as u64 + new_names.len() as u64;
    if devices > devices_max && !new_names.is_empty() {
        return Err(Error::TooManyDevices {
            devices: st.map.len() as u64,
            max: devices_max,
        });
    }
    let register_bytes = new_names.iter().map(|d| record::register_len(d)).sum();
    Ok((new_names, register_bytes))
}
