//! RocksDB's own db_bench fillrandom, run beside our RocksDB adapter on the same file system: a
//! cross-check that the plain-RocksDB setup is not misconfigured.
use std::process::{Command, Stdio};

use roamkv_testbed::fixture::{Fixture, FsSpec};

use super::cgroup::MemoryCgroup;
use crate::error::{BenchError, Result};

/// How to run RocksDB's own db_bench fillrandom beside our RocksDB adapter.
#[derive(Debug, Clone, Copy)]
pub struct DbBenchSpec {
    pub fs: FsSpec,
    pub image_bytes: u64,
    /// Keys each thread writes.
    pub num_per_thread: u64,
    pub threads: usize,
    pub value_bytes: usize,
    /// The adapter's engine memory (write buffers and block cache are derived as for it).
    pub memory_bytes: u64,
    /// Run inside a memory cgroup of this limit (page cache included), as the adapter's worker.
    pub cgroup_limit_bytes: Option<u64>,
    pub sync: bool,
}

/// The db_bench binary (Debian's rocksdb-tools names it either way).
fn find_db_bench() -> Result<&'static str> {
    ["db_bench", "rocksdb_db_bench"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--help")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok()
        })
        .ok_or_else(|| {
            BenchError::Usage("db_bench not found (Debian package rocksdb-tools)".into())
        })
}

/// RocksDB's own db_bench (Debian's rocksdb-tools, RocksDB 7.8) on the same file system with
/// the same value size and comparable buffers: a cross-check that our plain-RocksDB setup is
/// not misconfigured. Returns (command, ops/s) or why it could not run.
pub fn db_bench_crosscheck(spec: DbBenchSpec) -> Result<(String, f64)> {
    let DbBenchSpec {
        fs,
        image_bytes,
        num_per_thread,
        threads,
        value_bytes,
        memory_bytes,
        cgroup_limit_bytes,
        sync,
    } = spec;
    let binary = find_db_bench()?;
    let fixture = Fixture::create(fs, image_bytes)?;
    let db = fixture.mount_dir().join("dbbench");
    let args = vec![
        "--benchmarks=fillrandom".to_string(),
        format!("--db={}", db.display()),
        format!("--num={num_per_thread}"),
        format!("--value_size={value_bytes}"),
        "--key_size=32".into(),
        format!("--threads={threads}"),
        // Our writers put batches of 16 readings (one WriteBatch each): so does db_bench here.
        "--batch_size=16".into(),
        format!("--sync={}", sync as u8),
        "--compression_type=none".into(),
        format!("--write_buffer_size={}", memory_bytes / 4),
        "--max_write_buffer_number=2".into(),
        format!("--cache_size={}", memory_bytes / 2),
        "--max_background_jobs=2".into(),
        "--bloom_bits=10".into(),
    ];
    let cgroup = cgroup_limit_bytes
        .map(|limit| {
            MemoryCgroup::create(&format!("roamkv-db-bench-{}", std::process::id()), limit)
        })
        .transpose()?;
    let command = match &cgroup {
        Some(c) => format!(
            "{binary} {} (in a {} MiB {} memory group)",
            args.join(" "),
            c.limit_bytes() >> 20,
            c.describe()
        ),
        None => format!("{binary} {}", args.join(" ")),
    };
    // The child joins the group before it execs db_bench, so all of its memory is charged.
    let procs = cgroup
        .as_ref()
        .map(|c| c.procs_path().display().to_string())
        .unwrap_or_else(|| "/dev/null".into());
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$@""#)
        .arg(&procs)
        .arg(binary)
        .args(&args)
        .output()
        .map_err(|e| BenchError::os(format!("running {binary}"), e))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let ops = parse_db_bench_ops(&text).ok_or_else(|| {
        let killed = cgroup.as_ref().is_some_and(|c| c.oom_kills() > 0);
        BenchError::Run(format!(
            "could not read db_bench's result{}: {}",
            if killed {
                " (killed by its memory cgroup)"
            } else {
                ""
            },
            String::from_utf8_lossy(&out.stderr)
        ))
    })?;
    Ok((command, ops))
}

/// Reads "fillrandom : 12.567 micros/op 79255 ops/sec ..." (RocksDB 7.8; older ones end "ops/sec;").
pub fn parse_db_bench_ops(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("fillrandom"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.trim_end_matches(';') == "ops/sec")?;
    words.get(at.checked_sub(1)?)?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn db_bench_lines_parse() {
        let new = "fillrandom   :      12.567 micros/op 79255 ops/sec 0.025 seconds 2000 operations;   97.1 MB/s";
        let old = "fillrandom   :       1.234 micros/op 810372 ops/sec;   89.6 MB/s";
        assert_eq!(super::parse_db_bench_ops(new), Some(79255.0));
        assert_eq!(super::parse_db_bench_ops(old), Some(810372.0));
        assert_eq!(super::parse_db_bench_ops("nothing"), None);
    }
}
