//! Paper 000's two tables: 1,000,000 random rows each by default, one of 10 fields / 108 bytes and
//! one of 8 fields / 87 bytes, non-key values with at most 20 % duplicates. The first table's
//! `owner_id` is a foreign key to the second's primary key (for the join query).
//!
//! Generation is deterministic by seed. Each non-key column draws from `distinct` values, where
//! `distinct = rows - floor(rows * duplicate_fraction)`: every value appears at least once and the
//! remaining rows repeat random ones, then the column is shuffled; so exactly
//! `rows - distinct` rows (the duplicates) carry a value another row also has.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rusqlite::Connection;
use rusqlite::types::Value;

/// Paper 000: "키가 아닌 필드들은 동일한 값들을 최대 20%까지만" — at most 20 % duplicates.
pub const DUPLICATE_FRACTION_MAX: f64 = 0.20;
/// What the generator uses by default: below the bound, with room for a few repeated values.
pub const DUPLICATE_FRACTION_DEFAULT: f64 = 0.15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    /// The INTEGER PRIMARY KEY (8 bytes declared).
    Key,
    /// Fixed-width text of this many bytes.
    Text(usize),
    /// An integer declared as this many bytes (4 or 8).
    Int(usize),
    /// Foreign key into the other table's primary key (8 bytes declared).
    ForeignKey,
}

impl ColumnKind {
    pub fn declared_bytes(self) -> usize {
        match self {
            ColumnKind::Key | ColumnKind::ForeignKey => 8,
            ColumnKind::Text(n) | ColumnKind::Int(n) => n,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub name: &'static str,
    pub kind: ColumnKind,
}

#[derive(Clone, Copy, Debug)]
pub struct TableDef {
    pub name: &'static str,
    pub columns: &'static [Column],
}

const fn col(name: &'static str, kind: ColumnKind) -> Column {
    Column { name, kind }
}

/// 10 fields, 108 bytes: the table the queries run on.
pub const ITEMS: TableDef = TableDef {
    name: "items",
    columns: &[
        col("id", ColumnKind::Key),
        col("name", ColumnKind::Text(16)),
        col("city", ColumnKind::Text(16)),
        col("code", ColumnKind::Text(12)),
        col("tag", ColumnKind::Text(12)),
        col("note", ColumnKind::Text(20)),
        col("amount", ColumnKind::Int(8)),
        col("qty", ColumnKind::Int(4)),
        col("score", ColumnKind::Int(4)),
        col("owner_id", ColumnKind::ForeignKey),
    ],
};

/// 8 fields, 87 bytes: the table joined to.
pub const OWNERS: TableDef = TableDef {
    name: "owners",
    columns: &[
        col("id", ColumnKind::Key),
        col("title", ColumnKind::Text(20)),
        col("owner", ColumnKind::Text(15)),
        col("region", ColumnKind::Text(12)),
        col("kind", ColumnKind::Text(8)),
        col("price", ColumnKind::Int(8)),
        col("stock", ColumnKind::Int(8)),
        col("rating", ColumnKind::Int(8)),
    ],
};

impl TableDef {
    pub fn record_bytes(&self) -> usize {
        self.columns.iter().map(|c| c.kind.declared_bytes()).sum()
    }
    pub fn create_sql(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|c| match c.kind {
                ColumnKind::Key => format!("{} INTEGER PRIMARY KEY", c.name),
                ColumnKind::Text(_) => format!("{} TEXT NOT NULL", c.name),
                ColumnKind::Int(_) | ColumnKind::ForeignKey => {
                    format!("{} INTEGER NOT NULL", c.name)
                }
            })
            .collect();
        format!("CREATE TABLE {} ({})", self.name, cols.join(", "))
    }
    pub fn insert_sql(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|c| c.name).collect();
        let marks: Vec<String> = (1..=self.columns.len()).map(|i| format!("?{i}")).collect();
        format!(
            "INSERT INTO {} ({}) VALUES ({})",
            self.name,
            names.join(", "),
            marks.join(", ")
        )
    }
}

/// Generation parameters of one table.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct GenSpec {
    pub rows: usize,
    /// Rows of the table a foreign key points into (for `ForeignKey` columns).
    pub foreign_rows: usize,
    pub duplicate_fraction: f64,
    pub seed: u64,
}

/// Errors of the generator's input.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("duplicate fraction {0} is outside 0..={DUPLICATE_FRACTION_MAX} (paper 000's bound)")]
    DuplicateFraction(f64),
    #[error(
        "a table needs at least 1 row (and the foreign table too), got {rows} and {foreign_rows}"
    )]
    Empty { rows: usize, foreign_rows: usize },
    #[error("row count {0} exceeds the generator's limit of {ROWS_MAX}")]
    TooManyRows(usize),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// u32 value indices per column keep memory at 4 bytes per cell; 2^31 rows is far beyond a lab run.
pub const ROWS_MAX: usize = 1 << 31;

/// Deterministic rows of a table, generated column by column (value indices) and rendered lazily.
pub struct Generated {
    pub table: TableDef,
    pub spec: GenSpec,
    /// Per non-key column: the value index of each row.
    indices: Vec<Vec<u32>>,
}

impl GenSpec {
    pub fn validate(&self) -> Result<(), SchemaError> {
        if !(0.0..=DUPLICATE_FRACTION_MAX).contains(&self.duplicate_fraction) {
            return Err(SchemaError::DuplicateFraction(self.duplicate_fraction));
        }
        if self.rows == 0 || self.foreign_rows == 0 {
            return Err(SchemaError::Empty {
                rows: self.rows,
                foreign_rows: self.foreign_rows,
            });
        }
        if self.rows > ROWS_MAX || self.foreign_rows > ROWS_MAX {
            return Err(SchemaError::TooManyRows(self.rows.max(self.foreign_rows)));
        }
        Ok(())
    }
    /// Distinct values per non-key column.
    pub fn distinct(&self, domain: usize) -> usize {
        let duplicates = (self.rows as f64 * self.duplicate_fraction).floor() as usize;
        (self.rows - duplicates.min(self.rows - 1)).min(domain)
    }
}

/// A bijection on u32 (each step is invertible), so distinct indices give distinct values.
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

pub fn generate(table: TableDef, spec: GenSpec) -> Result<Generated, SchemaError> {
    spec.validate()?;
    let mut indices = Vec::with_capacity(table.columns.len());
    for (c, column) in table.columns.iter().enumerate() {
        if column.kind == ColumnKind::Key {
            indices.push(Vec::new());
            continue;
        }
        let domain = if column.kind == ColumnKind::ForeignKey {
            spec.foreign_rows
        } else {
            usize::MAX
        };
        let distinct = spec.distinct(domain);
        let mut rng =
            StdRng::seed_from_u64(spec.seed ^ ((c as u64 + 1) << 32) ^ table.name.len() as u64);
        let mut col: Vec<u32> = (0..spec.rows)
            .map(|i| {
                if i < distinct {
                    i as u32
                } else {
                    rng.random_range(0..distinct as u32)
                }
            })
            .collect();
        col.shuffle(&mut rng);
        indices.push(col);
    }
    Ok(Generated {
        table,
        spec,
        indices,
    })
}

impl Generated {
    pub fn rows(&self) -> usize {
        self.spec.rows
    }
    /// The value of column `c` in row `row` (0-based; the key is row + 1).
    pub fn value(&self, row: usize, c: usize) -> Value {
        let column = self.table.columns[c];
        match column.kind {
            ColumnKind::Key => Value::Integer(row as i64 + 1),
            ColumnKind::ForeignKey => {
                // Spread the distinct owner ids over the whole foreign table.
                let k = self.indices[c][row] as u64;
                let id = (k * self.spec.foreign_rows as u64)
                    / self.spec.distinct(self.spec.foreign_rows) as u64;
                Value::Integer(id as i64 + 1)
            }
            ColumnKind::Int(bytes) => {
                let k = self.indices[c][row];
                let v = mix32(k ^ (c as u32).wrapping_mul(0x9e37_79b9)) as i64;
                // 8-byte columns get a wider, still injective value.
                Value::Integer(if bytes >= 8 {
                    v * 1_000_003 + c as i64
                } else {
                    v
                })
            }
            ColumnKind::Text(width) => {
                Value::Text(text_value(self.indices[c][row], c as u32, width))
            }
        }
    }
    pub fn row(&self, row: usize) -> Vec<Value> {
        (0..self.table.columns.len())
            .map(|c| self.value(row, c))
            .collect()
    }
    /// Rows whose value in column `c` equals an earlier row's value.
    pub fn duplicate_rows(&self, c: usize) -> usize {
        let mut seen = std::collections::HashSet::new();
        (0..self.rows())
            .filter(|&r| !seen.insert(format!("{:?}", self.value(r, c))))
            .count()
    }

    /// Creates the table in `conn` and inserts every row in one transaction.
    pub fn load(&self, conn: &Connection) -> Result<(), SchemaError> {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", self.table.name))?;
        conn.execute_batch(&self.table.create_sql())?;
        let tx = conn.unchecked_transaction()?;
        {
            let mut stmt = tx.prepare(&self.table.insert_sql())?;
            for r in 0..self.rows() {
                stmt.execute(rusqlite::params_from_iter(self.row(r)))?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

/// Fixed-width text: an injective base-36 prefix of the value index, then deterministic filler.
fn text_value(k: u32, salt: u32, width: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut x = mix32(k ^ salt.wrapping_mul(0x85eb_ca6b));
    let mut s = Vec::with_capacity(width);
    // 7 base-36 digits hold any u32 (36^7 > 2^32): the prefix alone is injective.
    for _ in 0..7 {
        s.push(DIGITS[(x % 36) as usize]);
        x /= 36;
    }
    let mut f = mix32(k.wrapping_add(salt) ^ 0xdead_beef);
    while s.len() < width {
        s.push(b'A' + (f % 26) as u8);
        f = mix32(f.wrapping_add(1));
    }
    s.truncate(width.max(7));
    String::from_utf8_lossy(&s).into_owned()
}
