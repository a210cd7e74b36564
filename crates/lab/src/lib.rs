//! roamkv-lab: the I/O lab. File systems on loop devices as test fixtures (`fixture`), block device
//! counters (`devstat`), a tracefs block tracer that names every request (`trace`), the file
//! workloads of papers 001 and 004 (`workload`), reports (`report`) and the `roamkv lab` command
//! line (`cli`); SQLite transactions (`sqlite`) and SQLite queries compared with roamkv
//! (`queries`); what a test does without root or a tool (`prerequisite`).
pub mod cli;
pub mod devstat;
pub mod error;
pub mod fixture;
pub mod prerequisite;
pub mod queries;
pub mod report;
pub mod sqlite;
pub mod trace;
pub mod vm;
pub mod workload;

pub use error::LabError;
