//! The slow log device: paper 003's 7200 rpm disk (13.7 ms per 2 KB write, its Table 1), made
//! from a loop device by limiting its write requests per second with the block layer's throttle.
//!
//! Why this and not an emulated-latency device: this kernel has no device mapper (no dm-delay,
//! `/dev/mapper/control` does not open), no null_blk, nbd or ublk, and no modules to load; the
//! cgroup v1 `blkio` controller with `blk-throttle` is built in. A limit set in the *root* blkio
//! cgroup applies to every request sent to that one device, whoever issues it (the database, the
//! journal thread jbd2, writeback kworkers), which is what a slow disk does; other devices are not
//! touched. With N write IOPS, requests are spaced 1/N s apart on average; a 4 KiB write +
//! fdatasync on ext4 (one data write, one flush) then takes about 2/N s. The lab measures the
//! result on the device itself (see `calibrate`) and reports it beside every slow-device row.
//!
//! Where only cgroup v2 exists, `io.max` cannot be set on the root cgroup; the lab then refuses
//! with an error rather than throttle only some writers.
use crate::LabError;
use std::path::{Path, PathBuf};

/// Root-cgroup rule file of the v1 blkio controller: lines of "MAJ:MIN IOPS".
const BLKIO_WRITE_IOPS_RULES: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device";

/// Write requests per second of the slow device by default: a write + flush then costs ~10 ms,
/// in the 8-13 ms per synchronous write of a 7200 rpm disk (checked by `calibrate`).
pub const SLOW_WRITE_IOPS_DEFAULT: u32 = 200;

/// A throttle rule on one block device, removed again on drop (also when a run fails half-way).
/// A rule left behind would outlive the run: loop devices keep their request queue across
/// detach/attach, so the next user of that loop device would be throttled.
pub struct WriteThrottle {
    rules_file: PathBuf,
    device_numbers: String,
    write_iops: u32,
}

impl WriteThrottle {
    /// Limits `device` (a block device node) to `write_iops` write requests per second.
    pub fn apply(device: &Path, write_iops: u32) -> Result<WriteThrottle, LabError> {
        if write_iops == 0 {
            return Err(LabError::Unsupported(
                "the slow device needs at least 1 write request per second".into(),
            ));
        }
        let rules_file = rules_file()?;
        let device_numbers = device_numbers(device)?;
        let throttle = WriteThrottle {
            rules_file,
            device_numbers,
            write_iops,
        };
        throttle.write_rule(write_iops)?;
        // Read back: the kernel silently ignores nothing here, but a stale rule would show up.
        let text = std::fs::read_to_string(&throttle.rules_file)
            .map_err(|e| LabError::io(&throttle.rules_file, e))?;
        let got = parse_rules(&text)
            .into_iter()
            .find(|(d, _)| *d == throttle.device_numbers)
            .map(|(_, iops)| iops);
        if got != Some(u64::from(write_iops)) {
            return Err(LabError::Unsupported(format!(
                "{} reads back {got:?} for {}, expected {write_iops}",
                throttle.rules_file.display(),
                throttle.device_numbers
            )));
        }
        Ok(throttle)
    }

    pub fn write_iops(&self) -> u32 {
        self.write_iops
    }

    /// "cgroup v1 blkio root: write_iops_device 7:3 200", for the report.
    pub fn describe(&self) -> String {
        format!(
            "blk-throttle, root blkio cgroup: {} = \"{} {}\"",
            self.rules_file.display(),
            self.device_numbers,
            self.write_iops
        )
    }

    fn write_rule(&self, write_iops: u32) -> Result<(), LabError> {
        let rule = format!("{} {write_iops}\n", self.device_numbers);
        std::fs::write(&self.rules_file, rule).map_err(|e| LabError::io(&self.rules_file, e))
    }
}

impl Drop for WriteThrottle {
    fn drop(&mut self) {
        // "MAJ:MIN 0" deletes the rule.
        if let Err(e) = self.write_rule(0) {
            eprintln!(
                "roamkv lab: warning: could not remove the write throttle on {}: {e}",
                self.device_numbers
            );
        }
    }
}

fn rules_file() -> Result<PathBuf, LabError> {
    let path = PathBuf::from(BLKIO_WRITE_IOPS_RULES);
    if path.is_file() {
        return Ok(path);
    }
    Err(LabError::Unsupported(format!(
        "no block-layer write throttle: {} is missing (the slow device needs the cgroup v1 blkio \
         controller with blk-throttle; on a cgroup-v2-only system io.max cannot limit the root cgroup)",
        path.display()
    )))
}

/// "MAJ:MIN" of a block device node.
pub fn device_numbers(device: &Path) -> Result<String, LabError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(device).map_err(|e| LabError::io(device, e))?;
    if !meta.file_type().is_block_device() {
        return Err(LabError::Unsupported(format!(
            "{} is not a block device",
            device.display()
        )));
    }
    let rdev = meta.rdev();
    Ok(format!("{}:{}", libc::major(rdev), libc::minor(rdev)))
}

/// Parses the rules file ("7:3 200" per line; blank lines ignored, bad lines skipped).
pub fn parse_rules(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let value = fields.next()?.parse().ok()?;
            let (major, minor) = device.split_once(':')?;
            (major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok())
                .then(|| (device.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_rules_file() {
        assert_eq!(
            parse_rules("7:0 200\n7:12 5\n\ngarbage\n8:x 3\n"),
            vec![("7:0".to_string(), 200), ("7:12".to_string(), 5)]
        );
        assert!(parse_rules("").is_empty());
    }

    #[test]
    fn a_regular_file_is_not_a_block_device() {
        let err = device_numbers(Path::new("/proc/self/status"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a block device"), "{err}");
    }
}
