//! roamkv-bench: the TPCx-IoT mobility benchmark of paper 002, run against roamkv (RocksDB and
//! LevelDB lower tiers), plain RocksDB, plain LevelDB and SQLite at equal durability and memory
//! budget, with write amplification measured at the block device (`mobility`, and its long run
//! `steady`); `serve` loads the HTTP server against InfluxDB 1.6 and the in-process engine;
//! `sink` measures the server's cloud sink into PostgreSQL (and Kafka); `handoff` devices handed
//! between two servers;
//! `footprint` what a sensor stream costs a gateway's disk, against InfluxDB, QuestDB and RocksDB;
//! `faults` are the kill -9 and power-cut soaks. One folder per command; `cli` dispatches; `error`
//! is the crate's one error type.
pub mod backup;
pub mod cli;
pub mod edge_rig;
pub mod error;
pub mod export;
pub mod faults;
pub mod footprint;
pub mod handoff;
pub mod mobility;
pub mod serve;
pub mod sink;
pub mod steady;

pub use error::BenchError;
