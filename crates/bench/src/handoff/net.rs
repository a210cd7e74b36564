//! The network of `roamkv bench handoff`: a namespace for each of edge A, edge B, the cloud
//! database and the load, each joined by a veth pair to a bridge in a hub namespace (where the
//! delay relay listens):
//!
//! ```text
//! load 10.77.0.4 ─┐                       ┌─ 10.77.0.1 edge A
//!                 ├── hub: bridge 10.77.0.100 (relay) ──┼─ 10.77.0.2 edge B
//!                 │                       └─ 10.77.0.3 cloud (PostgreSQL)
//! ```
//!
//! Each node's link: `tc tbf` at the rate asked for, on both ends of its veth; random loss and
//! cuts with nftables in the node's namespace (`numgen random` drops on input and output; a cut
//! is a `drop` rule in the `cut` chain, a heal flushes it). The kernel here has no netem: delay is
//! the relay's (relay.rs). Deleting the namespaces (Drop, on every path out) removes the veths,
//! qdiscs and rule sets with them; namespaces a killed run left behind are swept at the next start
//! (testbed's `netns::Bridged` makes, sweeps and deletes them).

use std::net::Ipv4Addr;
use std::path::Path;

use roamkv_testbed::netns::Bridged;

use crate::error::{BenchError, Result};

/// A node of the network: its namespace's role, its address, the hub side of its veth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Node {
    A,
    B,
    Cloud,
    Load,
}

impl Node {
    pub const ALL: [Node; 4] = [Node::A, Node::B, Node::Cloud, Node::Load];

    pub fn name(self) -> &'static str {
        match self {
            Node::A => "a",
            Node::B => "b",
            Node::Cloud => "cloud",
            Node::Load => "load",
        }
    }

    pub fn ip(self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 0, self.host_octet())
    }

    fn host_octet(self) -> u8 {
        match self {
            Node::A => 1,
            Node::B => 2,
            Node::Cloud => 3,
            Node::Load => 4,
        }
    }
}

/// The hub's address on the bridge: where the relay listens.
pub const HUB_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// Tag of every namespace this bench makes (`rkh<pid>-<node>`): the sweep finds them by it.
const NETNS_TAG: &str = "rkh";
/// The nftables table each node's loss and cut rules live in.
const NFT_TABLE: &str = "roamkv_bench";

/// How each node's link is shaped.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct LinkShape {
    /// tbf rate in Mbit/s on both ends of each veth; 0: unshaped.
    pub rate_mbit: u32,
    /// Packets dropped at random, per thousand, on each node's input and on its output (set
    /// with `set_loss`: the fault rounds drop, the transfer phases do not).
    pub loss_permille: u32,
}

/// The namespaces, made (testbed's `Bridged`); removed on drop and by a Ctrl-C.
pub struct Net {
    bridged: Bridged,
    pub shape: LinkShape,
}

impl Net {
    /// Sweeps what dead runs left, then makes the hub, the four nodes and their links.
    pub fn create(shape: LinkShape) -> Result<Net> {
        roamkv_testbed::prerequisite::require_tool("tc", "iproute2")?;
        roamkv_testbed::prerequisite::require_tool("nft", "nftables")?;
        let net = Net {
            bridged: Bridged::create(NETNS_TAG, Some(HUB_IP))?,
            shape,
        };
        for node in Node::ALL {
            net.add_node(node)?;
        }
        Ok(net)
    }

    fn add_node(&self, node: Node) -> Result<()> {
        let ns = self.bridged.add_node(node.name(), node.ip())?;
        let hub = self.bridged.hub();
        let hub_side = format!("v{}", node.name());
        if self.shape.rate_mbit > 0 {
            let rate = format!("{}mbit", self.shape.rate_mbit);
            for (space, dev) in [(&ns, "eth0"), (&hub, hub_side.as_str())] {
                // burst: a few packets at the rate (32 KiB at 100 Mbit/s is 2.6 ms); latency:
                // how long a packet may queue before tbf drops it, as a switch's buffer would.
                tc(&[
                    "-n", space, "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                    "32kb", "latency", "50ms",
                ])?;
            }
        }
        let rules = format!(
            "table inet {NFT_TABLE} {{\n\
             chain cut {{ }}\n\
             chain loss {{ }}\n\
             chain input {{ type filter hook input priority 0; policy accept; iif \"lo\" accept; jump cut; jump loss; }}\n\
             chain output {{ type filter hook output priority 0; policy accept; oif \"lo\" accept; jump cut; jump loss; }}\n\
             }}\n"
        );
        // One argument holding the whole table: nft parses it as it would a file.
        nft(&ns, &[&rules])
    }

    /// Drops `permille` of the packets at random on every node's input and output (0: none).
    pub fn set_loss(&mut self, permille: u32) -> Result<()> {
        for node in Node::ALL {
            let ns = self.namespace(node);
            nft(&ns, &["flush", "chain", "inet", NFT_TABLE, "loss"])?;
            if permille > 0 {
                let rule = format!("numgen random mod 1000 < {permille} drop");
                nft(&ns, &["add", "rule", "inet", NFT_TABLE, "loss", &rule])?;
            }
        }
        self.shape.loss_permille = permille;
        Ok(())
    }

    /// The namespace's name of `node` (for `enter_in_child`, `Placement::netns`, `setns`).
    pub fn namespace(&self, node: Node) -> String {
        self.bridged.namespace(node.name())
    }

    pub fn hub(&self) -> String {
        self.bridged.hub()
    }

    /// Cuts `node`'s link: every packet in or out dropped (connections stall, as behind a
    /// pulled cable: no reset, no error, until TCP gives up or the link heals).
    pub fn cut(&self, node: Node) -> Result<()> {
        nft(
            &self.namespace(node),
            &["add", "rule", "inet", NFT_TABLE, "cut", "drop"],
        )
    }

    pub fn heal(&self, node: Node) -> Result<()> {
        nft(
            &self.namespace(node),
            &["flush", "chain", "inet", NFT_TABLE, "cut"],
        )
    }
}

fn tc(args: &[&str]) -> Result<()> {
    run("tc", args)
}

/// `nft` inside namespace `ns` (`ip netns exec`).
fn nft(ns: &str, args: &[&str]) -> Result<()> {
    let mut all = vec!["netns", "exec", ns, "nft"];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn run(program: &str, args: &[&str]) -> Result<()> {
    let mut all = vec![program];
    all.extend_from_slice(args);
    roamkv_testbed::command::run_command(&all)?;
    Ok(())
}

/// The calling thread joins namespace `name` (its sockets from then on are that namespace's);
/// the guard puts it back where it was. Threads it spawns meanwhile start in `name`.
pub struct InNamespace {
    home: std::fs::File,
}

impl InNamespace {
    pub fn enter(name: &str) -> Result<InNamespace> {
        let home = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(|e| BenchError::os("opening this thread's network namespace", e))?;
        setns(&Path::new(roamkv_testbed::netns::NETNS_DIR).join(name))?;
        Ok(InNamespace { home })
    }
}

impl Drop for InNamespace {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: setns(2) on a descriptor this guard owns.
        unsafe { libc::setns(self.home.as_raw_fd(), libc::CLONE_NEWNET) };
    }
}

/// The calling thread joins the namespace at `path` for good (a thread of its own).
pub fn setns(path: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path).map_err(|e| BenchError::io("opening", path, e))?;
    // SAFETY: setns(2) on a descriptor we own; it affects only the calling thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(BenchError::os(
            format!("joining {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
