//! What `lab fs` (`fs_workloads`) and `lab trace` (`trace_command`) report, built on
//! `roamkv_testbed::report`.
pub mod fs_workloads;
pub mod trace_command;
