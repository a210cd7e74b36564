//! Network namespaces for benchmarks that need real links on one machine: a child process
//! started inside a namespace (`enter_in_child`). The namespaces, veth pairs, qdiscs and
//! nftables tables themselves are made and removed by the bench that uses them (each undone on
//! every path out).
use crate::error::Error;
use std::path::Path;
use std::process::Command;

/// Where `ip netns add NAME` puts a namespace.
pub const NETNS_DIR: &str = "/run/netns";

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
