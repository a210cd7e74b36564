//! The log's bookkeeping under the engine's state lock, and the group's I/O.
//!
//! `LogState` (live segments and what holds them, placement in the active segment, the segment
//! switch, the queue of sealed records and its tickets, the retirable prefix) lives in
//! `state::State`, beside the mapping table, so that registering a device and placing its
//! records are one step. `Group::write` runs without the lock, on the leader's thread:
//! `group_commit::lead_group` is the one place that calls it, so it is the one place that
//! writes and syncs the log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::Result;
use crate::limits::SEGMENT_HEADER_BYTES;
use crate::mapping::DeviceId;
use crate::record;
use crate::segment::Segment;
use crate::stats::Counters;
use crate::upper::{DeviceIndex, IndexEntry, LogPosition};

/// A live log segment and what keeps it alive.
pub(crate) struct LiveSegment {
    pub segment: Arc<Segment>,
    /// Upper-tier records (REGISTER and PUT) in it whose device has not left or settled.
    pub live_records: u64,
    /// Records of this segment applied to the lower tier (puts of settled devices, their
    /// departures, a migration's catch-up): the segment may retire only after a lower-tier
    /// persist that covers them.
    pub lower_writes: u64,
    /// Every byte before this offset is durable (fdatasync'd): the first record written at or
    /// before it gets `FLAG_SYNCED_BEFORE`.
    pub synced_end: u64,
}

impl LiveSegment {
    pub fn new(segment: Arc<Segment>) -> LiveSegment {
        LiveSegment {
            segment,
            live_records: 0,
            lower_writes: 0,
            // The header is synced when the segment is made.
            synced_end: SEGMENT_HEADER_BYTES,
        }
    }
}

/// Bytes queued for one segment, written by the next leader with one pwrite.
pub(crate) struct Chunk {
    pub segment: Arc<Segment>,
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// A queued record: which device incarnation it belongs to and where its bytes are.
pub(crate) struct QueuedRecord {
    pub device: DeviceId,
    pub chunk: usize,
    pub at: usize,
    pub len: usize,
}

pub(crate) struct LogState {
    pub segments: BTreeMap<u64, LiveSegment>,
    pub active: Arc<Segment>,
    /// Next free byte of the active segment: where the next queued record goes.
    pub tail: u64,
    pub queue: Vec<Chunk>,
    pub queued_records: Vec<QueuedRecord>,
    pub queued_bytes: usize,
    pub next_ticket: u64,
    pub committed_ticket: u64,
    pub leader_active: bool,
    /// End of the last record written and applied. Index entries added later lie beyond it.
    pub applied_end: LogPosition,
    /// Segments written since their last fdatasync (Periodic and None modes).
    pub unsynced: BTreeSet<u64>,
    /// The preparer has been asked for a segment to follow the active one.
    pub spare_wanted: bool,
    /// The active segment has its SEGMENT_END: nothing more goes into it.
    pub sealed: bool,
}

/// Everything queued when a leader took over: written and applied together.
pub(crate) struct Group {
    pub chunks: Vec<Chunk>,
    pub records: Vec<QueuedRecord>,
    pub last_ticket: u64,
}

/// What a group write made durable: (segment, end of its bytes in this group).
pub(crate) type Synced = Vec<(u64, u64)>;

impl LogState {
    /// The log as recovery found it: `segments` in order, appending resumes at `tail` of
    /// `active`.
    pub fn new(segments: &[Arc<Segment>], active: Arc<Segment>, tail: u64) -> LogState {
        LogState {
            segments: segments
                .iter()
                .map(|s| (s.seq, LiveSegment::new(Arc::clone(s))))
                .collect(),
            applied_end: LogPosition {
                segment_seq: active.seq,
                offset: tail,
            },
            active,
            tail,
            queue: Vec::new(),
            queued_records: Vec::new(),
            queued_bytes: 0,
            next_ticket: 0,
            committed_ticket: 0,
            leader_active: false,
            unsynced: BTreeSet::new(),
            spare_wanted: false,
            sealed: false,
        }
    }

    /// The live segment an index entry points into (indexed records never outlive their
    /// segment: a segment retires only when nothing holds it).
    pub fn segment_of(&self, entry: &IndexEntry) -> &Arc<Segment> {
        &self
            .segments
            .get(&entry.segment_seq)
            .expect("indexed records live in live segments")
            .segment
    }

    /// Counts one upper-tier record in `segment_seq`.
    pub fn hold(&mut self, segment_seq: u64) {
        self.segments
            .get_mut(&segment_seq)
            .expect("records are placed in live segments")
            .live_records += 1;
    }

    /// Releases every segment hold of a device leaving the upper tier.
    pub fn release(&mut self, index: &DeviceIndex) {
        for (seq, n) in &index.segment_records {
            let live = self.segments.get_mut(seq).expect("held segments are live");
            live.live_records = live
                .live_records
                .checked_sub(*n)
                .expect("segment holds never go negative");
        }
    }

    /// Notes that a record of this segment went to the lower tier (see `LiveSegment::lower_writes`).
    pub fn mark_lower_write(&mut self, segment_seq: u64) {
        if let Some(live) = self.segments.get_mut(&segment_seq) {
            live.lower_writes += 1;
        }
    }

    /// Whether the active segment has `len` free bytes (besides the room kept for its
    /// SEGMENT_END).
    pub fn has_room(&self, len: usize) -> bool {
        !self.sealed && self.tail + (len + record::SEGMENT_END_BYTES) as u64 <= self.active.bytes
    }

    /// Makes a fresh segment (the next in sequence) the active one. The old one gets its
    /// SEGMENT_END, queued ahead of anything for the new one: `Group::write` makes it durable
    /// before it writes a byte of the new segment.
    pub fn activate(&mut self, segment: Arc<Segment>) {
        assert!(
            segment.seq > self.active.seq,
            "segments become active in sequence order"
        );
        if !self.sealed {
            let old = Arc::clone(&self.active);
            let mut end = Vec::with_capacity(record::SEGMENT_END_BYTES);
            record::encode_segment_end(&mut end, old.seq_low(), segment.seq);
            let offset = self.tail;
            self.tail += end.len() as u64;
            self.enqueue(old, offset, end, Vec::new());
        }
        self.sealed = false;
        self.segments
            .insert(segment.seq, LiveSegment::new(Arc::clone(&segment)));
        self.active = segment;
        self.tail = SEGMENT_HEADER_BYTES;
        self.spare_wanted = false;
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

    /// Queues sealed records for the next group commit; returns the ticket to wait for.
    /// `records`: (device, offset in `bytes`, length) of each record.
    pub fn enqueue(
        &mut self,
        segment: Arc<Segment>,
        offset: u64,
        bytes: Vec<u8>,
        records: Vec<(DeviceId, usize, usize)>,
    ) -> u64 {
        self.queued_bytes += bytes.len();
        let (chunk, base) = match self.queue.last_mut() {
            Some(last)
                if Arc::ptr_eq(&last.segment, &segment)
                    && last.offset + last.bytes.len() as u64 == offset =>
            {
                let base = last.bytes.len();
                last.bytes.extend_from_slice(&bytes);
                (self.queue.len() - 1, base)
            }
            _ => {
                self.queue.push(Chunk {
                    segment,
                    offset,
                    bytes,
                });
                (self.queue.len() - 1, 0)
            }
        };
        self.queued_records
            .extend(records.into_iter().map(|(device, at, len)| QueuedRecord {
                device,
                chunk,
                at: base + at,
                len,
            }));
        self.next_ticket += 1;
        self.next_ticket
    }

    /// Takes everything queued for the calling leader. The first record of each chunk whose
    /// segment is durable up to it is marked so (`FLAG_SYNCED_BEFORE`).
    pub fn take_group(&mut self) -> Group {
        self.queued_bytes = 0;
        self.leader_active = true;
        let mut chunks = std::mem::take(&mut self.queue);
        for chunk in &mut chunks {
            let durable_up_to_here = self
                .segments
                .get(&chunk.segment.seq)
                .is_some_and(|live| live.synced_end >= chunk.offset);
            if durable_up_to_here {
                record::mark_synced_before(&mut chunk.bytes);
            }
        }
        Group {
            chunks,
            records: std::mem::take(&mut self.queued_records),
            last_ticket: self.next_ticket,
        }
    }

    /// Notes that segments are durable up to the given ends.
    pub fn mark_synced(&mut self, synced: &[(u64, u64)]) {
        for (seq, end) in synced {
            if let Some(live) = self.segments.get_mut(seq) {
                live.synced_end = live.synced_end.max(*end);
            }
        }
    }

    /// The group is written and applied: its writers may return.
    pub fn group_committed(&mut self, group: &Group, synced: &[(u64, u64)]) {
        for chunk in &group.chunks {
            if !synced.iter().any(|(seq, _)| *seq == chunk.segment.seq) {
                self.unsynced.insert(chunk.segment.seq);
            }
        }
        self.mark_synced(synced);
        if let Some(last) = group.chunks.last() {
            self.applied_end = LogPosition {
                segment_seq: last.segment.seq,
                offset: last.offset + last.bytes.len() as u64,
            };
        }
        self.committed_ticket = group.last_ticket;
    }

    /// Segments written since their last fdatasync, forgotten as such, each with the end of
    /// what was written to it so far (what its fdatasync will make durable).
    pub fn take_unsynced(&mut self) -> Vec<(Arc<Segment>, u64)> {
        let applied = self.applied_end;
        std::mem::take(&mut self.unsynced)
            .iter()
            .filter_map(|seq| {
                let segment = Arc::clone(&self.segments.get(seq)?.segment);
                let end = if *seq == applied.segment_seq {
                    applied.offset
                } else {
                    segment.bytes
                };
                Some((segment, end))
            })
            .collect()
    }

    /// The oldest segments nothing holds, as (seq, lower_writes): older than the active one and
    /// than everything applied. Retired only as this prefix, so that the live log stays a
    /// suffix of the whole log.
    pub fn retirable(&self) -> Vec<(u64, u64)> {
        let applied_seq = self.applied_end.segment_seq;
        self.segments
            .iter()
            .take_while(|(seq, live)| {
                **seq < applied_seq && **seq < self.active.seq && live.live_records == 0
            })
            .map(|(seq, live)| (*seq, live.lower_writes))
            .collect()
    }

    /// Takes retired segments out of the log.
    pub fn remove(&mut self, seqs: &[u64]) -> Vec<Arc<Segment>> {
        seqs.iter()
            .filter_map(|seq| {
                self.unsynced.remove(seq);
                self.segments.remove(seq).map(|live| live.segment)
            })
            .collect()
    }
}

impl Group {
    /// The group's I/O: one pwrite per segment touched, then with `sync` one fdatasync per
    /// segment. In every mode a segment the group moves past (it got its SEGMENT_END) is
    /// fdatasync'd before the next one is written, so a later segment never holds data while
    /// an earlier one lacks some. Without `sync`, write-back of the log is started every
    /// `writeback_bytes` (bounded dirty pages). Returns what it made durable.
    pub fn write(&self, sync: bool, writeback_bytes: u64, counters: &Counters) -> Result<Synced> {
        let mut bytes = 0;
        let mut synced = Vec::new();
        for (i, chunk) in self.chunks.iter().enumerate() {
            chunk.segment.write_at(&chunk.bytes, chunk.offset)?;
            bytes += chunk.bytes.len() as u64;
            if !sync {
                chunk
                    .segment
                    .start_writeback(chunk.offset + chunk.bytes.len() as u64, writeback_bytes)?;
            }
            let next = self.chunks.get(i + 1);
            let moves_on = next.is_some_and(|next| !Arc::ptr_eq(&next.segment, &chunk.segment));
            if moves_on || (sync && next.is_none()) {
                chunk.segment.sync_data()?;
                Counters::add(&counters.fdatasyncs, 1);
                synced.push((chunk.segment.seq, chunk.offset + chunk.bytes.len() as u64));
            }
        }
        Counters::add(&counters.log_bytes_written, bytes);
        Counters::add(&counters.group_commits, 1);
        Ok(synced)
    }
}

/// fdatasyncs the segments (Periodic and None modes: the background flush, before the lower
/// tier is made durable, and close). Returns what became durable.
pub(crate) fn sync_segments(
    segments: &[(Arc<Segment>, u64)],
    counters: &Counters,
) -> Result<Synced> {
    let mut synced = Vec::with_capacity(segments.len());
    for (segment, end) in segments {
        segment.sync_data()?;
        Counters::add(&counters.fdatasyncs, 1);
        synced.push((segment.seq, *end));
    }
    Ok(synced)
}
