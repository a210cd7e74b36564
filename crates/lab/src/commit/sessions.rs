//! Concurrent sessions of single-row insert + commit transactions against SQLite and roamkv,
//! one thread per session, all released together. Each session times its own commit calls, so
//! the commit-wait share is Σ commit time / Σ session time, as paper 003's Table 3 sums its
//! sessions' waits and run times.
use crate::LabError;
use roamkv_testbed::fixture::interrupted;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// What every session of one run did, summed.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SessionTotals {
    /// From the common start to the last session's end.
    pub total_seconds: f64,
    /// Σ over sessions of their own run time.
    pub session_seconds_sum: f64,
    /// Σ over sessions of the time spent in the commit call.
    pub commit_seconds_sum: f64,
    /// Σ over sessions of the time spent waiting for the write lock (SQLite: BEGIN IMMEDIATE).
    pub lock_wait_seconds_sum: f64,
    pub transactions: u64,
    /// Mean commit call latency over all transactions (ms).
    pub commit_latency_ms_mean: f64,
}

/// One session's clock readings.
#[derive(Default)]
struct SessionClock {
    seconds: f64,
    commit: Duration,
    lock_wait: Duration,
    transactions: u64,
}

/// Runs `sessions` threads; each calls `session(index)` after a common barrier and returns its
/// clock. The first error (or an interruption) fails the run.
fn run_threads<F>(sessions: u32, session: F) -> Result<SessionTotals, LabError>
where
    F: Fn(u32, &Barrier) -> Result<SessionClock, LabError> + Sync,
{
    let barrier = Arc::new(Barrier::new(sessions as usize + 1));
    let (clocks, total) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..sessions)
            .map(|s| {
                let barrier = barrier.clone();
                let session = &session;
                scope.spawn(move || session(s, &barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let clocks: Vec<Result<SessionClock, LabError>> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(LabError::Unsupported("a session thread panicked".into()))
                })
            })
            .collect();
        (clocks, start.elapsed())
    });
    let mut totals = SessionTotals {
        total_seconds: total.as_secs_f64(),
        ..SessionTotals::default()
    };
    for clock in clocks {
        let clock = clock?;
        totals.session_seconds_sum += clock.seconds;
        totals.commit_seconds_sum += clock.commit.as_secs_f64();
        totals.lock_wait_seconds_sum += clock.lock_wait.as_secs_f64();
        totals.transactions += clock.transactions;
    }
    if totals.transactions > 0 {
        totals.commit_latency_ms_mean =
            totals.commit_seconds_sum * 1000.0 / totals.transactions as f64;
    }
    Ok(totals)
}

fn sqlite_err(e: rusqlite::Error) -> LabError {
    LabError::Unsupported(format!("sqlite: {e}"))
}

/// The payload of one row: `row_bytes` printable bytes.
fn row(row_bytes: usize) -> String {
    "x".repeat(row_bytes)
}

/// How long a SQLite session waits for the write lock before it gives up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(600);

/// Creates `dir/commit.db` in WAL mode, synchronous FULL, with the lab's table.
pub fn sqlite_prepare(dir: &Path) -> Result<std::path::PathBuf, LabError> {
    let path = dir.join("commit.db");
    let conn = sqlite_open(&path)?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS commit_rows (session INTEGER, payload TEXT)")
        .map_err(sqlite_err)?;
    Ok(path)
}

fn sqlite_open(path: &Path) -> Result<rusqlite::Connection, LabError> {
    use crate::sqlite::config::{JournalMode, SyncCall, Synchronous};
    let conn = crate::sqlite::workload::open(
        path,
        crate::sqlite::workload::DbConfig {
            journal_mode: JournalMode::Wal,
            synchronous: Synchronous::Full,
            sync_call: SyncCall::Fdatasync,
        },
    )
    .map_err(|e| LabError::Unsupported(format!("sqlite: {e}")))?;
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT).map_err(sqlite_err)?;
    Ok(conn)
}

/// One connection per session; each transaction is BEGIN IMMEDIATE (takes the write lock: the
/// wait for it is counted apart), INSERT, COMMIT (the WAL append + fdatasync: the commit wait).
/// Before each transaction the session sleeps `think` (work outside the commit; it counts in the
/// session's time, not in its commit wait).
pub fn sqlite_sessions(
    path: &Path,
    sessions: u32,
    transactions: u64,
    row_bytes: usize,
    think: Duration,
) -> Result<SessionTotals, LabError> {
    let payload = row(row_bytes);
    run_threads(sessions, |s, barrier| {
        let opened = sqlite_open(path);
        barrier.wait();
        let conn = opened?;
        let err = sqlite_err;
        let mut insert = conn
            .prepare("INSERT INTO commit_rows (session, payload) VALUES (?1, ?2)")
            .map_err(err)?;
        let mut clock = SessionClock::default();
        let start = Instant::now();
        for _ in 0..transactions {
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            think_outside_the_commit(think);
            let t0 = Instant::now();
            conn.execute_batch("BEGIN IMMEDIATE").map_err(err)?;
            clock.lock_wait += t0.elapsed();
            insert.execute(rusqlite::params![s, payload]).map_err(err)?;
            let t1 = Instant::now();
            conn.execute_batch("COMMIT").map_err(err)?;
            clock.commit += t1.elapsed();
            clock.transactions += 1;
        }
        clock.seconds = start.elapsed().as_secs_f64();
        Ok(clock)
    })
}

/// Paper 003's sessions did more than commit; this stands for that work. A sleep, not a busy
/// loop: on a two-core machine busy sessions would compete with the log writer for the CPU,
/// which the paper's sessions (on their own clients) did not.
fn think_outside_the_commit(think: Duration) {
    if !think.is_zero() {
        std::thread::sleep(think);
    }
}

/// The sessions of one run: how many, transactions per session, row size, think time.
#[derive(Clone, Copy, Debug)]
pub struct SessionShape {
    pub sessions: u32,
    pub transactions: u64,
    pub row_bytes: usize,
    /// Slept before each transaction (work outside the commit).
    pub think: Duration,
}

/// True when this build can run roamkv (the crate feature `engine`).
pub const ROAMKV_AVAILABLE: bool = cfg!(feature = "engine");

/// roamkv's own counters around a run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RoamkvCounters {
    pub group_commits: u64,
    pub fdatasyncs: u64,
}

#[cfg(not(feature = "engine"))]
pub fn roamkv_sessions_with(
    _dir: &Path,
    _shape: &SessionShape,
    _before_run: &dyn Fn() -> Result<(), LabError>,
) -> Result<(SessionTotals, RoamkvCounters), LabError> {
    Err(LabError::Unsupported(
        "this build has no roamkv engine (build with the crate feature `engine`, as the roamkv CLI does)"
            .into(),
    ))
}

/// One writer thread per session, each put_batch of one record a transaction (durability sync:
/// it returns after its group's fdatasync). Group size = transactions / group commits.
/// `before_run` is called after the engine opened (and preallocated its log) and before the
/// sessions start: the slow device's throttle goes on there.
#[cfg(feature = "engine")]
pub fn roamkv_sessions_with(
    dir: &Path,
    shape: &SessionShape,
    before_run: &dyn Fn() -> Result<(), LabError>,
) -> Result<(SessionTotals, RoamkvCounters), LabError> {
    use roamkv_engine::{Durability, Engine, Options, Record};
    let engine_err = |e: roamkv_engine::Error| LabError::Unsupported(format!("roamkv engine: {e}"));
    let options = Options {
        durability: Durability::Sync,
        // The run measures the commit log only: no device reaches its management time (no
        // migration to the LSM tier runs meanwhile).
        management_time_ms: 24 * 3_600_000,
        // A small preallocated segment: its one-time zero fill is not part of the run, but it is
        // written on the log device, and on the slow one every MiB costs.
        segment_bytes: 8 << 20,
        ..Options::default()
    };
    let engine = Engine::open(dir, options).map_err(engine_err)?;
    before_run()?;
    let before = engine.stats();
    let SessionShape {
        sessions,
        transactions,
        row_bytes,
        think,
    } = *shape;
    let payload = row(row_bytes).into_bytes();
    let totals = run_threads(sessions, |s, barrier| {
        let device = format!("session-{s}");
        barrier.wait();
        let mut clock = SessionClock::default();
        let start = Instant::now();
        for i in 0..transactions {
            if interrupted() {
                return Err(LabError::Interrupted);
            }
            think_outside_the_commit(think);
            let record = Record {
                device: &device,
                sensor: "row",
                ts_ns: i as i64,
                value: &payload,
            };
            let t0 = Instant::now();
            engine.put_batch(&[record]).map_err(engine_err)?;
            clock.commit += t0.elapsed();
            clock.transactions += 1;
        }
        clock.seconds = start.elapsed().as_secs_f64();
        Ok(clock)
    });
    let after = engine.stats();
    engine.close().map_err(engine_err)?;
    let counters = RoamkvCounters {
        group_commits: after.group_commits.saturating_sub(before.group_commits),
        fdatasyncs: after.fdatasyncs.saturating_sub(before.fdatasyncs),
    };
    Ok((totals?, counters))
}

/// What a 4 KiB pwrite + fdatasync costs on a device, in ms.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct SyncWriteCost {
    pub median_ms: f64,
    /// Mean over the timed calls: on the throttled device the distribution is bimodal (requests
    /// inside the current time slice's budget pass at once, the next one waits for the slice), so
    /// the mean is the cost of a steady stream of synchronous writes.
    pub mean_ms: f64,
}

/// Latency of `samples` 4 KiB pwrite + fdatasync calls on one file in `dir`, after
/// `warmup` untimed ones: what a synchronous log write costs on that device in a steady stream
/// (the number paper 003's Table 1 gives per device). The warm-up matters on the throttled
/// device: blk-throttle lets a burst of one time slice's budget (about write_iops / 10 requests)
/// through at full speed before it starts spacing requests.
pub fn sync_write_cost(
    dir: &Path,
    warmup: usize,
    samples: usize,
) -> Result<SyncWriteCost, LabError> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("calibrate.dat");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| LabError::io(&path, e))?;
    let block = vec![0x5Au8; 4096];
    // Allocate first, so the samples overwrite (no block allocation in the timed calls).
    for i in 0..samples as u64 {
        file.write_all_at(&block, i * 4096)
            .map_err(|e| LabError::io(&path, e))?;
    }
    file.sync_all().map_err(|e| LabError::io(&path, e))?;
    let mut ms = Vec::with_capacity(samples);
    for i in 0..(warmup + samples) as u64 {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        let t0 = Instant::now();
        file.write_all_at(&block, (i % samples as u64) * 4096)
            .map_err(|e| LabError::io(&path, e))?;
        file.sync_data().map_err(|e| LabError::io(&path, e))?;
        if i >= warmup as u64 {
            ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    drop(file);
    std::fs::remove_file(&path).map_err(|e| LabError::io(&path, e))?;
    let mean_ms = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    Ok(SyncWriteCost {
        median_ms: roamkv_testbed::stats::median(&mut ms),
        mean_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_sessions_commit_every_row() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = sqlite_prepare(dir.path()).expect("prepare");
        let totals = sqlite_sessions(&path, 3, 20, 16, Duration::ZERO).expect("run");
        assert_eq!(totals.transactions, 60);
        assert!(totals.commit_seconds_sum > 0.0);
        assert!(totals.session_seconds_sum >= totals.commit_seconds_sum);
        let conn = rusqlite::Connection::open(&path).expect("open");
        let rows: i64 = conn
            .query_row(
                "SELECT count(*) FROM commit_rows WHERE length(payload) = 16",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(rows, 60);
    }

    /// Think time counts in the session's time and not in its commit wait: 20 transactions
    /// with 5 ms of think each take at least 100 ms per session, and the commit share falls.
    #[test]
    fn think_time_is_outside_the_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = sqlite_prepare(dir.path()).expect("prepare");
        let think = Duration::from_millis(5);
        let totals = sqlite_sessions(&path, 2, 20, 16, think).expect("run");
        assert_eq!(totals.transactions, 40);
        let floor_s = 2.0 * 20.0 * think.as_secs_f64();
        assert!(
            totals.session_seconds_sum >= floor_s,
            "{} s of session time, below the {floor_s} s of think time",
            totals.session_seconds_sum
        );
        assert!(totals.session_seconds_sum - totals.commit_seconds_sum >= floor_s);
    }

    #[test]
    fn sync_write_calibration_measures_something() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cost = sync_write_cost(dir.path(), 2, 5).expect("calibrate");
        assert!(cost.median_ms > 0.0 && cost.median_ms.is_finite());
        assert!(cost.mean_ms > 0.0 && cost.mean_ms.is_finite());
        assert!(!dir.path().join("calibrate.dat").exists());
    }
}
