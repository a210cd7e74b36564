//! Readings in blocks: the lower tier as the rooms above see it (a key per reading: keys.rs),
//! stored as one entry per block of a (device, sensor) run (codec.rs). A block's key is its
//! first reading's key; the blocks of one series in one place never overlap, so the reading
//! at a key is in the last block whose key is at or below it.
//!
//! Every operation of `LowerTier` is translated here, so that maintenance, queries, export and
//! handoff read and write readings as before:
//!
//! - a run (`prepare_run`) is cut into blocks of at most `BLOCK_READINGS_MAX` readings or about
//!   `BLOCK_VALUE_BYTES_TARGET` bytes of values. A settled run is merged with the settled
//!   blocks it overlaps (the newer reading wins, as an ingested key always did) and with a
//!   small block just before it (so that consolidation makes few large blocks out of many
//!   small moves); every old block's key starts a new block again, so each old entry is
//!   overwritten by the run and none needs a delete.
//! - a range delete (`write_catalog`) deletes the blocks whose first reading lies in the
//!   range, and writes again, within the same batch, the part outside the range of a block
//!   straddling either end (puts first, then the deletes: a later range in the same batch may
//!   delete what an earlier one's rewrite kept).
//! - `get`, `scan` and `last_in` seek to the block holding their start and decode.
//!
//! The catalog passes through untouched.

pub mod codec;
pub(crate) mod upgrade;

use std::path::Path;

use super::keys::{decode_ts, encode_ts, key_after};
use super::{CatalogOp, LowerTier, PreparedRun, Space, WindowFile};
use crate::model::error::{Error, Result};
use crate::model::ids::WindowId;
use crate::stats::LowerDiagnostics;
use codec::{BLOCK_READINGS_MAX, BLOCK_VALUE_BYTES_TARGET};

/// The bytes of a reading key's timestamp (its last 8: keys.rs).
const TS_BYTES: usize = 8;

/// A block as read: its key and its readings' (ts, value).
struct Block {
    key: Vec<u8>,
    readings: Vec<(i64, Vec<u8>)>,
}

impl Block {
    fn series(&self) -> &[u8] {
        series_of(&self.key)
    }
    fn reading_key(&self, ts: i64) -> Vec<u8> {
        reading_key(self.series(), ts)
    }
}

/// A reading key's series (everything before its timestamp: the window, device and sensor).
fn series_of(key: &[u8]) -> &[u8] {
    &key[..key.len().saturating_sub(TS_BYTES)]
}

fn ts_of(key: &[u8]) -> Option<i64> {
    let at = key.len().checked_sub(TS_BYTES)?;
    Some(decode_ts(key[at..].try_into().ok()?))
}

fn reading_key(series: &[u8], ts: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(series.len() + TS_BYTES);
    key.extend_from_slice(series);
    key.extend_from_slice(&encode_ts(ts));
    key
}

/// Whether a space holds blocks (the others pass through untouched).
fn in_blocks(space: Space) -> bool {
    matches!(space, Space::Windows | Space::Settled)
}

/// The lower tier with its data spaces in blocks.
pub struct BlockTier {
    inner: Box<dyn LowerTier>,
}

impl BlockTier {
    pub fn new(inner: Box<dyn LowerTier>) -> BlockTier {
        BlockTier { inner }
    }

    fn decode(&self, space: Space, key: &[u8], value: &[u8]) -> Result<Block> {
        let first_ts = ts_of(key).ok_or_else(|| super::malformed(key))?;
        let readings = codec::decode(first_ts, value).map_err(|e| {
            Error::Lower(format!(
                "a damaged reading block in the lower tier's {space:?} space at key {key:?}: {}",
                e.0
            ))
        })?;
        Ok(Block {
            key: key.to_vec(),
            readings,
        })
    }

    /// The last block with a key below `end` (of any series), decoded.
    fn last_block_below(&self, space: Space, end: &[u8]) -> Result<Option<Block>> {
        match self.inner.last_in(space, b"", end)? {
            Some((k, v)) => Ok(Some(self.decode(space, &k, &v)?)),
            None => Ok(None),
        }
    }

    /// The block holding readings at or above `at` that begins below it: the last block below
    /// `at` if `at` lies in its series' key range.
    fn block_across(&self, space: Space, at: &[u8]) -> Result<Option<Block>> {
        Ok(self
            .last_block_below(space, at)?
            .filter(|block| reaches(block, at)))
    }

    /// The blocks of a settled run: merged with the settled blocks it overlaps and a small one
    /// just before it, cut where any old block began.
    fn settled_blocks(&self, run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for series in split_series(run) {
            let first = series.first().expect("a series has a reading").0.clone();
            let last = series.last().expect("a series has a reading").0.clone();
            let mut merged = std::collections::BTreeMap::new();
            let mut cuts = std::collections::BTreeSet::new();
            let mut old = Vec::new();
            // The block before the run: merged if the run begins inside it, or if it is a
            // small block of the same series (consolidation makes few large blocks).
            if let Some(before) = self.last_block_below(Space::Settled, &first)?
                && (reaches(&before, &first)
                    || (before.series() == series_of(&first)
                        && before.readings.len() < BLOCK_READINGS_MAX / 2))
            {
                old.push(before);
            }
            let mut bad = None;
            self.inner.scan(
                Space::Settled,
                &first,
                &key_after(&last),
                &mut |k, v| match self.decode(Space::Settled, k, v) {
                    Ok(block) => {
                        old.push(block);
                        true
                    }
                    Err(e) => {
                        bad = Some(e);
                        false
                    }
                },
            )?;
            if let Some(e) = bad {
                return Err(e);
            }
            for block in old {
                cuts.insert(block.readings[0].0);
                merged.extend(block.readings);
            }
            let prefix = series_of(&first).to_vec();
            for (k, v) in series {
                merged.insert(ts_of(&k).ok_or_else(|| super::malformed(&k))?, v);
            }
            out.extend(cut_blocks(&prefix, merged.into_iter().collect(), &cuts));
        }
        Ok(out)
    }

    /// A range delete's rewrites: what a block straddling `start` or `end` keeps outside.
    fn straddle_puts(&self, space: Space, start: &[u8], end: &[u8]) -> Result<Vec<CatalogOp>> {
        let mut puts = Vec::new();
        let mut keep = |block: &Block, from_end: bool| {
            let part: Vec<(i64, &[u8])> = block
                .readings
                .iter()
                .filter(|(ts, _)| {
                    let key = block.reading_key(*ts);
                    if from_end {
                        key.as_slice() >= end
                    } else {
                        key.as_slice() < start
                    }
                })
                .map(|(ts, v)| (*ts, v.as_slice()))
                .collect();
            if let Some((first_ts, _)) = part.first() {
                let key = block.reading_key(*first_ts);
                puts.push(CatalogOp::Put(space, key, codec::encode(&part)));
            }
        };
        if let Some(block) = self.block_across(space, start)? {
            keep(&block, false);
            keep(&block, true);
        }
        if let Some((k, v)) = self.inner.last_in(space, start, end)? {
            let block = self.decode(space, &k, &v)?;
            keep(&block, true);
        }
        Ok(puts)
    }
}

/// Whether `block` holds readings at or above `at` (a key of its series at or after its first).
fn reaches(block: &Block, at: &[u8]) -> bool {
    at.starts_with(block.series())
        && block
            .readings
            .last()
            .is_some_and(|(ts, _)| block.reading_key(*ts).as_slice() >= at)
}

/// The run's readings grouped by series, in order.
fn split_series(run: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut groups: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    for (k, v) in run {
        match groups.last_mut() {
            Some(g) if series_of(&g[0].0) == series_of(&k) => g.push((k, v)),
            _ => groups.push(vec![(k, v)]),
        }
    }
    groups
}

/// A series' readings (ascending) as blocks, a new one begun at every timestamp in `cuts` and
/// whenever the current one is full.
fn cut_blocks(
    series: &[u8],
    readings: Vec<(i64, Vec<u8>)>,
    cuts: &std::collections::BTreeSet<i64>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut block: Vec<(i64, &[u8])> = Vec::new();
    let mut value_bytes = 0;
    for (ts, v) in &readings {
        let full = block.len() == BLOCK_READINGS_MAX || value_bytes >= BLOCK_VALUE_BYTES_TARGET;
        if !block.is_empty() && (full || cuts.contains(ts)) {
            out.push((reading_key(series, block[0].0), codec::encode(&block)));
            block.clear();
            value_bytes = 0;
        }
        block.push((*ts, v));
        value_bytes += v.len();
    }
    if !block.is_empty() {
        out.push((reading_key(series, block[0].0), codec::encode(&block)));
    }
    out
}

/// A run of the runs space as blocks (a new window: nothing of it exists yet).
fn window_blocks(run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for series in split_series(run) {
        let prefix = series_of(&series[0].0).to_vec();
        let readings = series
            .into_iter()
            .map(|(k, v)| Ok((ts_of(&k).ok_or_else(|| super::malformed(&k))?, v)))
            .collect::<Result<Vec<_>>>()?;
        out.extend(cut_blocks(&prefix, readings, &Default::default()));
    }
    Ok(out)
}

impl LowerTier for BlockTier {
    fn prepare_run(&self, space: Space, run: Vec<(Vec<u8>, Vec<u8>)>) -> Result<PreparedRun> {
        let blocks = match space {
            Space::Windows => window_blocks(run)?,
            Space::Settled => self.settled_blocks(run)?,
            Space::Catalog | Space::LegacyWindows | Space::LegacySettled => run,
        };
        self.inner.prepare_run(space, blocks)
    }

    fn ingest(&self, run: PreparedRun) -> Result<()> {
        self.inner.ingest(run)
    }

    fn discard(&self, run: PreparedRun) {
        self.inner.discard(run)
    }

    fn write_catalog(&self, ops: &[CatalogOp]) -> Result<()> {
        let mut batch = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                CatalogOp::DeleteRange(space @ (Space::Windows | Space::Settled), s, e) => {
                    batch.extend(self.straddle_puts(*space, s, e)?)
                }
                CatalogOp::Put(Space::Catalog, ..)
                | CatalogOp::Delete(Space::Catalog, _)
                | CatalogOp::DeleteRange(..) => {}
                other => {
                    return Err(Error::Lower(format!(
                        "{other:?}: readings are written by runs, deleted by ranges"
                    )));
                }
            }
        }
        batch.extend(ops.iter().cloned());
        self.inner.write_catalog(&batch)
    }

    fn drop_windows(&self, wins: &[WindowId]) -> Result<()> {
        self.inner.drop_windows(wins)
    }

    fn reclaim(&self, space: Space, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        self.inner.reclaim(space, ranges)
    }

    fn settled_bytes(&self) -> (u64, u64) {
        self.inner.settled_bytes()
    }

    fn window_files(&self) -> Result<Vec<WindowFile>> {
        self.inner.window_files()
    }

    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if !in_blocks(space) {
            return self.inner.get(space, key);
        }
        let Some(ts) = ts_of(key) else {
            return Ok(None);
        };
        let Some((k, v)) = self.inner.last_in(
            space,
            &reading_key(series_of(key), i64::MIN),
            &key_after(key),
        )?
        else {
            return Ok(None);
        };
        let block = self.decode(space, &k, &v)?;
        Ok(block
            .readings
            .binary_search_by_key(&ts, |(t, _)| *t)
            .ok()
            .map(|at| block.readings[at].1.clone()))
    }

    fn scan(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if !in_blocks(space) {
            return self.inner.scan(space, start, end, visit);
        }
        // One iteration of the inner tier, from the block that holds `start` (if one begins
        // below it): a settled merge between two reads could otherwise show a reading twice.
        // Within one iteration the blocks of a series never overlap; `after` keeps the keys
        // ascending all the same.
        let from = match self.inner.last_in(space, b"", start)? {
            Some((k, _)) if start.starts_with(series_of(&k)) => k,
            _ => start.to_vec(),
        };
        let mut after: Option<Vec<u8>> = None;
        let mut failed = None;
        self.inner.scan(space, &from, end, &mut |k, v| {
            let block = match self.decode(space, k, v) {
                Ok(block) => block,
                Err(e) => {
                    failed = Some(e);
                    return false;
                }
            };
            for (ts, v) in &block.readings {
                let key = block.reading_key(*ts);
                if key.as_slice() < start || after.as_ref().is_some_and(|a| key <= *a) {
                    continue;
                }
                if key.as_slice() >= end || !visit(&key, v) {
                    return false;
                }
                after = Some(key);
            }
            true
        })?;
        failed.map_or(Ok(()), Err)
    }

    fn last_in(
        &self,
        space: Space,
        start: &[u8],
        end: &[u8],
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if !in_blocks(space) {
            return self.inner.last_in(space, start, end);
        }
        let Some((k, v)) = self.inner.last_in(space, b"", end)? else {
            return Ok(None);
        };
        if k.as_slice() < start && !start.starts_with(series_of(&k)) {
            return Ok(None); // the block lies wholly below the range
        }
        let block = self.decode(space, &k, &v)?;
        Ok(block
            .readings
            .iter()
            .rev()
            .map(|(ts, v)| (block.reading_key(*ts), v))
            .find(|(key, _)| key.as_slice() < end)
            .filter(|(key, _)| key.as_slice() >= start)
            .map(|(key, v)| (key, v.clone())))
    }

    fn bytes_written(&self) -> u64 {
        self.inner.bytes_written()
    }

    fn estimate(&self) -> (u64, u64) {
        self.inner.estimate()
    }

    /// The tier's own checks, then every block decoded.
    fn verify(&self) -> Result<u64> {
        let entries = self.inner.verify()?;
        for space in [Space::Windows, Space::Settled] {
            let mut failed = None;
            self.inner.scan(
                space,
                b"",
                &[0xff; 9],
                &mut |k, v| match self.decode(space, k, v) {
                    Ok(_) => true,
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                },
            )?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(entries)
    }

    fn diagnostics(&self) -> LowerDiagnostics {
        self.inner.diagnostics()
    }

    fn has_space(&self, space: Space) -> bool {
        self.inner.has_space(space)
    }

    fn checkpoint(&self, to: &Path) -> Result<()> {
        self.inner.checkpoint(to)
    }
}

#[cfg(test)]
mod tests;
