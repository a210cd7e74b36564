//! The commit path: how a write becomes durable and visible. A writer joins a group
//! (`group_commit`: the hand-off, the group's write and sync through the commit log, the
//! durability modes), its records reach the log's index (`index_apply`, on the writer's thread
//! or the applier's), and the log keeps what the feed and backups still read (`hold`).
//!
//! It acts on the shared state (`state/`) and the log (`commit_log/`); it may not read the lower
//! tier, run maintenance or answer queries (those rooms sit beside it and use it).

pub(crate) mod group_commit;
pub(crate) mod hold;
pub(crate) mod index_apply;
