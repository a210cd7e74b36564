//! roamkv-testbed: the rig that the bench, the lab and the tests of every crate share, and
//! none of their experiments.
//!
//! - `fixture`: file systems on loop devices (or a confirmed real device), undone on every path
//!   out, Ctrl-C included (`fixture::cleanup`).
//! - `devstat`: a block device's own counters (/sys/block/DEV/stat).
//! - `prerequisite`: root and tools, and the one skip-or-fail rule for tests that need them.
//! - `report`: the machine header, JSON files, HTML pages with SVG charts.
//! - `vm`: the qemu guest (`vm/guest-base.sh` is the shared part of every guest image).
//! - `stats`: median and percentiles, with one behaviour on empty input.
//! - `services` (`serve`, `mosquitto`, `postgres`, `kafka`, `netns`): the services tests run as real
//!   processes, one way each: start, wait for ready, logs on failure, stop on every path out.
//! - `ledger`: the writers' ledger of fault tests (acknowledged, unanswered, found: exactly once).
//! - `certificates` (feature `certificates`): a CA and a server certificate for TLS tests.
//! - `command`, `error`: running a helper program; the one error type.
#[cfg(feature = "certificates")]
pub mod certificates;
pub mod command;
pub mod devstat;
pub mod error;
pub mod fixture;
pub mod ledger;
pub mod prerequisite;
pub mod report;
pub mod services;
pub mod stats;
pub mod vm;

pub use error::Error;
pub use services::{kafka, mosquitto, netns, postgres, serve};
