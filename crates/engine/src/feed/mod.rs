//! The engine as a change feed (docs/ENGINE.md, "The change feed"): the commit log is already a
//! complete, ordered journal of every PUT, REGISTER, DEPART and TRIM, so a reader outside the
//! engine (the cloud sink) reads it instead of a second queue.
//!
//! - `reader`: whole batches from a position, across segment switches, never past what is
//!   applied.
//! - `batch`: what a read returns.
//!
//! What it stands on lives with the log and the state: `LogPos` (commit_log/position.rs), a
//! place in the log that names its log and the record before it, so that a replaced or
//! restored data directory is detected, not misread; the slots (commit_log/slots.rs), named,
//! durable positions (`feed/NAME.slot`), each a *hold* that keeps the segments its reader still
//! needs from retiring — aged or not — within a byte cap (commit/hold.rs), past which the engine
//! releases it rather than make a writer wait.
//!
//! A held segment may still be aged (its readings moved to the lower tier): the hold only keeps
//! the file. Recovery keeps such segments too (`split_held`), without replaying them.
//!
//! It reads the log only: it may not touch the lower tier, nor hold a writer.

pub(crate) mod batch;
pub(crate) mod reader;

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::commit_log::position::{LOG_POS_BYTES, LogPos};
use crate::model::ids::SegmentSeq;
pub use crate::model::limits::SLOT_NAME_BYTES_MAX;
pub use batch::{FeedBatch, FeedRecord};

use crate::commit::hold;
use crate::commit_log::log_state::{LiveSegment, LogState};
use crate::commit_log::record;
use crate::commit_log::segment::Segment;
use crate::commit_log::slots;
use crate::model::error::{Error, Result};
use crate::model::limits::SEGMENT_HEADER_BYTES;
use crate::state::{Inner, State};

/// One slot, as `Feed::status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotStatus {
    pub name: String,
    pub pos: LogPos,
    /// Its hold was released (cap or log budget): its reader may find a gap.
    pub released: bool,
    /// Bytes of log from its position to the end.
    pub lag_bytes: u64,
}

/// The feed's state: the log's identity, the slots, the hold and its cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedStatus {
    pub log_id: u64,
    pub slots: Vec<SlotStatus>,
    /// The oldest segment a slot holds.
    pub hold_from_seq: Option<SegmentSeq>,
    /// Bytes of segments kept only for the hold (they would have retired without it).
    pub hold_bytes: u64,
    /// The cap on `hold_bytes` (`Options::feed_hold_bytes_max`).
    pub hold_bytes_max: u64,
    /// Slots released since open.
    pub holds_released: u64,
}

/// The change feed of an open engine (`Engine::feed`).
pub struct Feed<'a> {
    pub(crate) inner: &'a Inner,
}

impl Feed<'_> {
    /// The oldest position still in the log (the start of the oldest live segment). Readings
    /// older than that are only in the lower tier: a reader that needs them scans the devices.
    pub fn start(&self) -> LogPos {
        let st = self.inner.state.lock();
        let seq = *st
            .log
            .segments
            .keys()
            .next()
            .expect("the log always has a live segment");
        LogPos {
            log_id: st.feed.log_id,
            seq,
            offset: SEGMENT_HEADER_BYTES,
            prev_crc: 0,
            prev_len: 0,
        }
    }

    /// The end of what is applied (under `Durability::Sync`, durable): a reader starting here
    /// sees every batch acknowledged after this call. The position names the record before it
    /// (its checksum and length, or the SEGMENT_END before a segment's start), as every
    /// position a reader gets from `read` does, so that a cursor stored from it is checked
    /// against this log's history too (a copied or restored directory is told apart).
    pub fn end(&self) -> LogPos {
        let (mut pos, before) = {
            let st = self.inner.state.lock();
            let applied = st.log.applied_end;
            let live = st.log.segments.get(&applied.segment_seq);
            let at_sealed_end = live.is_none_or(|live| {
                live.sealed_at_ms.is_some() && applied.offset >= live.sealed_end
            });
            let next = st.log.segments.range(applied.segment_seq.next()..).next();
            let pos = LogPos {
                log_id: st.feed.log_id,
                seq: applied.segment_seq,
                offset: applied.offset,
                prev_crc: 0,
                prev_len: 0,
            };
            match (next, live) {
                // Never a sealed segment's end: it may retire; the next segment's start is the
                // same place in the log, after the SEGMENT_END that ends the sealed one (named
                // while that one is live).
                (Some((next, _)), live) if at_sealed_end => (
                    LogPos {
                        seq: *next,
                        offset: SEGMENT_HEADER_BYTES,
                        ..pos
                    },
                    live.and_then(|live| {
                        live.sealed_end
                            .checked_sub(record::SEGMENT_END_BYTES as u64)
                            .filter(|start| *start >= SEGMENT_HEADER_BYTES)
                            .map(|start| (Arc::clone(&live.segment), start, true))
                    }),
                ),
                (_, Some(live)) => (
                    pos,
                    st.log
                        .applied_last_start
                        .filter(|s| s.segment_seq == applied.segment_seq)
                        .map(|s| (Arc::clone(&live.segment), s.offset, false)),
                ),
                _ => (pos, None),
            }
        };
        // The record before it, read without the lock; unnamed if it cannot be read.
        if let Some((segment, start, segment_end)) = before
            && let Some((crc, len)) = record_at(&segment, start, pos.offset, segment_end)
        {
            pos.prev_crc = crc;
            pos.prev_len = if segment_end { 0 } else { len };
        }
        pos
    }

    /// Whole batches from `from`, about `max_bytes` of log (at least one batch if there is
    /// one). `Error::FeedGap` if `from`'s segment retired (the reader lost its hold);
    /// `Error::FeedDiverged` if `from` is of another log or history (a replaced or restored
    /// data directory).
    pub fn read(&self, from: &LogPos, max_bytes: usize) -> Result<FeedBatch> {
        reader::read(self.inner, from, max_bytes)
    }

    /// Checks that `at` can be read here (see `read`) without reading from it.
    pub fn check(&self, at: &LogPos) -> Result<()> {
        reader::check(self.inner, at)
    }

    /// The slot's position, and whether its hold was released; None if there is no such slot.
    pub fn slot(&self, name: &str) -> Result<Option<(LogPos, bool)>> {
        slots::check_name(name)?;
        let st = self.inner.state.lock();
        Ok(st.feed.slots.get(name).map(|s| (s.pos, s.released)))
    }

    /// Creates the slot or moves it to `at` (forward or back, while `at` is still in the log),
    /// and holds the log from there. The slot's file is rewritten at most once a second while
    /// it moves (and at close): after a crash the hold may be a little older, never newer.
    pub fn hold(&self, name: &str, at: &LogPos) -> Result<()> {
        self.hold_as(name, at, false)
    }

    /// `hold`, for a reader that is about to export the devices present by scanning (after a
    /// gap or at a new history) and will then tail from `at`: the hold is kept past its cap
    /// until the slot moves again (the next `hold`), so that writes during a long scan cannot
    /// release it and send the reader into another gap, and another scan, without end. Its
    /// bound is the scan, not the cap: near the log's budget it is released all the same
    /// (a hold never makes a writer wait).
    pub fn hold_for_snapshot(&self, name: &str, at: &LogPos) -> Result<()> {
        self.hold_as(name, at, true)
    }

    fn hold_as(&self, name: &str, at: &LogPos, for_snapshot: bool) -> Result<()> {
        self.inner.writable()?;
        slots::check_name(name)?;
        reader::check(self.inner, at)?;
        let to_persist = {
            let mut st = self.inner.state.lock();
            if !st.log.segments.contains_key(&at.seq) {
                // Retired between the check and now: holding it would hold nothing.
                return Err(Error::FeedGap {
                    position: at.to_string(),
                    oldest_seq: *st.log.segments.keys().next().expect("a live segment"),
                });
            }
            let slot = st
                .feed
                .slots
                .entry(name.to_string())
                .or_insert_with(|| slots::new_slot(*at));
            slot.pos = *at;
            slot.released = false;
            slot.for_snapshot = for_snapshot;
            let due = slots::due_for_persist(slot, false);
            st.log.hold_from = st.feed.hold_from();
            due.then_some(*at)
        };
        match to_persist {
            Some(pos) => slots::write_slot(&self.inner.dir.path, name, &pos),
            None => Ok(()),
        }
    }

    /// Removes the slot (its hold with it). A slot that does not exist is a no-op.
    pub fn drop_slot(&self, name: &str) -> Result<()> {
        self.inner.writable()?;
        slots::check_name(name)?;
        {
            let mut st = self.inner.state.lock();
            st.feed.slots.remove(name);
            st.log.hold_from = st.feed.hold_from();
        }
        slots::remove_slot(&self.inner.dir.path, name)
    }

    /// Writes every slot that moved since its file was written (close does this too).
    pub fn flush(&self) -> Result<()> {
        flush(self.inner)
    }

    /// Bytes of log from `from` to the end (all of the live log if `from` is not in it).
    pub fn lag_bytes(&self, from: &LogPos) -> u64 {
        lag_bytes(&self.inner.state.lock(), from)
    }

    pub fn status(&self) -> FeedStatus {
        let st = self.inner.state.lock();
        FeedStatus {
            log_id: st.feed.log_id,
            slots: st
                .feed
                .slots
                .iter()
                .map(|(name, s)| SlotStatus {
                    name: name.clone(),
                    pos: s.pos,
                    released: s.released,
                    lag_bytes: lag_bytes(&st, &s.pos),
                })
                .collect(),
            hold_from_seq: st.log.hold_from,
            hold_bytes: hold::held_bytes(&st),
            hold_bytes_max: hold::hold_bytes_max(self.inner),
            holds_released: st.feed.releases,
        }
    }
}

/// The stored checksum and length of the record at `start` of `segment`, if one decodes there
/// and ends at `end` (or, for a SEGMENT_END, wherever it ends).
fn record_at(segment: &Segment, start: u64, end: u64, segment_end: bool) -> Option<(u32, u32)> {
    let len = if segment_end {
        record::SEGMENT_END_BYTES as u64
    } else {
        end.checked_sub(start)?
    };
    let bytes = segment.read_at(start, usize::try_from(len).ok()?).ok()?;
    match record::decode(&bytes, segment.seq_low()) {
        record::Decode::Record(d) if d.len as u64 == len => Some((
            u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?),
            d.len as u32,
        )),
        _ => None,
    }
}

fn lag_bytes(st: &State, from: &LogPos) -> u64 {
    let applied = st.log.applied_end;
    st.log
        .segments
        .iter()
        .filter(|(seq, _)| **seq >= from.seq || !st.log.segments.contains_key(&from.seq))
        .map(|(seq, live)| {
            let end = if *seq < applied.segment_seq {
                live.sealed_end.min(live.segment.bytes)
            } else if *seq == applied.segment_seq {
                applied.offset
            } else {
                SEGMENT_HEADER_BYTES
            };
            let start = if *seq == from.seq {
                from.offset
            } else {
                SEGMENT_HEADER_BYTES
            };
            end.saturating_sub(start)
        })
        .sum()
}

/// Writes every slot whose position moved since its file was written.
pub(crate) fn flush(inner: &Inner) -> Result<()> {
    let due: Vec<(String, LogPos)> = {
        let mut st = inner.state.lock();
        st.feed
            .slots
            .iter_mut()
            .filter_map(|(name, slot)| {
                slots::due_for_persist(slot, true).then(|| (name.clone(), slot.pos))
            })
            .collect()
    };
    for (name, pos) in due {
        slots::write_slot(&inner.dir.path, &name, &pos)?;
    }
    Ok(())
}

/// Segment files by sequence number, as recovery lists them.
pub(crate) type SegmentFiles = Vec<(SegmentSeq, PathBuf)>;

/// Of the segments recovery finds aged (their readings already in the lower tier), those a
/// slot holds are kept, the rest removed as before: (kept, to remove).
pub(crate) fn split_held(
    aged: SegmentFiles,
    hold_from: Option<SegmentSeq>,
) -> (SegmentFiles, SegmentFiles) {
    aged.into_iter()
        .partition(|(seq, _)| hold_from.is_some_and(|from| *seq >= from))
}

/// Puts segments kept for a hold into the recovered log as aged and sealed: never replayed
/// (their readings are in the lower tier), read only by feed readers, retired once released.
pub(crate) fn keep_aged(log: &mut LogState, kept: Vec<Arc<Segment>>) {
    for segment in kept {
        let bytes = segment.bytes;
        let mut live = LiveSegment::new(Arc::clone(&segment));
        live.aged = true;
        live.sealed_at_ms = Some(0);
        // Their real ends are not needed: a reader stops at their SEGMENT_END.
        live.sealed_end = bytes;
        live.written_end = bytes;
        live.synced_end = bytes;
        log.segments.insert(segment.seq, live);
    }
}
