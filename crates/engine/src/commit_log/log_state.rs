//! The log's bookkeeping under the engine's state lock, and a group's I/O.
//!
//! `LogState` (live segments and what they hold, placement in the active segment, the segment
//! switch, the queue of sealed records and its tickets, groups written and waiting for their
//! sync, groups committed and waiting for the index, what may retire) lives in `state::State`,
//! beside the mapping table, so that registering a device and placing its records are one step.
//! `Group::write` and `sync_segments` run without the lock, on a writer's thread:
//! `group_commit` is the one module that calls them, so it is the one place that writes and
//! syncs the log. `index_apply` is the one module that applies committed groups.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::commit_log::position::LogPosition;
use crate::commit_log::record;
use crate::commit_log::segment::Segment;
use crate::model::error::Result;
use crate::model::ids::{DeviceId, LowerId, SegmentSeq};
use crate::model::limits::{LOG_BLOCK_BYTES, SEGMENT_HEADER_BYTES};
use crate::stats::Counters;

/// What a record of a segment asks of the catalog when the segment leaves the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentEvent {
    /// A device's REGISTER: if the device is still here then, the catalog learns it.
    Register(DeviceId),
    /// A device the catalog knows departed: the catalog forgets it, its settled readings go
    /// (and, if it had some, their space is reclaimed at once).
    Depart { lower_id: LowerId, settled: bool },
    /// A TRIM of a device the catalog knows: its record is rewritten, its settled readings
    /// older than the cutoff go.
    Trim { device: DeviceId, before_ns: i64 },
}

/// A live log segment and what it holds.
pub(crate) struct LiveSegment {
    pub segment: Arc<Segment>,
    /// Devices that put readings in it (each once; some may have left since): the devices a
    /// pass looks at when the segment leaves the log, so that a pass costs what it moves, not
    /// how many devices exist.
    pub holders: Vec<DeviceId>,
    pub events: Vec<SegmentEvent>,
    /// When the log moved past it (engine clock); None while it is the active segment.
    pub sealed_at_ms: Option<u64>,
    /// Where its SEGMENT_END ends, once sealed: it is whole in memory once everything up to
    /// here is applied.
    pub sealed_end: u64,
    /// End of what was written to it (after its SEGMENT_END, once sealed).
    pub written_end: u64,
    /// Every byte before this offset is durable (fdatasync'd).
    pub synced_end: u64,
    /// Its readings have left the log (a pass took it); it retires once no hold keeps it.
    pub aged: bool,
}

impl LiveSegment {
    pub fn new(segment: Arc<Segment>) -> LiveSegment {
        LiveSegment {
            segment,
            holders: Vec::new(),
            events: Vec::new(),
            sealed_at_ms: None,
            sealed_end: u64::MAX,
            written_end: SEGMENT_HEADER_BYTES,
            // The header is synced when the segment is made.
            synced_end: SEGMENT_HEADER_BYTES,
            aged: false,
        }
    }
}

/// Buffers queued for one segment, contiguous from `offset`: written by the next group's
/// writer with one pwritev, the writers' buffers as they made them (never copied into one).
pub(crate) struct Chunk {
    pub segment: Arc<Segment>,
    pub offset: u64,
    pub pieces: Vec<Vec<u8>>,
    pub bytes: usize,
}

/// A queued record: which device incarnation it belongs to and where its bytes are.
pub(crate) struct QueuedRecord {
    pub device: DeviceId,
    pub chunk: usize,
    pub piece: usize,
    pub at: usize,
    pub len: usize,
}

pub(crate) struct LogState {
    pub segments: BTreeMap<SegmentSeq, LiveSegment>,
    pub active: Arc<Segment>,
    /// Next free byte of the active segment: where the next queued record goes.
    pub tail: u64,
    pub queue: Vec<Chunk>,
    pub queued_records: Vec<QueuedRecord>,
    pub queued_bytes: usize,
    pub next_ticket: u64,
    /// Every ticket up to this one is written and synced (under `Sync`): its writer may return.
    pub committed_ticket: u64,
    /// Every ticket up to this one is applied to the mapping table and the indexes
    /// (`index_apply`); never ahead of `committed_ticket`.
    pub applied_ticket: u64,
    /// A writer is writing a group (at most one at a time: groups are written in log order).
    pub writer_active: bool,
    /// A syncer is syncing written groups (at most one at a time: they commit in log order).
    pub syncer_active: bool,
    /// Groups written and waiting to be synced, in log order.
    pub written: VecDeque<Group>,
    /// Groups committed (their writers acknowledged) and waiting for the index's thread, in
    /// log order.
    pub unapplied: VecDeque<Group>,
    /// A group is being applied (at most one at a time: they are applied in log order), by the
    /// index's thread or by a reader that needed it (index_apply.rs).
    pub applier_active: bool,
    /// Bytes of the groups committed and not yet applied (in `unapplied` or being applied):
    /// writers wait while it is over `INDEX_LAG_BYTES_MAX`.
    pub unapplied_bytes: usize,
    /// End of the last record written and applied. Index entries added later lie beyond it.
    pub applied_end: LogPosition,
    /// Where the record that ends at `applied_end` starts, when it is a device's record (a
    /// change feed's position names it: `Feed::end`). None at a SEGMENT_END (its place is the
    /// segment's sealed end) or when unknown.
    pub applied_last_start: Option<LogPosition>,
    /// Everything in the log before this position is durable: a record written at or before
    /// it may carry `FLAG_SYNCED_BEFORE`.
    pub durable_end: LogPosition,
    /// Segments written since their last fdatasync (Periodic and None modes).
    pub unsynced: BTreeSet<SegmentSeq>,
    /// The preparer has been asked for a segment to follow the active one.
    pub spare_wanted: bool,
    /// The active segment has its SEGMENT_END: nothing more goes into it.
    pub sealed: bool,
    /// Segments from this one on are kept however old (a feed slot still needs them; set by
    /// commit_log/slots.rs, the only writer).
    pub hold_from: Option<SegmentSeq>,
    /// When the active segment got its first record (engine clock): it is sealed at the latest
    /// half a management time later (`group_commit::seal_if_old`).
    pub active_since_ms: Option<u64>,
}

/// Everything queued when a writer took over: written, synced, committed and applied together.
pub(crate) struct Group {
    pub chunks: Vec<Chunk>,
    pub records: Vec<QueuedRecord>,
    pub last_ticket: u64,
}

impl LogState {
    /// The log as recovery found it: `segments` in order, appending resumes at `tail` of
    /// `active`.
    pub fn new(segments: &[Arc<Segment>], active: Arc<Segment>, tail: u64) -> LogState {
        let start = LogPosition {
            segment_seq: active.seq,
            offset: tail,
        };
        LogState {
            segments: segments
                .iter()
                .map(|s| (s.seq, LiveSegment::new(Arc::clone(s))))
                .collect(),
            applied_end: start,
            applied_last_start: None,
            durable_end: start,
            active,
            tail,
            queue: Vec::new(),
            queued_records: Vec::new(),
            queued_bytes: 0,
            next_ticket: 0,
            committed_ticket: 0,
            applied_ticket: 0,
            writer_active: false,
            syncer_active: false,
            written: VecDeque::new(),
            unapplied: VecDeque::new(),
            applier_active: false,
            unapplied_bytes: 0,
            unsynced: BTreeSet::new(),
            spare_wanted: false,
            sealed: false,
            hold_from: None,
            active_since_ms: None,
        }
    }

    /// The live segment an index entry points into (indexed records never outlive their
    /// segment: a segment retires only after its readings left the log and the index).
    pub fn segment_of(&self, segment_seq: SegmentSeq) -> &Arc<Segment> {
        &self
            .segments
            .get(&segment_seq)
            .expect("indexed records live in live segments")
            .segment
    }

    /// Names `device` a holder of `segment_seq` (it put readings there).
    pub fn add_holder(&mut self, segment_seq: SegmentSeq, device: DeviceId) {
        if let Some(live) = self.segments.get_mut(&segment_seq) {
            live.holders.push(device);
        }
    }

    /// Notes what a record of `segment_seq` asks of the catalog when the segment leaves.
    pub fn add_event(&mut self, segment_seq: SegmentSeq, event: SegmentEvent) {
        if let Some(live) = self.segments.get_mut(&segment_seq) {
            live.events.push(event);
        }
    }

    /// Whether the active segment has `len` free bytes (besides the room kept for its
    /// SEGMENT_END).
    pub fn has_room(&self, len: usize) -> bool {
        !self.sealed && self.tail + (len + record::SEGMENT_END_BYTES) as u64 <= self.active.bytes
    }

    /// Makes a fresh segment (the next in sequence) the active one. The old one gets its
    /// SEGMENT_END, queued ahead of anything for the new one. Nothing waits for the old one's
    /// fdatasync: recovery cuts a torn tail wherever it is in the log, across segments.
    pub fn activate(&mut self, segment: Arc<Segment>, now_ms: u64) {
        assert!(
            segment.seq > self.active.seq,
            "segments become active in sequence order"
        );
        if !self.sealed {
            let old = Arc::clone(&self.active);
            let mut end = Vec::with_capacity(record::SEGMENT_END_BYTES);
            record::encode_segment_end(&mut end, old.seq_low(), segment.seq, now_ms);
            let offset = self.tail;
            self.tail += end.len() as u64;
            self.enqueue(old, offset, end, Vec::new());
        }
        let sealed_end = self.tail;
        if let Some(old) = self.segments.get_mut(&self.active.seq) {
            old.sealed_at_ms = Some(now_ms);
            old.sealed_end = sealed_end;
        }
        self.sealed = false;
        self.segments
            .insert(segment.seq, LiveSegment::new(Arc::clone(&segment)));
        self.active = segment;
        self.tail = SEGMENT_HEADER_BYTES;
        self.spare_wanted = false;
        self.active_since_ms = None;
    }

    /// Reserves `len` contiguous bytes of the active segment, which must have them. Returns the
    /// place, and true the first time the segment is half full (time to ask for a spare).
    pub fn place(&mut self, len: usize) -> (Arc<Segment>, u64, bool) {
        let offset = self.tail;
        self.tail += len as u64;
        assert!(
            !self.sealed && self.tail + record::SEGMENT_END_BYTES as u64 <= self.active.bytes,
            "a placed run overflows its segment"
        );
        let want_spare = !self.spare_wanted && self.tail > self.active.bytes / 2;
        self.spare_wanted |= want_spare;
        (Arc::clone(&self.active), offset, want_spare)
    }

    /// Queues sealed records for the next group; returns the ticket to wait for. `records`:
    /// (device, offset in `bytes`, length) of each record. `bytes` is queued as it is.
    pub fn enqueue(
        &mut self,
        segment: Arc<Segment>,
        offset: u64,
        bytes: Vec<u8>,
        records: Vec<(DeviceId, usize, usize)>,
    ) -> u64 {
        self.queued_bytes += bytes.len();
        let len = bytes.len();
        let chunks = self.queue.len();
        let (chunk, piece) = match self.queue.last_mut() {
            Some(last)
                if Arc::ptr_eq(&last.segment, &segment)
                    && last.offset + last.bytes as u64 == offset =>
            {
                last.pieces.push(bytes);
                last.bytes += len;
                (chunks - 1, last.pieces.len() - 1)
            }
            _ => {
                self.queue.push(Chunk {
                    segment,
                    offset,
                    pieces: vec![bytes],
                    bytes: len,
                });
                (self.queue.len() - 1, 0)
            }
        };
        self.queued_records
            .extend(records.into_iter().map(|(device, at, len)| QueuedRecord {
                device,
                chunk,
                piece,
                at,
                len,
            }));
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Takes everything queued for the calling writer. The first record of each chunk written
    /// when the whole log before it is durable is marked so (`FLAG_SYNCED_BEFORE`).
    pub fn take_group(&mut self) -> Group {
        self.queued_bytes = 0;
        self.writer_active = true;
        let mut chunks = std::mem::take(&mut self.queue);
        for chunk in &mut chunks {
            let start = LogPosition {
                segment_seq: chunk.segment.seq,
                offset: chunk.offset,
            };
            if start <= self.durable_end
                && let Some(first) = chunk.pieces.first_mut()
            {
                record::mark_synced_before(first);
            }
        }
        Group {
            chunks,
            records: std::mem::take(&mut self.queued_records),
            last_ticket: self.next_ticket,
        }
    }

    /// Notes that segments are durable up to the given ends, and moves `durable_end` over every
    /// segment now durable to its end.
    pub fn mark_synced(&mut self, synced: &[(SegmentSeq, u64)]) {
        for (seq, end) in synced {
            if let Some(live) = self.segments.get_mut(seq) {
                live.synced_end = live.synced_end.max(*end);
            }
        }
        for (seq, live) in &self.segments {
            if LogPosition::at(*seq, live.synced_end) > self.durable_end {
                self.durable_end = LogPosition::at(*seq, live.synced_end);
            }
            let whole = live.sealed_at_ms.is_some() && live.synced_end >= live.written_end;
            if !whole {
                break;
            }
        }
    }

    /// Forgets that segments written by a group still need a sync (Periodic/None modes keep
    /// them until the flush thread, or a pass, syncs them), and records their written ends.
    fn note_written(&mut self, group: &Group, synced: bool) {
        for chunk in &group.chunks {
            let seq = chunk.segment.seq;
            if !synced {
                self.unsynced.insert(seq);
            }
            if let Some(live) = self.segments.get_mut(&seq) {
                live.written_end = live.written_end.max(chunk.offset + chunk.bytes as u64);
            }
        }
    }

    /// The groups are written and synced (if `synced`): their writers may return. They wait for
    /// the index's thread in `unapplied`.
    pub fn groups_committed(&mut self, groups: Vec<Group>, synced: &[(SegmentSeq, u64)]) {
        for group in groups {
            self.note_written(&group, !synced.is_empty());
            self.committed_ticket = group.last_ticket;
            self.unapplied_bytes += group.bytes();
            self.unapplied.push_back(group);
        }
        self.mark_synced(synced);
    }

    /// The group (the oldest committed one not yet applied) is applied: reads see it, and
    /// maintenance and the change feed may go as far as its end.
    pub fn group_applied(&mut self, group: &Group) {
        if let Some(last) = group.chunks.last() {
            self.applied_end = LogPosition {
                segment_seq: last.segment.seq,
                offset: last.offset + last.bytes as u64,
            };
            self.applied_last_start = group.records.last().and_then(|r| {
                let start = group.position(r);
                (LogPosition::at(start.segment_seq, start.offset + r.len as u64)
                    == self.applied_end)
                    .then_some(start)
            });
        }
        self.applied_ticket = group.last_ticket;
        self.unapplied_bytes -= group.bytes();
    }

    /// Segments written since their last fdatasync, forgotten as such, each with the end of
    /// what was written to it so far (what its fdatasync will make durable).
    pub fn take_unsynced(&mut self) -> Vec<(Arc<Segment>, u64)> {
        std::mem::take(&mut self.unsynced)
            .iter()
            .filter_map(|seq| {
                let live = self.segments.get(seq)?;
                Some((Arc::clone(&live.segment), live.written_end))
            })
            .collect()
    }

    /// Whether nothing more will be written to the segment: it is before the active one, or the
    /// active one is sealed (a reopened log whose last segment was sealed, until a write moves
    /// on).
    fn behind_active(&self, seq: SegmentSeq) -> bool {
        seq < self.active.seq || (seq == self.active.seq && self.sealed)
    }

    /// Whether every record of a sealed segment is applied (its SEGMENT_END included).
    fn applied_whole(&self, seq: SegmentSeq, live: &LiveSegment) -> bool {
        live.sealed_at_ms.is_some() && self.applied_end >= LogPosition::at(seq, live.sealed_end)
    }

    /// The oldest segment whose readings are still in the log, if it is sealed and applied.
    pub fn oldest_unaged(&self) -> Option<(SegmentSeq, &LiveSegment)> {
        self.segments
            .iter()
            .find(|(_, live)| !live.aged)
            .filter(|(seq, live)| self.behind_active(**seq) && self.applied_whole(**seq, live))
            .map(|(seq, live)| (*seq, live))
    }

    /// The oldest segments that may leave: aged, older than the active one and applied whole,
    /// and not held by a log reader. Retired only as this prefix, so that the live log
    /// stays a suffix of the whole log.
    pub fn retirable(&self) -> Vec<SegmentSeq> {
        self.complete_prefix()
            .take_while(|(seq, _)| self.hold_from.is_none_or(|held| *seq < held))
            .map(|(seq, _)| seq)
            .collect()
    }

    /// The oldest segments that are done with, holds aside: aged, older than the active one
    /// and applied whole (hold.rs measures what a hold keeps of them).
    pub fn complete_prefix(&self) -> impl Iterator<Item = (SegmentSeq, &LiveSegment)> {
        self.segments
            .iter()
            .take_while(|(seq, live)| {
                live.aged && self.behind_active(**seq) && self.applied_whole(**seq, live)
            })
            .map(|(seq, live)| (*seq, live))
    }

    /// Takes retired segments out of the log.
    pub fn remove(&mut self, seqs: &[SegmentSeq]) -> Vec<Arc<Segment>> {
        seqs.iter()
            .filter_map(|seq| {
                self.unsynced.remove(seq);
                self.segments.remove(seq).map(|live| live.segment)
            })
            .collect()
    }
}

impl Group {
    /// The group's I/O: one pwritev per chunk (segment touched), of whole blocks
    /// (`Segment::write_blocks`). Without `sync`, write-back of the log is started every
    /// `writeback_bytes` (bounded dirty pages); the group's fdatasync, with `sync`, is
    /// `sync_groups`, which may run while the next group is written.
    pub fn write(&self, sync: bool, writeback_bytes: u64, counters: &Counters) -> Result<()> {
        let (mut bytes, mut block_bytes) = (0, 0);
        for chunk in &self.chunks {
            if chunk.segment.write_blocks(&chunk.pieces, chunk.offset)? {
                Counters::add(&counters.log_head_reads, 1);
            }
            bytes += chunk.bytes as u64;
            let end = chunk.offset + chunk.bytes as u64;
            block_bytes += end.next_multiple_of(LOG_BLOCK_BYTES)
                - (chunk.offset - chunk.offset % LOG_BLOCK_BYTES);
            if !sync {
                chunk
                    .segment
                    .start_writeback(chunk.offset + chunk.bytes as u64, writeback_bytes)?;
            }
        }
        Counters::add(&counters.log_bytes_written, bytes);
        Counters::add(&counters.log_block_bytes_written, block_bytes);
        Counters::add(&counters.group_commits, 1);
        Ok(())
    }

    /// Bytes of its records (what it holds in memory until it is applied).
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.bytes).sum()
    }

    /// The record's bytes.
    pub fn record(&self, queued: &QueuedRecord) -> &[u8] {
        &self.chunks[queued.chunk].pieces[queued.piece][queued.at..queued.at + queued.len]
    }

    /// Where the record is in the log.
    pub fn position(&self, queued: &QueuedRecord) -> LogPosition {
        let chunk = &self.chunks[queued.chunk];
        let before: usize = chunk.pieces[..queued.piece].iter().map(Vec::len).sum();
        LogPosition {
            segment_seq: chunk.segment.seq,
            offset: chunk.offset + (before + queued.at) as u64,
        }
    }
}

/// What written groups need to be durable: every segment they touched, with the end of what
/// they wrote there, in log order.
pub(crate) fn segments_to_sync(groups: &[Group]) -> Vec<(Arc<Segment>, u64)> {
    let mut ends: BTreeMap<SegmentSeq, (Arc<Segment>, u64)> = BTreeMap::new();
    for chunk in groups.iter().flat_map(|g| &g.chunks) {
        let end = chunk.offset + chunk.bytes as u64;
        ends.entry(chunk.segment.seq)
            .and_modify(|(_, e)| *e = (*e).max(end))
            .or_insert((Arc::clone(&chunk.segment), end));
    }
    ends.into_values().collect()
}

/// fdatasyncs the segments, in log order. Returns what became durable.
pub(crate) fn sync_segments(
    segments: &[(Arc<Segment>, u64)],
    counters: &Counters,
) -> Result<Vec<(SegmentSeq, u64)>> {
    let mut synced = Vec::with_capacity(segments.len());
    for (segment, end) in segments {
        segment.sync_data()?;
        Counters::add(&counters.fdatasyncs, 1);
        synced.push((segment.seq, *end));
    }
    Ok(synced)
}
