//! The knobs of one SQLite run (paper 004's Mobibench options), each parsed from the command line
//! with an error that lists the valid names.

use std::fmt;
use std::str::FromStr;

/// A value on the command line that is not one of the valid names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?}; valid: {valid}")]
pub struct UnknownName {
    pub what: &'static str,
    pub given: String,
    pub valid: String,
}

/// Generates `name()`, `all()`, `FromStr` (case-insensitive) and `Display` for a fieldless enum.
macro_rules! named_enum {
    ($(#[$meta:meta])* $ty:ident, $what:literal, { $($(#[$vmeta:meta])* $variant:ident => $name:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
        pub enum $ty { $($(#[$vmeta])* $variant),+ }
        impl $ty {
            pub fn name(self) -> &'static str { match self { $($ty::$variant => $name),+ } }
            pub fn all() -> &'static [$ty] { &[$($ty::$variant),+] }
        }
        impl FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                let lower = s.trim().to_ascii_lowercase();
                $(if lower == $name { return Ok($ty::$variant); })+
                Err(UnknownName {
                    what: $what,
                    given: s.to_string(),
                    valid: [$($name),+].join(", "),
                })
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.name()) }
        }
    };
}

named_enum!(
    /// `PRAGMA journal_mode` (SQLite's rollback journal or write-ahead log).
    JournalMode, "journal mode", {
        Delete => "delete",
        Truncate => "truncate",
        Persist => "persist",
        Memory => "memory",
        Wal => "wal",
        Off => "off",
    }
);

named_enum!(
    /// `PRAGMA synchronous`.
    Synchronous, "synchronous level", {
        Off => "off",
        Normal => "normal",
        Full => "full",
    }
);

named_enum!(
    /// The system call SQLite's xSync makes (see `vfs.rs`).
    SyncCall, "sync call", {
        Fdatasync => "fdatasync",
        Fsync => "fsync",
    }
);

named_enum!(
    /// The transaction type (Mobibench's SQLite workloads).
    Op, "operation", {
        Insert => "insert",
        Update => "update",
        Delete => "delete",
    }
);

/// Parses a comma-separated list ("delete,wal"; "all" means every value), without duplicates.
pub fn parse_list<T: FromStr<Err = UnknownName> + Copy + PartialEq>(
    s: &str,
    all: &[T],
) -> Result<Vec<T>, UnknownName> {
    if s.trim().eq_ignore_ascii_case("all") {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let v: T = part.parse()?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

impl JournalMode {
    /// What `PRAGMA journal_mode` reports back once the mode is in effect.
    pub fn pragma_value(self) -> &'static str {
        self.name()
    }
    /// The file (name suffix after the database name) where this mode writes its journal.
    pub fn journal_suffix(self) -> Option<&'static str> {
        match self {
            JournalMode::Delete | JournalMode::Truncate | JournalMode::Persist => Some("-journal"),
            JournalMode::Wal => Some("-wal"),
            JournalMode::Memory | JournalMode::Off => None,
        }
    }
}

impl Synchronous {
    /// `PRAGMA synchronous` reads back as a number.
    pub fn pragma_number(self) -> i64 {
        match self {
            Synchronous::Off => 0,
            Synchronous::Normal => 1,
            Synchronous::Full => 2,
        }
    }
}

/// The resolved matrix of one invocation.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SqliteConfig {
    pub fs: Vec<roamkv_testbed::fixture::FsSpec>,
    pub journal_modes: Vec<JournalMode>,
    pub synchronous: Vec<Synchronous>,
    pub sync_calls: Vec<SyncCall>,
    pub ops: Vec<Op>,
    pub transactions: usize,
    pub rows_per_tx: Vec<usize>,
    pub record_bytes: usize,
    pub threads: Vec<usize>,
    pub image_bytes: u64,
    pub seed: u64,
}
