//! The fleet's network: each edge in a network namespace of its own (`rkf<pid>-e<i>`, its `eth0`
//! at 10.78.0.(10 + i)), each joined by a veth pair to a bridge in a hub namespace; one more veth
//! pair joins this (the root) namespace to the same bridge at 10.78.0.1, where the brokers listen
//! and advertise themselves and from where the clients and the consumer connect:
//!
//! ```text
//! root: 3 brokers, 8N clients, consumer 10.78.0.1 ─┐
//!                                                  hub: bridge ─┬─ 10.78.0.11 edge 1
//!                                                               ├─ 10.78.0.12 edge 2
//!                                                               └─ …
//! ```
//!
//! So an edge's sink reaches the cluster, and its clients reach it, over a link of its own (a
//! veth pair and the bridge), not over the host's loopback. The links are not shaped: the fleet
//! run measures the cloud's side, not a WAN (the handoff bench shapes its links). Made once for
//! the largest fleet size (every size and the warm-up use edges 1..N); deleted on every path out
//! (testbed's `netns::Bridged`: Drop, the Ctrl-C handler, the next run's sweep).

use std::net::Ipv4Addr;

use roamkv_testbed::netns::Bridged;

use crate::error::{BenchError, Result};

/// This namespace's address on the bridge: the brokers' listeners, the clients' source.
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// Tag of the namespaces (`rkf<pid>-hub`, `rkf<pid>-e1`, …): the sweep finds them by it.
const NETNS_TAG: &str = "rkf";
/// Edge i's address is 10.78.0.(EDGE_HOST_BASE + i).
const EDGE_HOST_BASE: u8 = 10;
/// The most edges one network holds: the /24's host numbers 11..=210 (the rest kept for the
/// host, 1, and future hubs).
pub const EDGES_MAX: usize = 200;

/// The namespaces of up to `edges` edges, made; removed on drop.
pub struct FleetNet {
    bridged: Bridged,
    edges: usize,
}

impl FleetNet {
    /// Sweeps what dead runs left, then makes the hub, the host link and `edges` edges' links.
    pub fn create(edges: usize) -> Result<FleetNet> {
        if edges == 0 || edges > EDGES_MAX {
            return Err(BenchError::Run(format!(
                "--edges: fleet sizes of 1 to {EDGES_MAX} (each edge an address of 10.78.0.0/24)"
            )));
        }
        let bridged = Bridged::create(NETNS_TAG, None)?;
        bridged.add_host_link(HOST_IP)?;
        for i in 1..=edges {
            bridged.add_node(&role(i), edge_ip(i))?;
        }
        Ok(FleetNet { bridged, edges })
    }

    /// Edge `i`'s (1-based) namespace and address.
    pub fn edge(&self, i: usize) -> (String, Ipv4Addr) {
        assert!(
            (1..=self.edges).contains(&i),
            "edge {i} of a network of {}",
            self.edges
        );
        (self.bridged.namespace(&role(i)), edge_ip(i))
    }
}

fn role(i: usize) -> String {
    format!("e{i}")
}

fn edge_ip(i: usize) -> Ipv4Addr {
    let host = u8::try_from(i).expect("at most EDGES_MAX edges") + EDGE_HOST_BASE;
    Ipv4Addr::new(10, 78, 0, host)
}

const _: () = assert!(EDGES_MAX + EDGE_HOST_BASE as usize <= 254);
