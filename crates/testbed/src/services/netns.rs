//! Network namespaces for benchmarks that need real links on one machine:
//!
//! - `Bridged`: namespaces joined by a bridge in a hub namespace, one veth pair per node (and,
//!   if asked, one from this, the root, namespace: `add_host_link`), deleted on drop and by the
//!   Ctrl-C handler (fixture/cleanup), swept at the next start when a killed run left them;
//! - `enter_in_child`: a child process started inside a namespace.
//!
//! What a bench adds on top (tc qdiscs, nftables tables inside a node) lives in the node's
//! namespace and goes with it.
use crate::error::Error;
use crate::fixture::cleanup;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

/// Where `ip netns add NAME` puts a namespace.
pub const NETNS_DIR: &str = "/run/netns";

/// Namespaces named `<tag><pid>-<role>`, the hub's role `hub`, every node's `eth0` a veth pair
/// whose other end (`v<role>`) is a port of the hub's bridge `br0`; every address in one /24.
/// Deleting a namespace deletes its veth pairs (both ends), qdiscs and nftables tables, so the
/// namespaces are the only thing to undo, and the host link's end here, deleted first and at once:
/// the kernel removes a deleted namespace's links only when it tears it down, after `ip netns del`
/// returns, and this end would outlive the run by that much.
pub struct Bridged {
    /// `<tag><pid>`: the sweep reads the pid back.
    prefix: String,
    tag: &'static str,
    /// Its entry in the interrupt registry.
    undo_owner: u64,
}

impl Bridged {
    /// Sweeps the namespaces of dead runs with the same `tag`, then makes the hub and its
    /// bridge, at `hub_ip` (/24) if given (a relay listening there, say).
    pub fn create(tag: &'static str, hub_ip: Option<Ipv4Addr>) -> Result<Bridged, Error> {
        crate::prerequisite::require_tool("ip", "iproute2")?;
        sweep_stale(tag);
        cleanup::install_interrupt_cleanup();
        let net = Bridged {
            prefix: format!("{tag}{}", std::process::id()),
            tag,
            undo_owner: cleanup::new_owner_id(),
        };
        let hub = net.add_namespace("hub")?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        if let Some(hub_ip) = hub_ip {
            ip(&[
                "-n",
                &hub,
                "addr",
                "add",
                &format!("{hub_ip}/24"),
                "dev",
                "br0",
            ])?;
        }
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        Ok(net)
    }

    fn add_namespace(&self, role: &str) -> Result<String, Error> {
        let name = self.namespace(role);
        ip(&["netns", "add", &name])?;
        cleanup::register_undo(self.undo_owner, cleanup::Undo::DeleteNetns(name.clone()));
        Ok(name)
    }

    /// A node: namespace `role`, its `eth0` at `addr` (/24) on the bridge, `lo` up. Returns
    /// the namespace's name.
    pub fn add_node(&self, role: &str, addr: Ipv4Addr) -> Result<String, Error> {
        let ns = self.add_namespace(role)?;
        let hub = self.hub();
        let hub_side = format!("v{role}");
        ip(&[
            "-n", &hub, "link", "add", &hub_side, "type", "veth", "peer", "name", "eth0", "netns",
            &ns,
        ])?;
        ip(&["-n", &hub, "link", "set", &hub_side, "master", "br0", "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A veth pair from this (the root) namespace to the bridge, its end here named `<tag><pid>`
    /// at `addr` (/24): processes here (servers, clients) reach the nodes and are reached by
    /// them at `addr`. Deleted before the namespaces (a killed run's goes with its hub's
    /// namespace, swept). Returns its name here.
    pub fn add_host_link(&self, addr: Ipv4Addr) -> Result<String, Error> {
        let hub = self.hub();
        let here = self.prefix.clone();
        // Made here, its peer made in the hub: this process's namespace, whichever it is.
        ip(&[
            "link", "add", &here, "type", "veth", "peer", "name", "vhost", "netns", &hub,
        ])?;
        cleanup::register_undo(self.undo_owner, cleanup::Undo::DeleteLink(here.clone()));
        ip(&["-n", &hub, "link", "set", "vhost", "master", "br0", "up"])?;
        ip(&["addr", "add", &format!("{addr}/24"), "dev", &here])?;
        ip(&["link", "set", &here, "up"])?;
        Ok(here)
    }

    /// The namespace's name of `role` (for `enter_in_child`, `setns`).
    pub fn namespace(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    pub fn hub(&self) -> String {
        self.namespace("hub")
    }

    /// The tag the namespaces' names begin with.
    pub fn tag(&self) -> &'static str {
        self.tag
    }
}

impl Drop for Bridged {
    fn drop(&mut self) {
        // Deletes the namespaces, newest first: the nodes, then the hub.
        cleanup::undo_owner(self.undo_owner);
    }
}

/// Deletes the namespaces `<tag><pid>-*` of runs whose process is gone (killed before their
/// Drop ran).
fn sweep_stale(tag: &str) {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(tag)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("roamkv: removing network namespace {name}, left by a run that is gone");
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

/// `ip ARGS`.
pub fn ip(args: &[&str]) -> Result<(), Error> {
    let mut all = vec!["ip"];
    all.extend_from_slice(args);
    crate::command::run_command(&all)?;
    Ok(())
}

/// Makes `command` run inside the network namespace `name`: the namespace file is opened now,
/// and the child joins it (setns) between fork and exec.
pub fn enter_in_child(command: &mut Command, name: &str) -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let path = Path::new(NETNS_DIR).join(name);
    let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    // SAFETY: the closure only calls setns(2), which is async-signal-safe, on a descriptor
    // opened before the fork (close-on-exec: it is closed by the exec that follows).
    unsafe {
        command.pre_exec(move || {
            if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// `enter_in_child`, then the child becomes `uid`/`gid` (supplementary groups cleared). For a
/// child that must not run as root: std applies `Command::uid` before `pre_exec` closures, and
/// setns(2) needs the CAP_SYS_ADMIN a setuid drops, so both happen here, in that order.
pub fn enter_in_child_as(
    command: &mut Command,
    name: &str,
    uid: u32,
    gid: u32,
) -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let path = Path::new(NETNS_DIR).join(name);
    let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
    // SAFETY: setns, setgroups, setgid and setuid are async-signal-safe; the descriptor was
    // opened before the fork (close-on-exec).
    unsafe {
        command.pre_exec(move || {
            let failed = libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0;
            if failed {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}
