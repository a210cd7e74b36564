//! Paper 000's five query types against the generated tables, each timed per repetition.
//!
//! - point: `items` by primary key;
//! - set: one condition on a non-indexed field (`amount` in a window holding about 100 rows), so a
//!   full table scan;
//! - range: primary-key range of 100 rows, 10x larger ranges, up to the whole table;
//! - multi: two conditions on non-indexed fields (`amount` window and `score` half-range);
//! - join: `items` rows of a 100-key range joined to `owners` through the foreign key (each a
//!   primary-key lookup in `owners`: about 100 result rows).

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

/// One query type with its parameter generator.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct QueryKind {
    /// "point", "set", "range-100", ..., "range-all", "multi", "join".
    pub name: String,
    /// Uses the primary-key index (paper 000's "indexed" group) or scans the table.
    pub indexed: bool,
    /// Rows of a range query (None for the others).
    pub range_rows: Option<usize>,
}

/// The query list for a table of `rows` rows: ranges of 100, 1000, ... rows, then the whole table.
pub fn query_kinds(rows: usize) -> Vec<QueryKind> {
    let mut kinds = vec![
        QueryKind {
            name: "point".into(),
            indexed: true,
            range_rows: None,
        },
        QueryKind {
            name: "set".into(),
            indexed: false,
            range_rows: None,
        },
    ];
    let mut size = 100;
    while size < rows {
        kinds.push(QueryKind {
            name: format!("range-{size}"),
            indexed: true,
            range_rows: Some(size),
        });
        size *= 10;
    }
    kinds.push(QueryKind {
        name: "range-all".into(),
        indexed: true,
        range_rows: Some(rows),
    });
    kinds.push(QueryKind {
        name: "multi".into(),
        indexed: false,
        range_rows: None,
    });
    kinds.push(QueryKind {
        name: "join".into(),
        indexed: true,
        range_rows: None,
    });
    kinds
}

/// Result rows the window conditions aim at (paper 000: join ~100 rows; we use the same for set).
pub const TARGET_RESULT_ROWS: u64 = 100;

/// Outcome of one query execution.
#[derive(Clone, Copy, Debug)]
pub struct Execution {
    pub elapsed: Duration,
    pub rows: u64,
    /// Bytes of column values read (so SQLite materialises every result value).
    pub bytes: u64,
}

/// Parameters for one repetition, drawn from a seeded generator so every file system answers the
/// same questions in the same order.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub key: i64,
    pub amount_lo: i64,
    pub amount_hi: i64,
    pub score_max: i64,
}

pub struct ParamGen {
    rng: StdRng,
    rows: usize,
    amount_min: i64,
    amount_max: i64,
    score_min: i64,
    score_max: i64,
}

impl ParamGen {
    /// Reads the value ranges of the non-indexed columns (once, untimed).
    pub fn new(conn: &Connection, rows: usize, seed: u64) -> Result<ParamGen, rusqlite::Error> {
        let (amount_min, amount_max, score_min, score_max) = conn.query_row(
            "SELECT min(amount), max(amount), min(score), max(score) FROM items",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        Ok(ParamGen {
            rng: StdRng::seed_from_u64(seed),
            rows,
            amount_min,
            amount_max,
            score_min,
            score_max,
        })
    }
    pub fn next(&mut self, range_rows: usize) -> Params {
        let span = self.rows.saturating_sub(range_rows) as i64;
        let key = 1 + self.rng.random_range(0..=span);
        // An amount window of ~2x the target for multi (half survive the score condition) and set.
        let width = ((self.amount_max - self.amount_min) as f64
            * (2.0 * TARGET_RESULT_ROWS as f64 / self.rows as f64)) as i64;
        let lo = self.amount_min
            + self
                .rng
                .random_range(0..=(self.amount_max - self.amount_min - width).max(0));
        let score_max = self.score_min + (self.score_max - self.score_min) / 2;
        Params {
            key,
            amount_lo: lo,
            amount_hi: lo + width,
            score_max,
        }
    }
}

fn consume(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> Result<(u64, u64), rusqlite::Error> {
    let columns = stmt.column_count();
    let mut rows = stmt.query(params)?;
    let (mut n, mut bytes) = (0u64, 0u64);
    while let Some(row) = rows.next()? {
        n += 1;
        for c in 0..columns {
            bytes += match row.get_ref(c)? {
                ValueRef::Null => 0,
                ValueRef::Integer(_) | ValueRef::Real(_) => 8,
                ValueRef::Text(t) | ValueRef::Blob(t) => t.len() as u64,
            };
        }
    }
    Ok((n, bytes))
}

/// Runs one query (prepare + step through every row), timed.
pub fn execute(
    conn: &Connection,
    kind: &QueryKind,
    p: &Params,
) -> Result<Execution, rusqlite::Error> {
    let start = Instant::now();
    let (rows, bytes) = match kind.name.as_str() {
        "point" => consume(&mut conn.prepare("SELECT * FROM items WHERE id = ?1")?, params![p.key])?,
        "set" => consume(&mut conn.prepare("SELECT * FROM items WHERE amount BETWEEN ?1 AND ?2")?, params![p.amount_lo, p.amount_hi])?,
        "multi" => consume(
            &mut conn.prepare("SELECT * FROM items WHERE amount BETWEEN ?1 AND ?2 AND score <= ?3")?,
            params![p.amount_lo, p.amount_hi, p.score_max],
        )?,
        "join" => consume(
            &mut conn.prepare(
                "SELECT i.*, o.* FROM items i JOIN owners o ON o.id = i.owner_id WHERE i.id BETWEEN ?1 AND ?1 + 99",
            )?,
            params![p.key],
        )?,
        _ => {
            let n = kind.range_rows.unwrap_or(100) as i64;
            consume(&mut conn.prepare("SELECT * FROM items WHERE id BETWEEN ?1 AND ?1 + ?2 - 1")?, params![p.key, n])?
        }
    };
    Ok(Execution {
        elapsed: start.elapsed(),
        rows,
        bytes,
    })
}

/// Summary of repeated timings, in microseconds.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TimingUs {
    pub repetitions: usize,
    pub mean: f64,
    pub median: f64,
    pub p95: f64,
    pub min: f64,
    pub max: f64,
}

impl TimingUs {
    pub fn of(durations: &[Duration]) -> TimingUs {
        if durations.is_empty() {
            return TimingUs::default();
        }
        let mut us: Vec<f64> = durations.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let median = roamkv_testbed::stats::median(&mut us.clone());
        TimingUs {
            repetitions: n,
            mean: us.iter().sum::<f64>() / n as f64,
            median,
            p95: roamkv_testbed::stats::percentile(&us, 95.0),
            min: us[0],
            max: us[n - 1],
        }
    }
}

/// A SQLite error as the lab reports it.
pub(crate) fn sqlite_err(e: rusqlite::Error) -> crate::LabError {
    crate::LabError::Unsupported(format!("sqlite: {e}"))
}
