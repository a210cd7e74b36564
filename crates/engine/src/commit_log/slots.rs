//! The feed's durable state: the log's identity (`feed/LOG_ID`) and the named slots
//! (`feed/NAME.slot`), each a reader's confirmed position and so a *hold* on the log
//! (PostgreSQL's replication slots; docs/FORMAT.md, "Feed"). Both files are written whole to a
//! temporary name, fdatasync'd, renamed into place and the directory synced.
//!
//! The hold: segments from the oldest held segment on are never retired, aged (their readings
//! moved to the lower tier) or not. It is bounded: past `Options::feed_hold_bytes_max` of
//! segments kept only for it, or when the log nears its budget, the oldest slots are released
//! (`enforce_cap`) and the segments retire as usual. Writers never wait for a hold; a released
//! reader finds a gap (`Error::FeedGap`) at its next read.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::commit_log::position::{LOG_POS_BYTES, LogPos};
use crate::dir::format::{LOG_ID_MAGIC, SLOT_MAGIC, u32_at, u64_at};
use crate::model::error::{Error, IoContext, Result};
use crate::model::ids::SegmentSeq;
use crate::model::limits::{SLOT_NAME_BYTES_MAX, SLOT_PERSIST_INTERVAL_MS};

/// The feed's directory inside the data directory.
pub const FEED_DIR: &str = "feed";
pub const LOG_ID_FILE: &str = "LOG_ID";
pub const SLOT_EXTENSION: &str = "slot";
// LOG_ID (docs/FORMAT.md, "Feed"): magic, log_id u64, created_ms u64, crc32c of the bytes
// before it.
const LOG_ID_MAGIC_OFFSET: usize = 0;
const LOG_ID_ID_OFFSET: usize = LOG_ID_MAGIC_OFFSET + 8;
const LOG_ID_CREATED_OFFSET: usize = LOG_ID_ID_OFFSET + 8;
const LOG_ID_CRC_OFFSET: usize = LOG_ID_CREATED_OFFSET + 8;
const LOG_ID_BYTES: usize = LOG_ID_CRC_OFFSET + 4;
// A slot file: magic, the position (LOG_POS_BYTES), crc32c of the bytes before it.
const SLOT_MAGIC_OFFSET: usize = 0;
const SLOT_POS_OFFSET: usize = SLOT_MAGIC_OFFSET + 8;
const SLOT_CRC_OFFSET: usize = SLOT_POS_OFFSET + LOG_POS_BYTES;
const SLOT_FILE_BYTES: usize = SLOT_CRC_OFFSET + 4;

/// One slot as the engine keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub pos: LogPos,
    /// The cap or the log's budget took its hold away; its reader will find a gap if the
    /// segments went before it reads them.
    pub released: bool,
    /// Held for a reader's scan of the devices (`Feed::hold_for_snapshot`): the cap does not
    /// release it (the log's budget does). In memory only.
    pub for_snapshot: bool,
    /// What its file says, and when it was written.
    persisted: Option<(LogPos, Instant)>,
    /// In memory only, never written: a backup's hold (`backup::snapshot`), released only near
    /// a full budget (`BACKUP_HOLD_RELEASE_PERCENT`).
    pub transient: bool,
}

/// Every slot, the log's identity, and how often holds were released. Guarded by the state
/// lock (in `State`), with the log's `hold_from` that they decide.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    pub log_id: u64,
    pub slots: BTreeMap<String, Slot>,
    pub releases: u64,
}

impl Slots {
    /// The oldest segment a slot still holds.
    pub fn hold_from(&self) -> Option<SegmentSeq> {
        self.slots
            .values()
            .filter(|s| !s.released)
            .map(|s| s.pos.seq)
            .min()
    }
}

/// What `load` found: the identity and each slot's position.
pub(crate) struct Loaded {
    pub log_id: u64,
    pub slots: BTreeMap<String, LogPos>,
}

impl Loaded {
    /// The oldest segment the slots of this log hold (recovery keeps it and what follows).
    pub fn hold_from(&self) -> Option<SegmentSeq> {
        self.slots.values().map(|p| p.seq).min()
    }

    /// The slots as the engine keeps them. A slot whose position lies before `oldest_live_seq`
    /// lost its segments before the restart (its hold was released): it stays released, rather
    /// than hold every live segment again up to the cap until the cap releases it once more.
    pub fn into_slots(self, oldest_live_seq: SegmentSeq) -> Slots {
        let slots = self
            .slots
            .into_iter()
            .map(|(name, pos)| {
                let slot = Slot {
                    pos,
                    released: pos.seq < oldest_live_seq,
                    for_snapshot: false,
                    persisted: Some((pos, Instant::now())),
                    transient: false,
                };
                (name, slot)
            })
            .collect();
        Slots {
            log_id: self.log_id,
            slots,
            releases: 0,
        }
    }
}

fn corrupt(file: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        file: file.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// Checks a slot name: 1..=64 of `[A-Za-z0-9_-]` (it becomes a file name).
pub(crate) fn check_name(name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && name.len() <= SLOT_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fine {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "feed slot name {name:?}: use 1 to {SLOT_NAME_BYTES_MAX} ASCII letters, digits, - or _"
        )))
    }
}

/// Opens the feed directory of a data directory (making it and the log's identity the first
/// time) and reads every slot. Slots of another log id (a copied-in file) are refused.
/// `read_only`: nothing is made; without a feed directory or log identity there are no slots
/// (and the log's id reads 0).
pub(crate) fn load(data_dir: &Path, read_only: bool) -> Result<Loaded> {
    let dir = data_dir.join(FEED_DIR);
    if read_only && !dir.is_dir() {
        return Ok(Loaded {
            log_id: 0,
            slots: BTreeMap::new(),
        });
    }
    fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
    let log_id = match read_log_id(&dir.join(LOG_ID_FILE))? {
        Some(id) => id,
        None if read_only => 0,
        None => make_log_id(&dir)?,
    };
    let mut slots = BTreeMap::new();
    for entry in fs::read_dir(&dir).context(|| format!("listing {}", dir.display()))? {
        let path = entry
            .context(|| format!("listing {}", dir.display()))?
            .path();
        let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or("");
        if path.extension().and_then(|e| e.to_str()) != Some(SLOT_EXTENSION) {
            continue;
        }
        check_name(name).map_err(|_| corrupt(&path, 0, "not a slot name"))?;
        let pos = read_slot(&path)?;
        if pos.log_id != log_id {
            return Err(corrupt(
                &path,
                8,
                format!(
                    "the slot belongs to log {:016x}, this directory's log is {log_id:016x}",
                    pos.log_id
                ),
            ));
        }
        slots.insert(name.to_string(), pos);
    }
    Ok(Loaded { log_id, slots })
}

fn read_log_id(path: &Path) -> Result<Option<u64>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context(|| format!("reading {}", path.display())),
    };
    if bytes.len() != LOG_ID_BYTES {
        return Err(corrupt(
            path,
            0,
            format!("{} bytes, a LOG_ID file has {LOG_ID_BYTES}", bytes.len()),
        ));
    }
    if &bytes[LOG_ID_MAGIC_OFFSET..LOG_ID_ID_OFFSET] != LOG_ID_MAGIC {
        return Err(corrupt(path, 0, "bad magic: not a roamkv LOG_ID file"));
    }
    check_crc(path, &bytes)?;
    Ok(u64_at(&bytes, LOG_ID_ID_OFFSET))
}

fn read_slot(path: &Path) -> Result<LogPos> {
    let bytes = fs::read(path).context(|| format!("reading {}", path.display()))?;
    if bytes.len() != SLOT_FILE_BYTES {
        return Err(corrupt(
            path,
            0,
            format!("{} bytes, a slot file has {SLOT_FILE_BYTES}", bytes.len()),
        ));
    }
    if &bytes[SLOT_MAGIC_OFFSET..SLOT_POS_OFFSET] != SLOT_MAGIC {
        return Err(corrupt(path, 0, "bad magic: not a roamkv slot file"));
    }
    check_crc(path, &bytes)?;
    LogPos::decode(&bytes[SLOT_POS_OFFSET..SLOT_CRC_OFFSET])
        .ok_or_else(|| corrupt(path, SLOT_POS_OFFSET as u64, "short position"))
}

/// The last 4 bytes are the crc32c of the bytes before them.
fn check_crc(path: &Path, bytes: &[u8]) -> Result<()> {
    let at = bytes.len() - 4;
    let stored = u32_at(bytes, at).unwrap_or_default();
    let computed = crc32c::crc32c(&bytes[..at]);
    if stored != computed {
        return Err(corrupt(
            path,
            at as u64,
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        ));
    }
    Ok(())
}

fn with_crc(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// A new random identity (the kernel's random bytes), written durably.
fn make_log_id(dir: &Path) -> Result<u64> {
    let mut random = [0u8; 8];
    File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .context(|| "reading /dev/urandom for the log's identity".to_string())?;
    // Never 0: 0 would read as "no identity" in a zeroed position.
    let log_id = u64::from_le_bytes(random).max(1);
    let created_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut bytes = LOG_ID_MAGIC.to_vec();
    bytes.extend_from_slice(&log_id.to_le_bytes());
    bytes.extend_from_slice(&created_ms.to_le_bytes());
    assert_eq!(
        bytes.len(),
        LOG_ID_CRC_OFFSET,
        "LOG_ID's fields as read_log_id reads them"
    );
    write_durably(&dir.join(LOG_ID_FILE), &with_crc(bytes))?;
    Ok(log_id)
}

pub(crate) fn slot_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir
        .join(FEED_DIR)
        .join(format!("{name}.{SLOT_EXTENSION}"))
}

/// Writes a slot's file (durably).
pub(crate) fn write_slot(data_dir: &Path, name: &str, pos: &LogPos) -> Result<()> {
    let mut bytes = SLOT_MAGIC.to_vec();
    bytes.extend_from_slice(&pos.encode());
    assert_eq!(
        bytes.len(),
        SLOT_CRC_OFFSET,
        "a slot's fields as read_slot reads them"
    );
    write_durably(&slot_path(data_dir, name), &with_crc(bytes))
}

/// Removes a slot's file (durably).
pub(crate) fn remove_slot(data_dir: &Path, name: &str) -> Result<()> {
    let path = slot_path(data_dir, name);
    match fs::remove_file(&path) {
        Ok(()) => sync_dir(&data_dir.join(FEED_DIR)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).context(|| format!("removing {}", path.display())),
    }
}

/// tmp, fdatasync, rename, directory fsync: after a crash the file is the old one or the new.
/// (Also a backup set's identity file and manifests: `backup/set.rs`.)
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, bytes).context(|| format!("writing {}", tmp.display()))?;
    File::open(&tmp)
        .and_then(|f| f.sync_data())
        .context(|| format!("fdatasync {}", tmp.display()))?;
    fs::rename(&tmp, path).context(|| format!("renaming {} into place", tmp.display()))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .context(|| format!("syncing directory {}", dir.display()))
}

/// Whether a slot's file should be rewritten now (moved, and not written within the interval);
/// notes it as written.
pub(crate) fn due_for_persist(slot: &mut Slot, force: bool) -> bool {
    if slot.transient {
        return false;
    }
    let due = match slot.persisted {
        Some((pos, _)) if pos == slot.pos => false,
        Some((_, at)) => force || at.elapsed() >= Duration::from_millis(SLOT_PERSIST_INTERVAL_MS),
        None => true,
    };
    if due {
        slot.persisted = Some((slot.pos, Instant::now()));
    }
    due
}

pub(crate) fn new_slot(pos: LogPos) -> Slot {
    Slot {
        pos,
        released: false,
        for_snapshot: false,
        persisted: None,
        transient: false,
    }
}

/// A hold that lives in memory only, kept past the cap and past log pressure, released only
/// near a full budget (hold.rs): a backup's, for the time it reads its segments.
pub(crate) fn transient_slot(pos: LogPos) -> Slot {
    Slot {
        for_snapshot: true,
        transient: true,
        ..new_slot(pos)
    }
}
