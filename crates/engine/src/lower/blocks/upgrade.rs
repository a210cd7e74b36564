//! A format 2 directory (a key per reading) upgraded in place to format 3 (blocks), by the
//! first open that may write it:
//!
//! 1. the block spaces emptied (what an upgrade cut short left there);
//! 2. each window's readings rewritten as the same window in blocks, then the settled
//!    readings, a chunk of series at a time, each ingested as a run is;
//! 3. the identity file says format 3 (written whole, then renamed: the upgrade's commit);
//! 4. the legacy spaces emptied.
//!
//! A crash before 3 leaves a format 2 directory whose legacy spaces are whole: the next open
//! starts again at 1. A crash after 3 leaves legacy spaces that nothing reads: every writable
//! open of a format 3 directory empties them (`drop_legacy`). The catalog, the log and the
//! feed are the same in both formats and are not touched.

use super::BlockTier;
use crate::dir::DataDir;
use crate::lower::keys;
use crate::lower::{CatalogOp, LowerTier, Space};
use crate::model::error::Result;
use crate::model::ids::WindowId;

/// Above every key of the readings spaces (they begin with an 8-byte id that never reaches it).
const KEY_MAX: [u8; 9] = [0xff; 9];
/// Bytes of settled readings gathered into one run (cut only where a series ends).
const SETTLED_CHUNK_BYTES: usize = 16 << 20;

/// Rewrites the legacy spaces as blocks and marks the directory upgraded.
pub(crate) fn to_blocks(tier: &BlockTier, dir: &mut DataDir) -> Result<()> {
    let started = std::time::Instant::now();
    let wins: Vec<WindowId> = tier.window_files()?.iter().map(|f| f.win).collect();
    tier.drop_windows(&wins)?;
    clear(tier, Space::Settled)?;
    let (windows, mut readings) = copy_windows(tier)?;
    readings += copy_settled(tier)?;
    dir.mark_upgraded()?;
    drop_legacy(tier)?;
    eprintln!(
        "roamkv: upgraded {} to format {} (readings in blocks): {windows} windows and the \
         settled space, {readings} readings, in {:.1} s",
        dir.path.display(),
        dir.format,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Empties the legacy spaces (a no-op once they are empty).
pub(crate) fn drop_legacy(tier: &BlockTier) -> Result<()> {
    clear(tier, Space::LegacyWindows)?;
    clear(tier, Space::LegacySettled)
}

/// Deletes every key of a space and takes its files off disk.
fn clear(tier: &BlockTier, space: Space) -> Result<()> {
    if !tier.has_space(space) {
        return Ok(());
    }
    let Some((last, _)) = tier.inner.last_in(space, b"", &KEY_MAX)? else {
        return Ok(());
    };
    let range = (Vec::new(), keys::successor(&last));
    tier.inner.write_catalog(&[CatalogOp::DeleteRange(
        space,
        range.0.clone(),
        range.1.clone(),
    )])?;
    tier.inner.reclaim(space, &[range])
}

/// The first key of `space` at or above `from`.
fn first_at(tier: &BlockTier, space: Space, from: &[u8]) -> Result<Option<Vec<u8>>> {
    let mut first = None;
    tier.inner.scan(space, from, &KEY_MAX, &mut |k, _| {
        first = Some(k.to_vec());
        false
    })?;
    Ok(first)
}

/// Each legacy window as a window of blocks: (windows, readings).
fn copy_windows(tier: &BlockTier) -> Result<(u64, u64)> {
    let (mut windows, mut readings) = (0, 0);
    let mut from = Vec::new();
    while let Some(first) = first_at(tier, Space::LegacyWindows, &from)? {
        let win = keys::window_of(&first).ok_or_else(|| crate::lower::malformed(&first))?;
        let end = win.next().0.to_be_bytes().to_vec();
        let mut run = Vec::new();
        tier.inner
            .scan(Space::LegacyWindows, &first, &end, &mut |k, v| {
                run.push((k.to_vec(), v.to_vec()));
                true
            })?;
        readings += run.len() as u64;
        windows += 1;
        let prepared = tier.prepare_run(Space::Windows, run)?;
        tier.ingest(prepared)?;
        from = end;
    }
    Ok((windows, readings))
}

/// The legacy settled space as settled blocks, a chunk of whole series at a time.
fn copy_settled(tier: &BlockTier) -> Result<u64> {
    let mut readings = 0;
    let mut from = Vec::new();
    loop {
        let (mut run, mut bytes) = (Vec::new(), 0);
        let mut next = None;
        tier.inner
            .scan(Space::LegacySettled, &from, &KEY_MAX, &mut |k, v| {
                let series_ends = run.last().is_some_and(|(last, _): &(Vec<u8>, Vec<u8>)| {
                    super::series_of(last) != super::series_of(k)
                });
                if bytes >= SETTLED_CHUNK_BYTES && series_ends {
                    next = Some(k.to_vec());
                    return false;
                }
                bytes += k.len() + v.len();
                run.push((k.to_vec(), v.to_vec()));
                true
            })?;
        if run.is_empty() {
            return Ok(readings);
        }
        readings += run.len() as u64;
        let prepared = tier.prepare_run(Space::Settled, run)?;
        tier.ingest(prepared)?;
        match next {
            Some(key) => from = key,
            None => return Ok(readings),
        }
    }
}
