//! Opening the lower tier the data directory names, in the layout its format gives, upgraded
//! to the current format first where the open may write.

use crate::dir::format::DIR_FORMAT_READINGS;
use crate::dir::{DataDir, LowerTierKind};
use crate::lower::blocks::{BlockTier, upgrade};
use crate::lower::rocks::RocksLower;
use crate::lower::{Layout, LowerTier};
use crate::model::error::{Error, Result};

/// What an open of the lower tier may do to a directory of the earlier format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Nothing written (RocksDB's read-only open): a format 2 directory is read as it is.
    ReadOnly,
    /// Writes of the tier's own (LevelDB's open writes its log) but no upgrade: `roamkv check`.
    NoUpgrade,
    /// The engine's open: a format 2 directory is upgraded to blocks first.
    Upgrade,
}

/// The lower tier, for writing, or read-only (RocksDB's read-only open: nothing in its
/// directory is created or changed). LevelDB has no read-only open (its open writes a new log,
/// MANIFEST and LOG): `Error::ReadOnly`.
pub(crate) fn open_lower(
    dir: &mut DataDir,
    memory_bytes: u64,
    access: Access,
) -> Result<Box<dyn LowerTier>> {
    let read_only = access == Access::ReadOnly;
    if dir.format == DIR_FORMAT_READINGS {
        if access != Access::Upgrade {
            return open_tier(dir, memory_bytes, read_only, Layout::Readings);
        }
        let tier = BlockTier::new(open_tier(dir, memory_bytes, false, Layout::Blocks)?);
        upgrade::to_blocks(&tier, dir)?;
        return Ok(Box::new(tier));
    }
    let tier = BlockTier::new(open_tier(dir, memory_bytes, read_only, Layout::Blocks)?);
    if access == Access::Upgrade {
        upgrade::drop_legacy(&tier)?; // what an upgrade cut short after its flip left
    }
    Ok(Box::new(tier))
}

fn open_tier(
    dir: &DataDir,
    memory_bytes: u64,
    read_only: bool,
    layout: Layout,
) -> Result<Box<dyn LowerTier>> {
    match dir.lower_tier {
        LowerTierKind::RocksDb => Ok(Box::new(RocksLower::open(
            &dir.lower_dir(),
            memory_bytes,
            read_only,
            layout,
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
            layout,
        )?)),
        #[cfg(not(feature = "leveldb"))]
        LowerTierKind::LevelDb => Err(Error::InvalidOptions(format!(
            "{} has a LevelDB lower tier, and this build has no LevelDB (the roamkv-engine \
             feature `leveldb`; the Debian package's binary is built without it)",
            dir.path.display()
        ))),
    }
}
