//! Departures: a device leaving this edge is dropped at once (one DEPART record, nothing
//! rewritten: paper 002), or, with `--on-depart cloud`, once the cloud sink has every reading of
//! it. The parts: `fence` (devices that take no writes now, and why), `departing` (the durable
//! record of departures waiting for the cloud), `cloud` (the sink as the server runs it, and the
//! task that departs what waited). The server's state holds them; they never name it (the task
//! reaches the server through `cloud::DepartureHost`).

pub mod cloud;
pub mod departing;
pub mod fence;
