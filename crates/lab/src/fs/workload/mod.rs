//! The file workloads of paper 001 (sequential/random read/write by block size and file size) and
//! paper 004 section 5.2 (4 KiB write + fsync/fdatasync, sequential/random, overwrite/append),
//! buffered or O_DIRECT, with the device counters read around every repetition.
//!
//! Conventions (also in docs/LAB.md):
//! - a repetition does `ops = min(file_bytes / block_bytes, ops_max)` operations; sequential ones
//!   cover the first `ops * block_bytes` bytes, random ones pick distinct blocks (a permutation);
//! - reads drop the page cache first (after preparing the file); writes of the paper-001 kind end
//!   with one fsync inside the timed region, so buffered writes are measured to the device;
//! - the file being read or overwritten is prepared (written + fsynced) outside the timed region.
//!
//! The parts:
//! - `spec`: what a workload is (pattern, I/O mode, sync call) and which ones a run's `Plan` holds;
//! - `target`: where it runs (a lab fixture or a file system mounted by someone else) and its
//!   device counters;
//! - `file_io`: the aligned buffer, opening for buffered or direct I/O, the untimed preparation;
//! - `run`: one timed (or traced) repetition;
//! - `measurement`: the repetitions of one workload summarised, with the traced requests per operation.
mod file_io;
mod measurement;
mod run;
mod spec;
mod target;

pub use measurement::{Measurement, TRACED_OPS, TracedPerOp, measure, measure_on};
pub use run::Repetition;
pub use spec::{IoMode, Pattern, Plan, SYNC_WRITE_BYTES, SyncCall, SyncTarget, Workload, offsets};
pub use target::{MountedDevice, Target};
