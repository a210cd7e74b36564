//! The cross-check beside the RocksDB adapter (`--db-bench`): RocksDB's own db_bench with the
//! same volume, threads, buffers, file system and memory cgroup, as a line for the report.

use roamkv_testbed::fixture::FsSpec;

use crate::mobility::engines::Durability;
use crate::mobility::runner;

use super::args::SteadyArgs;
use super::results::SteadyRun;

/// RocksDB's db_bench fillrandom with the volume (keys) and threads of the RocksDB adapter's
/// run just made, in a memory cgroup of the same size, on the same kind of file system: a line
/// for the report with both rates.
pub(super) fn db_bench_beside(
    args: &SteadyArgs,
    fs: FsSpec,
    adapter: &SteadyRun,
    puts: u64,
    seconds: f64,
) -> String {
    let spec = runner::DbBenchSpec {
        fs,
        image_bytes: args.disk_gib << 30,
        num_per_thread: puts / adapter.threads.max(1) as u64,
        threads: adapter.threads,
        value_bytes: args.value_bytes,
        memory_bytes: (args.memory_mib << 20) / 4,
        cgroup_limit_bytes: Some(args.memory_mib << 20),
        sync: args.durability == Durability::Sync,
    };
    match runner::db_bench_crosscheck(spec) {
        Ok((command, ops)) => {
            let adapter_rate = puts as f64 / seconds.max(1e-9);
            format!(
                "db_bench beside {}: {ops:.0} ops/s vs the adapter's {adapter_rate:.0} readings/s, both over {puts} keys from an empty store ({:.2}x); the adapter's measured phase: {:.0} ops/s; {command}",
                adapter.engine,
                ops / adapter_rate.max(1e-9),
                adapter.ops_per_sec
            )
        }
        Err(e) => format!("db_bench beside {}: did not run: {e}", adapter.engine),
    }
}
