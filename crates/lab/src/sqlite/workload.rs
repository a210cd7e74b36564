//! Mobibench-style SQLite transactions: open a database through the sync-call VFS with a journal
//! mode and synchronous level (both read back), fill it when the operation needs existing rows,
//! then time insert/update/delete transactions of one or N rows.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::{Connection, OpenFlags, params};

use super::config::{JournalMode, Op, SyncCall, Synchronous};
use super::vfs;

/// Failures of the SQLite workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("sync-call VFS: {0}")]
    Vfs(#[from] vfs::VfsError),
    #[error("PRAGMA {pragma} reads back {got:?}, expected {expected:?}")]
    PragmaMismatch {
        pragma: &'static str,
        got: String,
        expected: String,
    },
    #[error("invalid workload: {0}")]
    Invalid(String),
}

/// One database configuration.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct DbConfig {
    pub journal_mode: JournalMode,
    pub synchronous: Synchronous,
    pub sync_call: SyncCall,
}

/// One transaction stream (one thread, one database file).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct StreamSpec {
    pub op: Op,
    pub transactions: usize,
    pub rows_per_tx: usize,
    pub record_bytes: usize,
    pub seed: u64,
}

impl StreamSpec {
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.transactions == 0 || self.rows_per_tx == 0 {
            return Err(WorkloadError::Invalid(
                "transactions and rows per transaction must be at least 1".into(),
            ));
        }
        if self.record_bytes == 0 || self.record_bytes > 1 << 20 {
            return Err(WorkloadError::Invalid(format!(
                "record size {} B is outside 1..=1048576",
                self.record_bytes
            )));
        }
        Ok(())
    }
    /// Rows an update/delete stream needs before it starts (an insert stream needs none).
    pub fn rows_needed(&self) -> usize {
        match self.op {
            Op::Insert => 0,
            Op::Update | Op::Delete => self.transactions * self.rows_per_tx,
        }
    }
}

/// Opens (creating) `path` with the configuration applied and verified by reading the PRAGMAs back.
pub fn open(path: &Path, config: DbConfig) -> Result<Connection, WorkloadError> {
    vfs::register()?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags_and_vfs(path, flags, vfs::vfs_name(config.sync_call))?;
    let mode: String = conn.query_row(
        &format!("PRAGMA journal_mode = {}", config.journal_mode.name()),
        [],
        |r| r.get(0),
    )?;
    if !mode.eq_ignore_ascii_case(config.journal_mode.pragma_value()) {
        return Err(WorkloadError::PragmaMismatch {
            pragma: "journal_mode",
            got: mode,
            expected: config.journal_mode.name().into(),
        });
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {}",
        config.synchronous.name()
    ))?;
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    if sync != config.synchronous.pragma_number() {
        return Err(WorkloadError::PragmaMismatch {
            pragma: "synchronous",
            got: sync.to_string(),
            expected: config.synchronous.pragma_number().to_string(),
        });
    }
    // Mobibench's table: an integer key and a text payload of the record size.
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
    )?;
    Ok(conn)
}

/// Reads back (journal_mode, synchronous) as SQLite reports them.
pub fn read_pragmas(conn: &Connection) -> Result<(String, i64), WorkloadError> {
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    Ok((mode, sync))
}

/// A random printable payload of exactly `bytes` bytes.
pub fn payload(rng: &mut StdRng, bytes: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..bytes)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Inserts rows 1..=rows in one transaction (set-up, not measured).
pub fn fill(
    conn: &Connection,
    rows: usize,
    record_bytes: usize,
    seed: u64,
) -> Result<(), WorkloadError> {
    if rows == 0 {
        return Ok(());
    }
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_F111);
    let tx = conn.unchecked_transaction()?;
    {
        let mut stmt = tx.prepare("INSERT INTO records (id, value) VALUES (?1, ?2)")?;
        for id in 1..=rows as i64 {
            stmt.execute(params![id, payload(&mut rng, record_bytes)])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The timed part: `spec.transactions` transactions; returns each one's latency.
pub fn run_stream(conn: &Connection, spec: &StreamSpec) -> Result<Vec<Duration>, WorkloadError> {
    spec.validate()?;
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let existing = spec.rows_needed();
    // Update/delete touch every pre-filled row once, in a seeded random order (random writes, as
    // on a phone); insert appends new keys after the existing ones.
    let mut keys: Vec<i64> = (1..=existing as i64).collect();
    keys.shuffle(&mut rng);
    let sql = match spec.op {
        Op::Insert => "INSERT INTO records (id, value) VALUES (?1, ?2)",
        Op::Update => "UPDATE records SET value = ?2 WHERE id = ?1",
        Op::Delete => "DELETE FROM records WHERE id = ?1",
    };
    let max_id: i64 =
        conn.query_row("SELECT coalesce(max(id), 0) FROM records", [], |r| r.get(0))?;
    let mut stmt = conn.prepare(sql)?;
    let mut latencies = Vec::with_capacity(spec.transactions);
    let mut next_insert = max_id + 1;
    let mut key_iter = keys.into_iter();
    for _ in 0..spec.transactions {
        // Payloads are made before the clock starts: we time SQLite, not the generator.
        let rows: Vec<(i64, String)> = (0..spec.rows_per_tx)
            .map(|_| {
                let id = match spec.op {
                    Op::Insert => {
                        next_insert += 1;
                        next_insert - 1
                    }
                    Op::Update | Op::Delete => key_iter.next().unwrap_or(0),
                };
                let value = if spec.op == Op::Delete {
                    String::new()
                } else {
                    payload(&mut rng, spec.record_bytes)
                };
                (id, value)
            })
            .collect();
        let start = Instant::now();
        if spec.rows_per_tx == 1 {
            // Autocommit: SQLite wraps the statement in its own transaction, as an app's single insert.
            let changed = execute(&mut stmt, spec.op, rows[0].0, &rows[0].1)?;
            check_changed(changed, 1)?;
        } else {
            conn.execute_batch("BEGIN")?;
            for (id, value) in &rows {
                let changed = execute(&mut stmt, spec.op, *id, value)?;
                check_changed(changed, 1)?;
            }
            conn.execute_batch("COMMIT")?;
        }
        latencies.push(start.elapsed());
    }
    Ok(latencies)
}

fn execute(
    stmt: &mut rusqlite::Statement<'_>,
    op: Op,
    id: i64,
    value: &str,
) -> Result<usize, rusqlite::Error> {
    match op {
        Op::Delete => stmt.execute(params![id]),
        Op::Insert | Op::Update => stmt.execute(params![id, value]),
    }
}

fn check_changed(changed: usize, expected: usize) -> Result<(), WorkloadError> {
    if changed != expected {
        return Err(WorkloadError::Invalid(format!(
            "a statement changed {changed} rows, expected {expected}"
        )));
    }
    Ok(())
}

/// Latency summary in microseconds: fio's percentiles (p50, p99, p99.9; nearest rank) and p95.
/// All zero for no transactions.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LatencyUs {
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

impl LatencyUs {
    pub fn of(latencies: &[Duration]) -> LatencyUs {
        if latencies.is_empty() {
            return LatencyUs::default();
        }
        let us: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        let p = roamkv_testbed::stats::Percentiles::of(&us);
        LatencyUs {
            mean: p.mean,
            p50: p.p50,
            p95: p.p95,
            p99: p.p99,
            p99_9: p.p99_9,
            max: p.max,
        }
    }
}
