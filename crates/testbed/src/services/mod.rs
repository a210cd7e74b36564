//! The services tests and benchmarks run as real processes, one way for each: started on a free
//! loopback port (or a namespace), waited for until ready, their logs kept and printed when a
//! test fails, stopped on every path out (Drop).
//!
//! - `serve`: `roamkv serve`.
//! - `mosquitto`: an MQTT broker.
//! - `postgres`: a private PostgreSQL server.
//! - `kafka`: a 3-node Apache Kafka cluster (KRaft) from Maven Central's jars.
//! - `netns`: a child started inside a network namespace.
//!
//! It may not know what a test checks: the writers' ledger is `crate::ledger`.

pub mod kafka;
pub mod mosquitto;
pub mod netns;
pub mod postgres;
pub mod serve;

/// A free TCP port on the loopback address (bound, read, released: another process could take it
/// before the caller does, which a test on one machine accepts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Prints the last `lines` lines of `text` to stderr under a heading: what a failed test shows
/// of a service's log.
pub(crate) fn print_tail(what: &str, text: &str, lines: usize) {
    let all: Vec<&str> = text.lines().collect();
    eprintln!("--- last {} lines of {what} ---", lines.min(all.len()));
    for line in &all[all.len().saturating_sub(lines)..] {
        eprintln!("{line}");
    }
}
