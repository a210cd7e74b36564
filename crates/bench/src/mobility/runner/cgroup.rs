//! The memory cgroup a measured process runs in (`MemoryCgroup`, cgroup v1 or v2), whose limit
//! covers the page cache as well as the heap, and the check that it does on this kernel.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{BenchError, Result};

/// Where cgroup v1 mounts its memory controller.
const CGROUP_V1_MEMORY: &str = "/sys/fs/cgroup/memory";
/// Where cgroup v2 (the unified hierarchy) is mounted: on its own, or beside v1 (hybrid).
const CGROUP_V2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Which cgroup interface a group speaks: the files differ, the meaning is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    fn limit_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        }
    }
    fn usage_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        }
    }
    fn peak_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.max_usage_in_bytes",
            // Linux 5.19 and later; older kernels lack it (the peak then reads 0).
            CgroupVersion::V2 => "memory.peak",
        }
    }
    /// The file with an "oom_kill N" line.
    fn oom_file(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        }
    }
}

/// A memory cgroup whose limit covers the page cache as well as the heap (v1 or v2), removed
/// when dropped.
pub struct MemoryCgroup {
    path: PathBuf,
    version: CgroupVersion,
}

/// The parent directory for a new memory cgroup: v1's memory controller if mounted, else the
/// v2 root with the memory controller enabled for its children (it is enabled if it can be).
fn memory_cgroup_parent() -> Result<(PathBuf, CgroupVersion)> {
    let v1 = Path::new(CGROUP_V1_MEMORY);
    if v1.join("memory.limit_in_bytes").exists() {
        return Ok((v1.to_path_buf(), CgroupVersion::V1));
    }
    for root in CGROUP_V2_ROOTS.iter().map(Path::new) {
        let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) else {
            continue;
        };
        if !controllers.split_whitespace().any(|c| c == "memory") {
            continue;
        }
        let subtree = root.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree)
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
        if !enabled {
            std::fs::write(&subtree, "+memory")
                .map_err(|e| BenchError::io("enabling the memory controller in", &subtree, e))?;
        }
        return Ok((root.to_path_buf(), CgroupVersion::V2));
    }
    Err(BenchError::Usage(format!(
        "no memory cgroup controller: neither cgroup v1 at {CGROUP_V1_MEMORY} nor cgroup v2 with \
         the memory controller at {}",
        CGROUP_V2_ROOTS.join(" or ")
    )))
}

impl MemoryCgroup {
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemoryCgroup> {
        let (parent, version) = memory_cgroup_parent()?;
        let path = parent.join(name);
        let _ = std::fs::remove_dir(&path);
        std::fs::create_dir(&path).map_err(|e| BenchError::io("creating", &path, e))?;
        let cgroup = MemoryCgroup { path, version };
        cgroup.write(version.limit_file(), &limit_bytes.to_string())?;
        if version == CgroupVersion::V2 {
            // As v1's limit does, make the group reclaim (and finally OOM-kill) rather than swap.
            let _ = cgroup.write("memory.swap.max", "0");
        }
        Ok(cgroup)
    }

    /// "cgroup v1" or "cgroup v2", for reports.
    pub fn describe(&self) -> &'static str {
        match self.version {
            CgroupVersion::V1 => "cgroup v1",
            CgroupVersion::V2 => "cgroup v2",
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.path.join(file);
        std::fs::write(&path, value)
            .map_err(|e| BenchError::io(format!("writing {value} to"), path, e))
    }

    fn read_u64(&self, file: &str) -> u64 {
        std::fs::read_to_string(self.path.join(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// The file a process writes its pid to to join the group.
    pub fn procs_path(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    pub fn max_usage_bytes(&self) -> u64 {
        self.read_u64(self.version.peak_file())
    }

    /// The file holding the group's current usage (heap + page cache).
    pub fn usage_path(&self) -> PathBuf {
        self.path.join(self.version.usage_file())
    }

    /// Processes of this group the kernel killed for lack of memory (0 on kernels that do not
    /// report it).
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.path.join(self.version.oom_file()))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    pub fn limit_bytes(&self) -> u64 {
        self.read_u64(self.version.limit_file())
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if self.version == CgroupVersion::V1 {
            // Charged page cache may keep the group busy for a moment: move it to the parent.
            let _ = std::fs::write(self.path.join("memory.force_empty"), "0");
        }
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Writes 4x the limit through the page cache inside a cgroup, and reports the cgroup's peak
/// usage: if it stayed at or under the limit, the cgroup caps the page cache.
pub fn check_cgroup_caps_page_cache(dir: &Path, limit_bytes: u64) -> Result<serde_json::Value> {
    let cgroup = MemoryCgroup::create("roamkv-bench-cache-check", limit_bytes)?;
    let file = dir.join("cgroup-check.bin");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read go; dd if=/dev/zero of='{}' bs=1M count={} status=none",
            file.display(),
            4 * (limit_bytes >> 20)
        ))
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::os("spawning dd", e))?;
    cgroup.add(child.id())?;
    child
        .stdin
        .take()
        .map(|mut s| s.write_all(b"go\n"))
        .transpose()
        .map_err(|e| BenchError::os("starting dd", e))?;
    let status = child
        .wait()
        .map_err(|e| BenchError::os("waiting for dd", e))?;
    let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    let peak = cgroup.max_usage_bytes();
    Ok(serde_json::json!({
        "limit_bytes": cgroup.limit_bytes(),
        "bytes_written_through_page_cache": written,
        "cgroup_peak_bytes": peak,
        "caps_page_cache": status.success() && written >= 4 * limit_bytes && peak <= cgroup.limit_bytes(),
    }))
}
