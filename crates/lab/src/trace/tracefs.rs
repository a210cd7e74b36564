//! tracefs setup: find or mount tracefs, configure a private instance (clock, buffer, block
//! events filtered to the traced devices), and drain its trace_pipe in a thread.

use crate::LabError;
use roamkv_testbed::command::run_command;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const TRACEFS_ROOT: &str = "/sys/kernel/tracing";
/// Per-CPU ring buffer of the private instance. The reader thread drains it continuously; the
/// size only has to absorb bursts between two reads.
const TRACE_BUFFER_KIB_PER_CPU: u32 = 16 * 1024;
/// The two block-layer events the tracer reads.
const BLOCK_EVENTS: [&str; 2] = ["block_rq_issue", "block_rq_complete"];

pub(super) fn ensure_tracefs() -> Result<PathBuf, LabError> {
    let root = PathBuf::from(TRACEFS_ROOT);
    if root.join("instances").is_dir() {
        return Ok(root);
    }
    let _ = run_command(&["mount", "-t", "tracefs", "nodev", TRACEFS_ROOT]);
    if root.join("instances").is_dir() {
        return Ok(root);
    }
    let debug_root = PathBuf::from("/sys/kernel/debug/tracing");
    if debug_root.join("instances").is_dir() {
        return Ok(debug_root);
    }
    Err(LabError::TracefsUnavailable(format!(
        "{TRACEFS_ROOT} is not mounted and `mount -t tracefs nodev {TRACEFS_ROOT}` failed"
    )))
}

/// True when tracefs with block events is usable (for tests that must skip otherwise).
pub fn tracefs_available() -> bool {
    ensure_tracefs().is_ok_and(|root| root.join("events/block/block_rq_issue").is_dir())
}

pub(super) fn write_tracefs(path: &Path, value: &str) -> Result<(), LabError> {
    fs::write(path, value).map_err(|e| LabError::io(path, e))
}

pub(super) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets up a fresh instance, tracing still off: monotonic clock (the same clock as
/// `monotonic_ns`), a large buffer, block request events filtered to the given devices.
pub(super) fn configure_instance(instance: &Path, devices: &[(u32, u32)]) -> Result<(), LabError> {
    let dev_t = |(major, minor): (u32, u32)| (u64::from(major) << 20) | u64::from(minor);
    let filter = devices
        .iter()
        .map(|d| format!("dev == {}", dev_t(*d)))
        .collect::<Vec<_>>()
        .join(" || ");
    write_tracefs(&instance.join("tracing_on"), "0")?;
    write_tracefs(&instance.join("trace_clock"), "mono")?;
    write_tracefs(
        &instance.join("buffer_size_kb"),
        &TRACE_BUFFER_KIB_PER_CPU.to_string(),
    )?;
    for event in BLOCK_EVENTS {
        let dir = instance.join("events/block").join(event);
        write_tracefs(&dir.join("filter"), &filter)?;
        write_tracefs(&dir.join("enable"), "1")?;
    }
    Ok(())
}

/// Turns an instance's tracing and events off (best effort: used on the way out).
pub(super) fn disable_instance(instance: &Path) {
    let _ = fs::write(instance.join("tracing_on"), "0");
    for event in BLOCK_EVENTS {
        let _ = fs::write(
            instance.join("events/block").join(event).join("enable"),
            "0",
        );
    }
}

/// Opens the instance's trace_pipe without blocking, so the reader can notice a stop request.
pub(super) fn open_pipe(instance: &Path) -> Result<(fs::File, PathBuf), LabError> {
    use std::os::unix::fs::OpenOptionsExt;
    let pipe_path = instance.join("trace_pipe");
    let pipe = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&pipe_path)
        .map_err(|e| LabError::io(&pipe_path, e))?;
    Ok((pipe, pipe_path))
}

/// Drains trace_pipe until asked to stop and the pipe is empty.
pub(super) fn read_pipe(
    mut pipe: fs::File,
    path: PathBuf,
    stop: Arc<AtomicBool>,
) -> Result<Vec<String>, LabError> {
    let mut lines = Vec::new();
    let mut partial = String::new();
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        match pipe.read(&mut buffer) {
            Ok(0) => {
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(n) => {
                partial.push_str(&String::from_utf8_lossy(&buffer[..n]));
                while let Some(i) = partial.find('\n') {
                    lines.push(partial[..i].to_string());
                    partial.drain(..=i);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stopping {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LabError::io(&path, e)),
        }
    }
    if !partial.is_empty() {
        lines.push(partial);
    }
    Ok(lines)
}
