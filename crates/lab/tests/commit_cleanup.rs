//! The commit lab's guards clean up on every path out: the slow device's write throttle is
//! removed when its guard drops, and a private PostgreSQL cluster is stopped and its directories
//! removed when it drops, also when initdb fails half-way. Needs root, loop devices and Debian's
//! postgresql; without them `roamkv_testbed::prerequisite` decides: fail, or skip when asked.
use roamkv_lab::commit::postgres::{Cluster, WalSettings};
use roamkv_lab::commit::throttle::{WriteThrottle, device_numbers, parse_rules};
use roamkv_testbed::fixture::{Fixture, FsSpec};
use roamkv_testbed::prerequisite::{require_root, require_tool, unmet};
use std::path::Path;

fn missing(tools: &[(&str, &str)]) -> Option<String> {
    if let Err(e) = require_root() {
        return Some(e.to_string());
    }
    tools
        .iter()
        .find_map(|(t, p)| require_tool(t, p).err().map(|e| e.to_string()))
}

const RULES: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device";

fn rule_for(device: &Path) -> Option<u64> {
    let numbers = device_numbers(device).ok()?;
    let text = std::fs::read_to_string(RULES).ok()?;
    parse_rules(&text)
        .into_iter()
        .find(|(d, _)| *d == numbers)
        .map(|(_, v)| v)
}

#[test]
fn the_write_throttle_slows_the_device_and_is_removed_on_drop() {
    if let Some(reason) = missing(&[("losetup", "mount"), ("mke2fs", "e2fsprogs")]) {
        unmet(
            "the_write_throttle_slows_the_device_and_is_removed_on_drop",
            &reason,
        );
        return;
    }
    let fixture = Fixture::create(FsSpec::Ext4, 64 << 20).expect("loop ext4");
    {
        let throttle = WriteThrottle::apply(fixture.device(), 20).expect("throttle");
        assert_eq!(rule_for(fixture.device()), Some(20));
        assert!(throttle.describe().contains("20"));
        // 20 write requests/s: each throttled request waits 50 ms on average once the first
        // slice's burst is spent; an unthrottled 4 KiB write + fdatasync here takes 0.2-3 ms.
        let ms = roamkv_lab::commit::sessions::sync_write_cost(fixture.mount_dir(), 10, 5)
            .expect("calibrate")
            .mean_ms;
        assert!(ms > 10.0, "throttled sync write took only {ms:.2} ms");
    }
    assert_eq!(rule_for(fixture.device()), None, "rule left behind");
}

#[test]
fn a_cluster_runs_sessions_then_stops_and_removes_itself() {
    if let Some(reason) = missing(&[("pgbench", "postgresql"), ("psql", "postgresql-client")]) {
        unmet(
            "a_cluster_runs_sessions_then_stops_and_removes_itself",
            &reason,
        );
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let wal = tempfile::tempdir().expect("temp dir");
    let scripts = tempfile::tempdir().expect("temp dir");
    let cluster =
        Cluster::create(data.path(), wal.path(), &WalSettings::default()).expect("cluster");
    let pid = postmaster_pid(cluster.data_dir()).expect("postmaster.pid");
    assert!(alive(pid));
    // pg_wal really is on the second directory.
    assert!(
        wal.path()
            .join("pg_wal")
            .read_dir()
            .expect("pg_wal")
            .count()
            > 0
    );
    cluster.prepare_run().expect("prepare");
    let before = cluster.wal_stats().expect("pg_stat_wal");
    let run = cluster
        .run_sessions(scripts.path(), 2, 20, 512, 1)
        .expect("pgbench");
    assert_eq!(run.report.transactions_processed, 40);
    assert!(run.report.commit_latency_ms().is_some());
    let after = cluster.wal_stats().expect("pg_stat_wal");
    assert!(after.wal_sync > before.wal_sync, "{before:?} -> {after:?}");
    let rows = cluster
        .psql(&[
            "-c",
            "SELECT count(*) FROM commit_rows WHERE length(payload) = 512",
        ])
        .expect("count");
    assert_eq!(rows.trim(), "40");
    let data_dir = cluster.data_dir().to_path_buf();
    drop(cluster);
    assert!(!alive(pid), "postmaster {pid} still running");
    assert!(!data_dir.exists() && !wal.path().join("pg_wal").exists());
}

#[test]
fn a_cluster_that_fails_to_initialise_leaves_nothing() {
    if let Some(reason) = missing(&[("pgbench", "postgresql"), ("psql", "postgresql-client")]) {
        unmet("a_cluster_that_fails_to_initialise_leaves_nothing", &reason);
        return;
    }
    let data = tempfile::tempdir().expect("temp dir");
    let wal = tempfile::tempdir().expect("temp dir");
    let bad = WalSettings {
        sync_method: "o_direct".into(),
        ..WalSettings::default()
    };
    let err = Cluster::create(data.path(), wal.path(), &bad)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("open_datasync"), "{err}");
    assert!(!data.path().join("pgdata").exists());
    // initdb refuses a data directory that is not empty: the half-made cluster is removed.
    std::fs::create_dir(data.path().join("pgdata")).expect("mkdir");
    std::fs::write(data.path().join("pgdata/stray"), b"x").expect("stray file");
    assert!(Cluster::create(data.path(), wal.path(), &WalSettings::default()).is_err());
    assert!(!data.path().join("pgdata").exists());
    assert!(!wal.path().join("pg_wal").exists());
    assert!(!data.path().join("pgsocket").exists());
}

fn postmaster_pid(data_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether the process runs. A zombie is not running: the postmaster is a daemon whose parent
/// is init, and an init that reaps slowly (as in this VM) leaves it a zombie for a while.
fn alive(pid: i32) -> bool {
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the parenthesised command name.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
        });
    matches!(state.as_deref(), Some(s) if s != "Z" && s != "X")
}
