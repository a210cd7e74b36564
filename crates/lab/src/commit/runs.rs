//! One engine's runs on one log device, a `Row` per workload x session count: PostgreSQL through
//! its cluster (pgbench, pg_stat_wal), SQLite and roamkv through the lab's own sessions; the slow
//! device's throttle on only while the sessions run.
use super::model::{Device, Engine, Plan, Row};
use super::postgres::Cluster;
use super::sessions;
use super::throttle::WriteThrottle;
use crate::LabError;
use roamkv_testbed::fixture::{Fixture, interrupted};

/// The slow device's throttle, when `device` is the slow one.
pub(super) fn throttle_for(
    fixture: &Fixture,
    device: Device,
    plan: &Plan,
) -> Result<Option<WriteThrottle>, LabError> {
    match device {
        Device::Fast => Ok(None),
        Device::Slow => WriteThrottle::apply(fixture.device(), plan.slow_write_iops).map(Some),
    }
}

/// Runs every workload x session count of one engine on one log device, pushing a row per run.
/// PostgreSQL keeps one cluster for all of them; SQLite and roamkv start from an empty directory.
pub(super) fn run_engine(
    plan: &Plan,
    engine: Engine,
    device: Device,
    log_fixture: &Fixture,
    data_fixture: Option<&Fixture>,
    bar: &indicatif::ProgressBar,
    rows: &mut Vec<Row>,
) -> Result<(), LabError> {
    bar.set_message(format!(
        "{} on the {} device: setting up",
        engine.name(),
        device.name()
    ));
    let cluster = match engine {
        Engine::Postgresql => {
            let data = data_fixture
                .ok_or_else(|| LabError::Unsupported("no data device for PostgreSQL".into()))?;
            Some(Cluster::create(
                data.mount_dir(),
                log_fixture.mount_dir(),
                &plan.postgres,
            )?)
        }
        _ => None,
    };
    for &workload in &plan.workloads {
        for &sessions in &plan.sessions {
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            bar.set_message(format!(
                "{} on the {} device: {sessions} sessions x {} tx x {} B",
                engine.name(),
                device.name(),
                workload.0,
                workload.1
            ));
            let row = match &cluster {
                Some(c) => run_postgres(c, plan, device, log_fixture, sessions, workload),
                None => run_embedded(plan, engine, device, log_fixture, sessions, workload),
            };
            let row = match row {
                Ok(row) => row,
                Err(LabError::Interrupted) => return Err(LabError::Interrupted),
                Err(e) => {
                    roamkv_testbed::report::say(
                        bar,
                        format!(
                            "{} {} {sessions} sessions: {e}",
                            engine.name(),
                            device.name()
                        ),
                    );
                    Row::failed(engine, device, sessions, workload, e.to_string())
                }
            };
            rows.push(row);
            bar.inc(1);
        }
    }
    drop(cluster);
    Ok(())
}

fn run_postgres(
    cluster: &Cluster,
    plan: &Plan,
    device: Device,
    log_fixture: &Fixture,
    sessions: u32,
    (transactions, row_bytes): (u64, usize),
) -> Result<Row, LabError> {
    cluster.prepare_run()?;
    log_fixture.quiesce()?;
    let before = cluster.wal_stats()?;
    let script_dir = tempfile::Builder::new()
        .prefix("roamkv-lab-pgbench-")
        .tempdir()
        .map_err(|e| LabError::io("temp dir", e))?;
    let throttle = throttle_for(log_fixture, device, plan)?;
    let run = cluster.run_sessions(
        script_dir.path(),
        sessions,
        transactions,
        row_bytes,
        plan.think_ms,
    )?;
    drop(throttle);
    let after = cluster.wal_stats()?;
    let syncs = after.wal_sync.saturating_sub(before.wal_sync);
    let sync_ms = after.wal_sync_time_ms - before.wal_sync_time_ms;
    let write_ms = after.wal_write_time_ms - before.wal_write_time_ms;
    let total_tx = u64::from(sessions) * transactions;
    // pgbench's tps excludes connection set-up, as the sessions' own clocks do for the others.
    let total_seconds = total_tx as f64 / run.report.tps;
    let commit_ms = run.report.commit_latency_ms().unwrap_or(f64::NAN);
    Ok(Row {
        engine: Engine::Postgresql.name(),
        device: device.name(),
        sessions,
        transactions,
        row_bytes,
        total_seconds,
        commit_wait_share: run.samples.share(),
        commit_wait_source: "pg_stat_activity: client backends in wait event WALWrite or WALSync, sampled every 10 ms",
        commit_wait_share_client: commit_ms * transactions as f64 / 1000.0 / total_seconds,
        mean_group_size: ratio(total_tx, syncs),
        log_syncs: syncs,
        transactions_per_second: run.report.tps,
        commit_latency_ms_mean: commit_ms,
        log_sync_ms_mean: (syncs > 0).then(|| sync_ms / syncs as f64),
        lock_wait_share: None,
        detail: serde_json::json!({
            "pg_stat_wal_delta": {
                "wal_records": after.wal_records.saturating_sub(before.wal_records),
                "wal_bytes": after.wal_bytes.saturating_sub(before.wal_bytes),
                "wal_write": after.wal_write.saturating_sub(before.wal_write),
                "wal_sync": syncs,
                "wal_write_time_ms": write_ms,
                "wal_sync_time_ms": sync_ms,
            },
            "wal_io_share_of_wall_time": (write_ms + sync_ms) / 1000.0 / total_seconds,
            "pgbench": run.report,
            "wait_samples": run.samples,
            "wall_seconds_incl_connect": run.wall_seconds,
            "settings": plan.postgres,
        }),
        error: None,
    })
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

fn run_embedded(
    plan: &Plan,
    engine: Engine,
    device: Device,
    log_fixture: &Fixture,
    sessions: u32,
    (transactions, row_bytes): (u64, usize),
) -> Result<Row, LabError> {
    let dir = log_fixture.mount_dir().join(format!(
        "{}-{sessions}-{transactions}-{row_bytes}",
        engine.name()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| LabError::io(&dir, e))?;
    let total_tx = u64::from(sessions) * transactions;
    let throttle = || throttle_for(log_fixture, device, plan);
    let think = std::time::Duration::from_millis(plan.think_ms);
    let (totals, syncs, source, detail) = match engine {
        Engine::Sqlite => sqlite_run(
            &dir,
            log_fixture,
            &throttle,
            sessions,
            transactions,
            row_bytes,
            think,
        )?,
        Engine::Roamkv => roamkv_run(
            &dir,
            log_fixture,
            &throttle,
            sessions,
            transactions,
            row_bytes,
            think,
        )?,
        Engine::Postgresql => {
            return Err(LabError::Unsupported(
                "PostgreSQL runs through its cluster".into(),
            ));
        }
    };
    let client_share = totals.commit_seconds_sum / totals.session_seconds_sum;
    Ok(Row {
        engine: engine.name(),
        device: device.name(),
        sessions,
        transactions,
        row_bytes,
        total_seconds: totals.total_seconds,
        commit_wait_share: client_share,
        commit_wait_source: source,
        commit_wait_share_client: client_share,
        mean_group_size: ratio(total_tx, syncs),
        log_syncs: syncs,
        transactions_per_second: total_tx as f64 / totals.total_seconds,
        commit_latency_ms_mean: totals.commit_latency_ms_mean,
        log_sync_ms_mean: None,
        lock_wait_share: (engine == Engine::Sqlite)
            .then(|| totals.lock_wait_seconds_sum / totals.session_seconds_sum),
        detail,
        error: None,
    })
}

/// What one embedded engine's sessions measured: their totals, the log syncs they made, where
/// the commit-wait share comes from, and the engine's own detail.
type EmbeddedRun = (
    sessions::SessionTotals,
    u64,
    &'static str,
    serde_json::Value,
);

/// The log device's throttle (none on the fast device), held while it exists.
type ThrottleOn<'a> = dyn Fn() -> Result<Option<WriteThrottle>, LabError> + 'a;

/// SQLite's sessions in WAL mode, synchronous=full, throttled while they run.
fn sqlite_run(
    dir: &std::path::Path,
    log_fixture: &Fixture,
    throttle: &ThrottleOn<'_>,
    sessions: u32,
    transactions: u64,
    row_bytes: usize,
    think: std::time::Duration,
) -> Result<EmbeddedRun, LabError> {
    let path = sessions::sqlite_prepare(dir)?;
    log_fixture.quiesce()?;
    let before = crate::sqlite::vfs::SyncCounts::read();
    let throttle = throttle()?;
    let totals = sessions::sqlite_sessions(&path, sessions, transactions, row_bytes, think)?;
    drop(throttle);
    let syncs = crate::sqlite::vfs::SyncCounts::read().delta(&before);
    let count = syncs.delegated_syncs + syncs.fsync_calls;
    Ok((
        totals,
        count,
        "client: time inside COMMIT (WAL append + fdatasync) / session time",
        serde_json::json!({"sync_calls": syncs, "journal_mode": "wal", "synchronous": "full"}),
    ))
}

/// roamkv's sessions at sync durability; Engine::open (segment preallocation) happens before the
/// throttle goes on.
fn roamkv_run(
    dir: &std::path::Path,
    log_fixture: &Fixture,
    throttle: &ThrottleOn<'_>,
    sessions: u32,
    transactions: u64,
    row_bytes: usize,
    think: std::time::Duration,
) -> Result<EmbeddedRun, LabError> {
    log_fixture.quiesce()?;
    let throttle_slot = std::cell::RefCell::new(None);
    let shape = sessions::SessionShape {
        sessions,
        transactions,
        row_bytes,
        think,
    };
    let result = sessions::roamkv_sessions_with(dir, &shape, &|| {
        *throttle_slot.borrow_mut() = throttle()?;
        Ok(())
    });
    drop(throttle_slot);
    let (totals, counters) = result?;
    Ok((
        totals,
        counters.group_commits,
        "client: time inside put_batch (append + group fdatasync) / session time",
        serde_json::json!({"engine_stats_delta": counters, "durability": "sync"}),
    ))
}
