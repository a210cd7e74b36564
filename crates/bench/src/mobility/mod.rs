//! `roamkv bench mobility`: paper 002's TPCx-IoT mobility workload (`workload`) against the
//! engines under test (`engines`), each run a child process (`worker`) on a fresh file system
//! (`runner`), swept over threads, durability and scenarios (`sweep`), reported (`report`).
//! `bench steady` runs the same pieces for minutes.
pub mod engines;
pub mod report;
pub mod runner;
pub mod sweep;
pub mod worker;
pub mod workload;
