//! The words every part of the engine speaks, and their bounds: a reading and its checks
//! (`reading`), the ids the engine gives out (`ids`), the errors it returns (`error`), and every
//! limit with its reason (`limits`, the only home of a bound).
//!
//! It owns no state and does no I/O; it imports no other room of the engine (every room
//! imports it).

pub mod error;
pub mod ids;
pub mod limits;
pub mod reading;
