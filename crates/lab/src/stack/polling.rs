//! Polled I/O (paper 004, section 6.4): whether the lab's device can poll, asked of the kernel
//! (queue/io_poll) and tried with one io_uring IOPOLL write.
use roamkv_testbed::fixture::Fixture;

/// Whether polled I/O can be measured, and why not.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PollingReport {
    pub device: String,
    pub queue_io_poll: Option<String>,
    /// The outcome of one IOPOLL O_DIRECT write, in words.
    pub iopoll_write: String,
    pub supported: bool,
    /// Every block device's io_poll flag (the machine's devices, for the reader).
    pub devices: Vec<(String, String)>,
}

pub(super) fn block_devices_io_poll() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir("/sys/block")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let flag = std::fs::read_to_string(e.path().join("queue/io_poll"))
                        .map_or("?".into(), |s| s.trim().to_string());
                    (name, flag)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Asks the fixture's device whether it polls, and tries one IOPOLL write on it.
pub(super) fn polling_report(fx: &Fixture) -> PollingReport {
    let queue_io_poll =
        std::fs::read_to_string(format!("/sys/block/{}/queue/io_poll", fx.device_name()))
            .ok()
            .map(|s| s.trim().to_string());
    let (iopoll_write, accepted) = match iopoll_write(&fx.mount_dir().join("iopoll.dat")) {
        Ok(()) => ("a polled 4 KiB O_DIRECT write completed".to_string(), true),
        Err(e) => (e, false),
    };
    PollingReport {
        device: fx.device().display().to_string(),
        supported: accepted && queue_io_poll.as_deref() == Some("1"),
        queue_io_poll,
        iopoll_write,
        devices: block_devices_io_poll(),
    }
}

/// One 4 KiB O_DIRECT write through an io_uring made with IORING_SETUP_IOPOLL.
fn iopoll_write(path: &std::path::Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("open O_DIRECT: {e}"))?;
    let mut ring: io_uring::IoUring = io_uring::IoUring::builder()
        .setup_iopoll()
        .build(4)
        .map_err(|e| format!("io_uring_setup with IOPOLL: {e}"))?;
    let layout = std::alloc::Layout::from_size_align(4096, 4096).map_err(|e| e.to_string())?;
    // SAFETY: layout has a non-zero size; the buffer is freed below after the request completed.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    if buffer.is_null() {
        return Err("out of memory".into());
    }
    let write = io_uring::opcode::Write::new(io_uring::types::Fd(file.as_raw_fd()), buffer, 4096)
        .offset(0)
        .build();
    // SAFETY: the buffer and the fd outlive the request: we wait for its completion below.
    let pushed = unsafe { ring.submission().push(&write) }.is_ok();
    let result = if !pushed {
        Err("submission queue full".to_string())
    } else {
        match ring.submit_and_wait(1) {
            Err(e) => Err(format!("io_uring_enter: {e}")),
            Ok(_) => match ring.completion().next() {
                // The kernel accepted the request but polling found no completion: the device
                // has no poll queue to poll.
                None => Err("io_uring_enter returned, but polling found no completion".into()),
                Some(cqe) if cqe.result() == 4096 => Ok(()),
                Some(cqe) if cqe.result() < 0 => Err(format!(
                    "the polled write failed: {}",
                    std::io::Error::from_raw_os_error(-cqe.result())
                )),
                Some(cqe) => Err(format!("short polled write: {} bytes", cqe.result())),
            },
        }
    };
    // SAFETY: allocated above with this layout; the ring no longer references it.
    unsafe { std::alloc::dealloc(buffer, layout) };
    let _ = std::fs::remove_file(path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_reports_an_io_poll_flag() {
        for (name, flag) in block_devices_io_poll() {
            assert!(!name.is_empty());
            assert!(flag == "0" || flag == "1" || flag == "?", "{name}: {flag}");
        }
    }
}
