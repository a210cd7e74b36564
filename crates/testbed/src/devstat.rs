//! Block device counters from /sys/block/<dev>/stat. They count every request the file system sent
//! to the device (data, journal and metadata alike), so a delta around a workload gives block-layer
//! writes and bytes per operation. Field layout: Documentation/block/stat.rst.
use crate::error::Error;

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct DevStat {
    pub reads: u64,
    pub sectors_read: u64,
    pub writes: u64,
    pub sectors_written: u64,
    pub flushes: u64,
}

/// The stat file counts in 512-byte sectors whatever the device's logical block size.
const STAT_SECTOR_BYTES: u64 = 512;

impl DevStat {
    pub fn read(device_name: &str) -> Result<DevStat, Error> {
        let path = format!("/sys/block/{device_name}/stat");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        DevStat::parse(&text).ok_or_else(|| Error::Parse {
            what: path,
            detail: text.trim().to_string(),
        })
    }

    /// Fields (1-based): 1 reads, 3 sectors read, 5 writes, 7 sectors written, 16 flushes
    /// (flushes exist since kernel 5.5; older kernels report 0).
    pub fn parse(text: &str) -> Option<DevStat> {
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        if fields.len() < 11 {
            return None;
        }
        Some(DevStat {
            reads: fields[0],
            sectors_read: fields[2],
            writes: fields[4],
            sectors_written: fields[6],
            flushes: fields.get(15).copied().unwrap_or(0),
        })
    }

    pub fn delta(&self, earlier: &DevStat) -> DevStat {
        DevStat {
            reads: self.reads.saturating_sub(earlier.reads),
            sectors_read: self.sectors_read.saturating_sub(earlier.sectors_read),
            writes: self.writes.saturating_sub(earlier.writes),
            sectors_written: self.sectors_written.saturating_sub(earlier.sectors_written),
            flushes: self.flushes.saturating_sub(earlier.flushes),
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.sectors_written * STAT_SECTOR_BYTES
    }

    pub fn bytes_read(&self) -> u64 {
        self.sectors_read * STAT_SECTOR_BYTES
    }

    /// Sum of two devices' counters (data device + external journal device).
    pub fn plus(&self, other: &DevStat) -> DevStat {
        DevStat {
            reads: self.reads + other.reads,
            sectors_read: self.sectors_read + other.sectors_read,
            writes: self.writes + other.writes,
            sectors_written: self.sectors_written + other.sectors_written,
            flushes: self.flushes + other.flushes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_kernel_6_stat_line_and_takes_deltas() {
        let before =
            DevStat::parse("  100 0 800 5 20 1 160 9 0 12 14 0 0 0 0 3 1").expect("valid line");
        let after =
            DevStat::parse("  110 0 880 5 27 1 216 9 0 12 14 0 0 0 0 5 1").expect("valid line");
        let d = after.delta(&before);
        assert_eq!(
            (
                d.reads,
                d.sectors_read,
                d.writes,
                d.sectors_written,
                d.flushes
            ),
            (10, 80, 7, 56, 2)
        );
        assert_eq!(d.bytes_written(), 56 * 512);
    }

    #[test]
    fn rejects_garbage() {
        assert!(DevStat::parse("1 2 three").is_none());
        assert!(DevStat::parse("1 2 3").is_none());
    }
}
