//! The commit log: the one journal of both tiers (docs/PROPERTIES.md, property 3), readable alone. Each
//! group of writes is one pwrite per segment touched and, under `Durability::Sync`, one
//! fdatasync per segment (papers 003/004: group commit, fdatasync, no journaling of the
//! journal).
//!
//! - `group_commit`: the hand-off. A writer makes room for its records (moving to a ready
//!   segment, or stalling while the log is at its budget), places and queues them, and waits;
//!   the first waiter without a leader leads the group: takes the queue, writes it without the
//!   lock, applies it and wakes the others. Also the syncs of the `Periodic` and `None` modes.
//! - `log_state`: the bookkeeping under the state lock (live segments and their holds, the
//!   queue and tickets, the segment switch with its SEGMENT_END record, what may retire) and
//!   `Group::write`, the group's I/O.
//!
//! The segment files themselves are `segment.rs`; ready segments and the log's budget are
//! `spares.rs`.

pub(crate) mod group_commit;
pub(crate) mod log_state;
