//! What ran where: the machine header every report starts with (CPU, cores, kernel, memory,
//! commit, build profile, date), as db_bench prints one before its numbers.

#[derive(serde::Serialize, Clone, Debug)]
pub struct MachineHeader {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub memory_bytes: u64,
    pub git_sha: String,
    pub build_profile: String,
    pub date_utc: String,
}

impl MachineHeader {
    pub fn collect() -> MachineHeader {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        // The commit this binary was built from (build.rs), not whatever its source tree holds now.
        let git_sha = env!("ROAMKV_GIT_SHA").to_string();
        MachineHeader {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            memory_bytes,
            git_sha,
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
            date_utc: now_utc(),
        }
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec!["cpu".into(), self.cpu.clone()],
            vec!["cores".into(), self.cores.to_string()],
            vec!["kernel".into(), self.kernel.clone()],
            vec![
                "memory".into(),
                format!("{:.1} GiB", self.memory_bytes as f64 / (1u64 << 30) as f64),
            ],
            vec!["git".into(), self.git_sha.clone()],
            vec!["build".into(), self.build_profile.clone()],
            vec!["date (UTC)".into(), self.date_utc.clone()],
        ]
    }
}

/// "2026-11-22T09:30:35Z" from the system clock (civil-from-days, proleptic Gregorian).
pub fn now_utc() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_format() {
        let d = now_utc();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
