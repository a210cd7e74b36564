//! What the engine's threads share (`Inner`) and what its one lock guards (`State`), and how a
//! logged record changes that state (`State::apply`, the same on the live path and in recovery).
//!
//! Concurrency: one `TimedMutex<State>` guards the mapping table, the log's index, the log's
//! bookkeeping and the lower tier's bookkeeping (which windows hold what). What each thread
//! owns: docs/ARCHITECTURE.md, "Threads". **The lock rule**:
//! no file I/O while it is held — no log write, read or sync, no lower-tier read or write, and
//! no wait for a ready segment (`make_room` releases it to wait). What runs under it is
//! bookkeeping in memory; `Stats::state_lock` measures every hold, and names the call sites
//! of holds over a millisecond. The rooms that act on the engine (commit, query, engine::trim,
//! maintenance, recovery) are functions over `&Inner`; `Inner`'s own methods are the few below.
//!
//! Owns the mapping table (`mapping`) and each device's log index (`upper`). It may not do file
//! I/O (the lock rule) nor call the commit path, maintenance or queries: those rooms sit above it.

pub(crate) mod at_index;
pub(crate) mod mapping;
pub(crate) mod upper;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::commit_log::log_state::{LogState, SegmentEvent};
use crate::commit_log::position::LogPosition;
use crate::commit_log::record::Body;
use crate::commit_log::slots::Slots;
use crate::commit_log::spares::Spares;
use crate::commit_log::waiters::{CommitWaiters, Roles};
use crate::dir::DataDir;
use crate::lower::LowerTier;
use crate::lower::keys::{WindowTrim, merge_trims};
use crate::model::error::{Error, Result};
use crate::model::ids::{DeviceId, LowerId, SegmentSeq, WindowId};
use crate::options::Options;
use crate::state::mapping::MappingTable;
use crate::state::upper::{DeviceIndex, IndexEntry};
use crate::stats::Counters;
use crate::stats::timed_mutex::TimedMutex;

/// One window of the lower tier, as the engine keeps count of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Window {
    /// Bytes of readings in it that a live device still reads from it.
    pub live_bytes: u64,
    /// Bytes of its file.
    pub file_bytes: u64,
    /// Devices with readings in it (some may have left or been consolidated since): whom a
    /// consolidation that empties it moves.
    pub members: Vec<DeviceId>,
    /// Consolidations its readings went through: 0 for a pass's window, one more than the most
    /// of the windows a consolidation read (in memory only: 0 after a restart). A device over
    /// its window bound has its windows of the lowest level merged first (size-tiered), so a
    /// reading is rewritten about once per level, not once per merge.
    pub level: u8,
    /// Where the newest record that released readings here ends (a DEPART's; a consolidation's
    /// release is durable with its catalog batch: position 0; None: none yet). The window's
    /// death is durable only once every release is: the catalog names each member until its
    /// DEPART's pass, so dropping the file when only the last release is durable would, after a
    /// power cut that lost an earlier DEPART, leave the catalog naming a window that is gone.
    pub released_at: Option<LogPosition>,
}

/// The lower tier's bookkeeping: ids given out, windows and what is live in them.
#[derive(Debug, Default)]
pub(crate) struct LowerBook {
    pub windows: BTreeMap<WindowId, Window>,
    /// Windows no live device reads any more, each with the position of the record that
    /// killed its last reading: dropped once the log is durable past it.
    pub dead: Vec<(WindowId, LogPosition)>,
    pub next_win: WindowId,
    pub next_lower_id: LowerId,
    /// The last segment whose readings left the log (as the catalog says).
    pub last_aged_seq: SegmentSeq,
    /// Devices whose windowed readings should be consolidated (too many windows or trims).
    pub consolidation_wanted: Vec<DeviceId>,
    /// Lower ids the catalog names for devices that left before they got their place (a pass
    /// cataloged them while they departed): forgotten once the log is durable past `.1`.
    pub forget: Vec<(LowerId, LogPosition)>,
    /// Ranges of the settled space deleted by a durable catalog batch, whose files still hold
    /// them: maintenance reclaims them next (`LowerTier::reclaim`).
    pub settled_dead: Vec<(Vec<u8>, Vec<u8>)>,
    /// Lower ids of devices that left while a consolidation moved their readings into the
    /// settled space: their DEPART said they had none there, and their departure's pass must
    /// reclaim them all the same.
    pub settled_after_depart: Vec<LowerId>,
}

impl LowerBook {
    /// A device's readings left `windows`: what it had there is dead now; windows with nothing
    /// live left are queued for dropping (after `killed_at` and every earlier release of theirs
    /// are durable).
    pub fn release(&mut self, windows: &[(WindowId, u64)], killed_at: LogPosition) {
        for (win, bytes) in windows {
            if let Some(window) = self.windows.get_mut(win) {
                window.live_bytes = window.live_bytes.saturating_sub(*bytes);
                let durable_at = window.released_at.map_or(killed_at, |at| at.max(killed_at));
                window.released_at = Some(durable_at);
                if window.live_bytes == 0 && !self.dead.iter().any(|(w, _)| w == win) {
                    self.dead.push((*win, durable_at));
                }
            }
        }
    }

    /// Bytes of window files, and of those the live bytes.
    pub fn window_bytes(&self) -> (u64, u64) {
        self.windows.values().fold((0, 0), |(file, live), w| {
            (file + w.file_bytes, live + w.live_bytes)
        })
    }
}

/// The sums over every device's index, kept as the indexes change so that neither the index
/// cap nor stats scan the mapping table. Only `change` and `forget` move them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexAccount {
    /// Memory the indexes hold (`DeviceIndex::index_bytes`): what `index_bytes_max` caps.
    pub bytes: u64,
    /// Readings in the log's index, and their record bytes.
    pub readings: u64,
    pub reading_bytes: u64,
}

impl IndexAccount {
    /// Runs `change` on one device's index and keeps the sums as it changed them.
    pub fn change<R>(
        &mut self,
        index: &mut DeviceIndex,
        change: impl FnOnce(&mut DeviceIndex) -> R,
    ) -> R {
        let before = (index.index_bytes(), index.records, index.record_bytes);
        let result = change(index);
        self.bytes = self.bytes + index.index_bytes() - before.0;
        self.readings = self.readings + index.records - before.1;
        self.reading_bytes = self.reading_bytes + index.record_bytes - before.2;
        result
    }

    /// A device's index is gone (it departed): all it held leaves the sums.
    pub fn forget(&mut self, index: &DeviceIndex) {
        self.bytes -= index.index_bytes();
        self.readings -= index.records;
        self.reading_bytes -= index.record_bytes;
    }
}

pub(crate) struct State {
    pub map: MappingTable,
    pub log: LogState,
    /// Set once by `Inner::poison`: every later write fails with it.
    poisoned: Option<String>,
    /// What the devices' indexes hold, summed (`IndexAccount::change` keeps it).
    pub index_account: IndexAccount,
    pub lower: LowerBook,
    pub last_maintenance_error: Option<String>,
    /// The change feed's slots and the log's identity (commit_log/slots.rs): they set
    /// `log.hold_from`.
    pub feed: Slots,
    /// The writers parked in the group commit (commit_log/waiters.rs).
    pub commit_waiters: CommitWaiters,
}

impl State {
    pub fn new(map: MappingTable, log: LogState, lower: LowerBook) -> State {
        State {
            map,
            log,
            poisoned: None,
            index_account: IndexAccount::default(),
            lower,
            last_maintenance_error: None,
            feed: Slots::default(),
            commit_waiters: CommitWaiters::default(),
        }
    }
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
    pub state: TimedMutex<State>,
    /// Signalled when a group is written or committed (or the engine is poisoned): writers
    /// waiting for the queue to shrink below `PENDING_BYTES_MAX` wait on it. Writers waiting
    /// for their commit park in `State::commit_waiters` instead, and are woken one by one.
    pub group_done: Condvar,
    /// Bumped, under the state lock, at every change of the group commit: a writer that yields
    /// instead of parking (group_commit::wait_for) watches it without the lock.
    pub group_epoch: AtomicU64,
    /// Running average of a writer's wait for its commit, in microseconds: writers yield
    /// before they park only while commits are quicker than the yield (group_commit.rs).
    pub commit_wait_us_avg: AtomicU64,
    /// Signalled when groups are committed (the index's thread has work) or the engine stops.
    pub index_wanted: Condvar,
    /// Signalled when the index's thread applied a group (or the engine is poisoned or stops):
    /// readers waiting for their writes, and writers waiting for the index's lag, wait on it.
    pub index_applied: Condvar,
    /// Set, under the state lock, when the engine stops: the index's thread ends, and nobody
    /// waits for it any more.
    pub index_stopped: AtomicBool,
    /// Signalled when segments retire (writers stalled for log room wait on it).
    pub space_freed: Condvar,
    /// A writer is stalled or the log is under pressure: maintenance should run now.
    pub maintenance_wanted: AtomicBool,
    pub spares: Spares,
    pub lower: Box<dyn LowerTier>,
    /// Readers of the lower tier hold it shared while they read windows; dropping window files
    /// holds it exclusively: a reader that found a window in the bookkeeping reads it whole,
    /// even if its last live reading goes meanwhile (RocksDB's file drops ignore snapshots).
    pub window_gate: RwLock<()>,
    pub counters: Arc<Counters>,
    /// Held for the whole of a maintenance pass: one at a time.
    pub maintenance: Mutex<()>,
    pub shutdown: Mutex<bool>,
    pub shutdown_signal: Condvar,
    pub recovery: Recovery,
}

impl Inner {
    /// What recovery opened, shared by the engine's threads; every signal and flag starts clear.
    pub(crate) fn new(
        (dir, options): (DataDir, Options),
        state: State,
        (spares, lower): (Spares, Box<dyn LowerTier>),
        counters: Arc<Counters>,
        recovery: Recovery,
    ) -> Inner {
        Inner {
            spares,
            dir,
            options,
            state: TimedMutex::new(state),
            group_done: Condvar::new(),
            group_epoch: AtomicU64::new(0),
            commit_wait_us_avg: AtomicU64::new(0),
            index_wanted: Condvar::new(),
            index_applied: Condvar::new(),
            index_stopped: AtomicBool::new(false),
            space_freed: Condvar::new(),
            maintenance_wanted: AtomicBool::new(false),
            lower,
            window_gate: RwLock::new(()),
            counters,
            maintenance: Mutex::new(()),
            shutdown: Mutex::new(false),
            shutdown_signal: Condvar::new(),
            recovery,
        }
    }

    /// `Error::ReadOnly` if the engine was opened read-only: every call that writes asks first.
    pub(crate) fn writable(&self) -> Result<()> {
        if self.options.read_only {
            return Err(Error::ReadOnly(format!(
                "{} was opened read-only: nothing is written to it",
                self.dir.path.display()
            )));
        }
        Ok(())
    }

    pub(crate) fn check_poisoned(&self, st: &State) -> Result<()> {
        match &st.poisoned {
            Some(reason) => Err(Error::Poisoned(reason.clone())),
            None => Ok(()),
        }
    }

    /// Refuses every later write (LevelDB's `RecordBackgroundError`): the first reason is kept,
    /// and every waiting writer is woken to see it.
    pub(crate) fn poison(&self, st: &mut State, reason: &str) {
        st.poisoned.get_or_insert_with(|| reason.to_string());
        self.group_epoch.fetch_add(1, Ordering::Release);
        self.group_done.notify_all();
        st.commit_waiters.wake_all();
        self.index_applied.notify_all();
    }

    /// The group commit moved on (a group written, or groups committed): wakes the writers
    /// waiting for the queue to shrink, and of those waiting for their commit the ones it lets
    /// go on (commit_log/waiters.rs). `changer`: the ticket of the writer that made the change (it
    /// goes on in `wait_for` and takes a free role itself). Called with the state lock held, so
    /// a writer that checked `group_epoch` or registered under the lock cannot miss it.
    pub(crate) fn groups_changed(&self, st: &mut State, changer: u64) {
        self.group_epoch.fetch_add(1, Ordering::Release);
        self.group_done.notify_all();
        let roles = Roles::of(&st.log);
        st.commit_waiters.wake(&roles, changer);
    }

    /// Asks the maintenance thread to run now rather than at its next interval.
    pub(crate) fn wake_maintenance(&self) {
        if !self.maintenance_wanted.swap(true, Ordering::Relaxed) {
            let _guard = self.shutdown.lock();
            self.shutdown_signal.notify_all();
        }
    }
}

impl State {
    /// Applies one logged record to the in-memory state (live path and recovery alike). Nothing
    /// here touches a file: a reading, of any device, is indexed; a departure or a trim of
    /// readings already in the lower tier is bookkeeping, noted for the pass that takes the
    /// record's segment (which tells the catalog).
    pub(crate) fn apply(
        &mut self,
        counters: &Counters,
        id: DeviceId,
        body: &Body<'_>,
        position: LogPosition,
        len: u32,
    ) {
        let seq = position.segment_seq;
        match *body {
            Body::Register { .. } => {
                if self.map.entry(id).is_some() {
                    self.log.add_event(seq, SegmentEvent::Register(id));
                }
            }
            Body::Put { sensor, ts_ns, .. } => self.apply_put(id, sensor, ts_ns, position, len),
            Body::Puts { readings, .. } => {
                let len = IndexEntry::puts_len(len, readings.len());
                for r in readings.iter() {
                    self.apply_put(id, r.sensor, r.ts_ns, position, len);
                }
            }
            Body::Depart { .. } => {
                let Some(entry) = self.map.remove(id) else {
                    return; // the incarnation is gone already
                };
                Counters::add(
                    &counters.reclaimed_bytes_without_write,
                    entry.index.record_bytes,
                );
                self.index_account.forget(&entry.index);
                if let Some(lower) = entry.lower {
                    // The death is durable once the whole record is: its end, not its start.
                    let end = LogPosition::at(seq, position.offset + u64::from(len));
                    self.lower.release(&lower.windows, end);
                    self.log.add_event(
                        seq,
                        SegmentEvent::Depart {
                            lower_id: lower.lower_id,
                            settled: lower.settled,
                        },
                    );
                }
            }
            Body::Trim { before_ns, .. } => self.apply_trim(id, before_ns, seq),
            // Not a device's record: it only closes its segment (never queued for `apply`).
            Body::SegmentEnd { .. } => {}
        }
    }

    fn apply_put(&mut self, id: DeviceId, sensor: &str, ts_ns: i64, at: LogPosition, len: u32) {
        let Some(entry) = self.map.entry_mut(id) else {
            return; // departed while its batch was queued
        };
        let indexed = IndexEntry {
            ts_ns,
            segment_seq: at.segment_seq,
            offset: u32::try_from(at.offset).expect("segment offsets fit in u32"),
            len,
        };
        self.index_account
            .change(&mut entry.index, |index| index.insert(sensor, indexed));
        let new_holder = entry.holder_of_seq != at.segment_seq;
        entry.holder_of_seq = at.segment_seq;
        if new_holder {
            self.log.add_holder(at.segment_seq, id);
        }
    }

    /// A TRIM: the index drops the older readings at once (memory returns); readings already in
    /// windows are hidden from reads by a trim rule, settled ones until the pass that takes
    /// this segment deletes them.
    fn apply_trim(&mut self, id: DeviceId, before_ns: i64, seq: SegmentSeq) {
        let newest_win = self.lower.next_win.0.checked_sub(1).map(WindowId);
        let Some(entry) = self.map.entry_mut(id) else {
            return;
        };
        self.index_account
            .change(&mut entry.index, |index| index.trim_before(before_ns));
        // Every window given out so far may hold readings of the device from before the TRIM
        // (a pass in flight included); none given out later does.
        if let Some(upto_win) = newest_win {
            merge_trims(
                &mut entry.trims,
                WindowTrim {
                    before_ns,
                    upto_win,
                },
            );
        }
        if entry.lower.as_ref().is_some_and(|l| l.settled) {
            entry.settled_trim_pending = Some(
                entry
                    .settled_trim_pending
                    .map_or(before_ns, |p| p.max(before_ns)),
            );
        }
        self.log.add_event(
            seq,
            SegmentEvent::Trim {
                device: id,
                before_ns,
            },
        );
    }
}

/// Each device's bytes in a window file: its readings' bytes (keys and values, as the pass
/// counted them) scaled by what the file took of all of them. The lower tier compresses its
/// blocks, so the readings' own bytes would overstate what the file holds live, and windows
/// would be judged by two units (their file bytes against raw live bytes).
pub(crate) fn scale_to_file<K>(raw: &mut std::collections::BTreeMap<K, u64>, file_bytes: u64) {
    let raw_total: u64 = raw.values().sum();
    if raw_total == 0 {
        return;
    }
    for bytes in raw.values_mut() {
        let share = (*bytes as u128 * file_bytes as u128 / raw_total as u128) as u64;
        // A device with readings in the window keeps it alive: never scaled to 0.
        *bytes = if *bytes > 0 { share.max(1) } else { 0 };
    }
}
