//! Opening the lower tier the data directory names.

use crate::dir::{DataDir, LowerTierKind};
use crate::lower::LowerTier;
use crate::lower::rocks::RocksLower;
use crate::model::error::Result;

pub(crate) fn open_lower(dir: &DataDir, memory_bytes: u64) -> Result<Box<dyn LowerTier>> {
    match dir.lower_tier {
        LowerTierKind::RocksDb => Ok(Box::new(RocksLower::open(&dir.lower_dir(), memory_bytes)?)),
        #[cfg(feature = "leveldb")]
        LowerTierKind::LevelDb => Ok(Box::new(crate::lower::level::LevelLower::open(
            &dir.lower_dir(),
            memory_bytes,
        )?)),
        #[cfg(not(feature = "leveldb"))]
        LowerTierKind::LevelDb => Err(Error::InvalidOptions(
            "this build has no LevelDB support".into(),
        )),
    }
}
