//! Opening the lower tier the data directory names.

use crate::dir::{DataDir, LowerTierKind};
use crate::lower::LowerTier;
use crate::lower::rocks::RocksLower;
use crate::model::error::{Error, Result};

/// The lower tier, for writing, or read-only (RocksDB's read-only open: nothing in its
/// directory is created or changed). LevelDB has no read-only open (its open writes a new log,
/// MANIFEST and LOG): `Error::ReadOnly`.
pub(crate) fn open_lower(
    dir: &DataDir,
    memory_bytes: u64,
    read_only: bool,
) -> Result<Box<dyn LowerTier>> {
    match dir.lower_tier {
        LowerTierKind::RocksDb => Ok(Box::new(RocksLower::open(
            &dir.lower_dir(),
            memory_bytes,
            read_only,
        )?)),
        LowerTierKind::LevelDb if read_only => Err(Error::ReadOnly(format!(
            "{} has a LevelDB lower tier, and LevelDB has no read-only open (its open writes a \
             new log, MANIFEST and LOG)",
            dir.path.display()
        ))),
        #[cfg(feature = "leveldb")]
        LowerTierKind::LevelDb => Ok(Box::new(crate::lower::level::LevelLower::open(
            &dir.lower_dir(),
            memory_bytes,
        )?)),
        #[cfg(not(feature = "leveldb"))]
        LowerTierKind::LevelDb => Err(Error::InvalidOptions(format!(
            "{} has a LevelDB lower tier, and this build has no LevelDB (the roamkv-engine \
             feature `leveldb`; the Debian package's binary is built without it)",
            dir.path.display()
        ))),
    }
}
