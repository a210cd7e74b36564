//! The measurement itself: both tables generated once and loaded into a database on each file
//! system, the query set timed in one cache state (`QueryRun` per query), and the ratios of mean
//! times between file systems (paper 000's comparison).
use super::args::{Cache, QueriesConfig};
use super::schema::{self, GenSpec, Generated};
use super::sqlquery::{self, ParamGen, TimingUs, sqlite_err};
use crate::LabError;
use roamkv_testbed::fixture;
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// One (file system, cache, query) measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueryRun {
    pub fs: String,
    pub cache: Cache,
    pub query: String,
    pub indexed: bool,
    pub range_rows: Option<usize>,
    pub timing_us: TimingUs,
    pub result_rows_mean: f64,
}

/// Both tables, generated once and loaded into every file system.
pub struct Tables {
    pub items: Generated,
    pub owners: Generated,
}

pub fn generate_tables(config: &QueriesConfig) -> Result<Tables, schema::SchemaError> {
    let owners = schema::generate(
        schema::OWNERS,
        GenSpec {
            rows: config.owner_rows,
            foreign_rows: config.owner_rows,
            duplicate_fraction: config.duplicate_fraction,
            seed: config.seed ^ 0x0B,
        },
    )?;
    let items = schema::generate(
        schema::ITEMS,
        GenSpec {
            rows: config.rows,
            foreign_rows: config.owner_rows,
            duplicate_fraction: config.duplicate_fraction,
            seed: config.seed ^ 0x1A,
        },
    )?;
    Ok(Tables { items, owners })
}

/// Creates `dir/queries.db` with both tables (plain SQLite defaults: DELETE journal, FULL sync).
pub fn load_database(dir: &Path, tables: &Tables) -> Result<PathBuf, LabError> {
    let path = dir.join("queries.db");
    let conn = Connection::open(&path).map_err(sqlite_err)?;
    tables
        .owners
        .load(&conn)
        .map_err(|e| LabError::Unsupported(format!("loading owners: {e}")))?;
    tables
        .items
        .load(&conn)
        .map_err(|e| LabError::Unsupported(format!("loading items: {e}")))?;
    conn.close().map_err(|(_, e)| sqlite_err(e))?;
    Ok(path)
}

/// Where and how to run the query set once.
#[derive(Clone, Copy, Debug)]
pub struct QuerySet<'a> {
    pub db: &'a Path,
    pub fs_name: &'a str,
    pub cache: Cache,
    pub repetitions: usize,
    /// Rows of `items` (sets the range sizes).
    pub rows: usize,
    pub seed: u64,
}

/// Runs every query type `repetitions` times against `db` in one cache state. `before_cold` is
/// called before each cold repetition (drop caches); tests pass a no-op.
pub fn run_query_set(
    set: &QuerySet<'_>,
    before_cold: &dyn Fn() -> Result<(), LabError>,
    progress: &dyn Fn(&str),
) -> Result<Vec<QueryRun>, LabError> {
    let QuerySet {
        db,
        fs_name,
        cache,
        repetitions,
        rows,
        seed,
    } = *set;
    let mut out = Vec::new();
    let setup = Connection::open(db).map_err(sqlite_err)?;
    for kind in sqlquery::query_kinds(rows) {
        progress(&format!("{fs_name} {} {}", cache.name(), kind.name));
        // Same parameter sequence on every file system: the seed depends on the query only.
        let mut params =
            ParamGen::new(&setup, rows, seed ^ hash_name(&kind.name)).map_err(sqlite_err)?;
        let mut times = Vec::with_capacity(repetitions);
        let mut result_rows = 0u64;
        let warm_conn = if cache == Cache::Warm {
            Some(Connection::open(db).map_err(sqlite_err)?)
        } else {
            None
        };
        if let Some(conn) = &warm_conn {
            let p = params.next(kind.range_rows.unwrap_or(100));
            sqlquery::execute(conn, &kind, &p).map_err(sqlite_err)?;
        }
        for _ in 0..repetitions {
            if fixture::interrupted() {
                return Err(LabError::Interrupted);
            }
            let p = params.next(kind.range_rows.unwrap_or(100));
            let exec = match &warm_conn {
                Some(conn) => sqlquery::execute(conn, &kind, &p).map_err(sqlite_err)?,
                None => {
                    before_cold()?;
                    let conn = Connection::open(db).map_err(sqlite_err)?;
                    // Opening reads the schema; the query is timed from here, as on a freshly
                    // started app whose first statement has been prepared once.
                    conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                        r.get::<_, i64>(0)
                    })
                    .map_err(sqlite_err)?;
                    sqlquery::execute(&conn, &kind, &p).map_err(sqlite_err)?
                }
            };
            times.push(exec.elapsed);
            result_rows += exec.rows;
        }
        out.push(QueryRun {
            fs: fs_name.to_string(),
            cache,
            query: kind.name.clone(),
            indexed: kind.indexed,
            range_rows: kind.range_rows,
            timing_us: TimingUs::of(&times),
            result_rows_mean: result_rows as f64 / repetitions.max(1) as f64,
        });
    }
    Ok(out)
}

fn hash_name(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Ratio of mean times between two file systems for each query and cache (b / a: > 1 means a is
/// faster), plus the geometric mean over the indexed and the scanning queries (paper 000's groups).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Ratio {
    pub cache: Cache,
    pub query: String,
    pub fs_a: String,
    pub fs_b: String,
    /// mean(fs_b) / mean(fs_a); paper 000 writes this as "a:b = 1:ratio".
    pub ratio: f64,
}

pub fn ratios(runs: &[QueryRun], fs: &[String]) -> Vec<Ratio> {
    let mut out = Vec::new();
    let Some(a) = fs.first() else { return out };
    for b in fs.iter().skip(1) {
        for cache in [Cache::Warm, Cache::Cold] {
            let mut groups: [(f64, usize); 2] = [(0.0, 0), (0.0, 0)];
            for ra in runs.iter().filter(|r| &r.fs == a && r.cache == cache) {
                let Some(rb) = runs
                    .iter()
                    .find(|r| &r.fs == b && r.cache == cache && r.query == ra.query)
                else {
                    continue;
                };
                if ra.timing_us.mean <= 0.0 {
                    continue;
                }
                let ratio = rb.timing_us.mean / ra.timing_us.mean;
                let g = &mut groups[usize::from(!ra.indexed)];
                g.0 += ratio.ln();
                g.1 += 1;
                out.push(Ratio {
                    cache,
                    query: ra.query.clone(),
                    fs_a: a.clone(),
                    fs_b: b.clone(),
                    ratio,
                });
            }
            for (i, label) in ["indexed (geo-mean)", "full scan (geo-mean)"]
                .iter()
                .enumerate()
            {
                if groups[i].1 > 0 {
                    let ratio = (groups[i].0 / groups[i].1 as f64).exp();
                    out.push(Ratio {
                        cache,
                        query: label.to_string(),
                        fs_a: a.clone(),
                        fs_b: b.clone(),
                        ratio,
                    });
                }
            }
        }
    }
    out
}
