//! A block tracer that names every request, in the spirit of paper 004's MOST tool.
//!
//! `Tracer::start` creates a private tracefs instance (so it never disturbs other tracing users),
//! enables block_rq_issue and block_rq_complete filtered to the fixture's device(s), and streams the
//! instance's trace_pipe in a thread (so long commands do not overflow the ring buffer). Meanwhile a
//! watcher thread records the physical extents (FIEMAP) of every file under the mount point, on
//! inotify events and on a short poll, so files deleted during the operation still get a name.
//! `Tracer::stop` then classifies each request by its LBA:
//! - flush (REQ_OP_FLUSH, 0 bytes) -> `Flush`; reads -> `Read`;
//! - writes to an external journal/log device, or into the ext4 journal inode's extents
//!   (`debugfs -R 'stat <8>'`) or the XFS internal log (`xfs_db ... logstart logblocks`) -> `FsJournal`;
//! - writes into a file's extents -> `Data` with the file's path (relative to the mount point);
//! - every other write -> `Metadata` (inode tables, bitmaps, btrees, superblocks, btrfs trees).
//!
//! The classifier itself (`classify`) is a pure function of parsed events and a `Layout`, so it
//! is unit-tested on recorded traces in tests/fixtures.
//!
//! One concern per module: `tracefs` (instance setup and the pipe reader), `events` (parsing
//! event lines), `layout` (where the journal and files live), `file_extents` (FIEMAP and inotify:
//! the syscall side), `request` and `classify` (naming each request), `summary` (aggregation),
//! `tracer` (start/stop), `render` (tables and charts). Everything public is re-exported here.
//! `command` is the `roamkv lab trace` command built on them.

mod classify;
pub mod command;
mod events;
mod file_extents;
mod layout;
mod render;
mod request;
mod summary;
mod tracefs;
mod tracer;

pub use classify::{Capture, Trace, classify};
pub use events::{RawEvent, RwbsOp, SECTOR_BYTES, parse_rwbs, parse_trace_line};
pub use file_extents::fiemap;
pub use layout::{
    FileExtent, Layout, SectorRange, parse_btrfs_chunks, parse_debugfs_extents, parse_xfs_log,
};
pub use render::{print_trace, summary_rows, timeline_text, trace_svg};
pub use request::{Kind, Request};
pub use summary::{KindCounts, Summary, WriteCount};
pub use tracefs::tracefs_available;
pub use tracer::Tracer;
