//! roamkv-bench: the TPCx-IoT mobility benchmark of paper 002, run against roamkv (RocksDB and
//! LevelDB lower tiers), plain RocksDB, plain LevelDB and SQLite at equal durability and memory
//! budget, with write amplification measured at the block device. `roamkv bench mobility`.
//! `roamkv bench serve` loads the HTTP server against InfluxDB 1.6 and the in-process engine.
pub mod cli;
pub mod crash;
pub mod engines;
pub mod fault_report;
pub mod powercut;
pub mod report;
pub mod runner;
pub mod serve;
pub mod serve_load;
pub mod serve_targets;
pub mod steady;
pub mod survival;
pub mod worker;
pub mod workload;
