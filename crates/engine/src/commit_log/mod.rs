//! The commit log: the one journal of both tiers (docs/PROPERTIES.md, property 3), readable alone. Each
//! group of writes is one pwrite per segment touched and, under `Durability::Sync`, one
//! fdatasync per segment (papers 003/004: group commit, fdatasync, no journaling of the
//! journal). What knows the state (the group commit's hand-off, `commit/`) sits above it.
//!
//! - `record`: the record format: header, kinds, flags, checksums (docs/FORMAT.md).
//! - `segment`: one segment file: its header, appends, reads, the scan that recovery and
//!   `check` use.
//! - `storage`: the seam under every file the log opens (and the fault-injecting one of tests).
//! - `spares`: ready (preallocated) segments and the log's byte budget.
//! - `position`: places in the log: `LogPosition` (segment, offset) and `LogPos`, the same with
//!   the log's identity, as a reader outside the engine holds it.
//! - `slots`: the feed's named, durable positions, each a *hold* on the segments its reader
//!   still needs.
//! - `log_state`: the bookkeeping under the state lock (live segments and their holds, the
//!   queue and tickets, the segment switch with its SEGMENT_END record, what may retire) and
//!   `Group::write`, the group's I/O.
//!
//! It imports only `model`, `dir` and `stats`: it may not touch the state, the index or the
//! lower tier.

pub(crate) mod log_state;
pub(crate) mod position;
pub mod record;
pub mod segment;
pub(crate) mod slots;
pub(crate) mod spares;
pub mod storage;
pub(crate) mod waiters;
