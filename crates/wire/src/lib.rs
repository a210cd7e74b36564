//! roamkv's wire contract: what travels between a client and `roamkv serve`, and what the server
//! stores of it, with no HTTP and no runtime in it (EdgeX keeps its DTOs apart from its services
//! the same way, in go-mod-core-contracts). The server, the bench (`bench serve` builds the same
//! bodies and decodes the same bytes) and the CLI (`roamkv load`'s times) depend on it; it
//! depends on the engine only for the engine's own rules (ids, records) and its `Reading`.
//!
//! - [`edgex`]: EdgeX core-data v3 DTOs, their validation, and their mapping onto the engine's
//!   keys and the stored reading form; [`edgex::contract`], the contract's constants.
//! - [`batch`]: the native API's compact binary batch.
//! - [`time_arg`]: times as people and programs give them, and as answers print them.
//! - [`names`]: the engine's one id rule, worded for an answer.
//! - [`report`]: the engine's statistics and device listing as JSON (API and CLI alike).
//! - [`error`]: [`WireError`], what is wrong with an input, in a kind the server maps to a status.
#![deny(clippy::unwrap_used)]

pub mod batch;
pub mod edgex;
pub mod error;
pub mod keyed;
pub mod names;
pub mod report;
pub mod time_arg;

pub use error::WireError;
pub use keyed::KeyedReading;
