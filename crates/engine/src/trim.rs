//! Deleting a device's old readings while it stays: `Engine::trim_before` writes one TRIM record
//! (docs/FORMAT.md), and applying it drops every reading of the device with ts < the cutoff
//! that precedes the record in the log, in whichever tier the device is (docs/ENGINE.md,
//! "Trimming old readings"):
//!
//! - **Upper**: the index entries go (memory returns at once); the records stay in the log,
//!   holding their segments until the device leaves the upper tier, as overwritten records do.
//! - **Migrating**: the same, and the run being ingested still holds the trimmed readings, so
//!   the migration ends with a lower-tier trim before its catch-up puts (`maintenance.rs`).
//! - **Lower**: one range delete per sensor of the device (`LowerOp::TrimBefore`), unsynced in
//!   the LSM and covered by the TRIM record until the next persist (the record's segment counts
//!   a lower-tier write, so it cannot retire before that persist).
//!
//! Applying a TRIM record is `DeviceEntry::apply_trim` (mapping.rs: the engine's apply path
//! calls it, and the engine must not import this module back).
//!
//! Replay applies a TRIM the same way, in log order: a settled device's logged puts are re-put
//! and then trimmed again, and puts after the TRIM (which in-order retirement keeps live
//! whenever the TRIM is live) are re-put after it.

use crate::commit_log::group_commit::{self, Stall};
use crate::error::Result;
use crate::lower;
use crate::mapping::Tier;
use crate::reading::validate_device;
use crate::record;
use crate::state::Inner;
use crate::stats::Counters;

/// `Engine::trim_before`: logs one TRIM record when the device holds readings older than the
/// cutoff.
pub(crate) fn trim_before(inner: &Inner, device: &str, before_ms: i64) -> Result<bool> {
    validate_device(device)?;
    if !has_readings_before(inner, device, before_ms)? {
        return Ok(false);
    }
    let len = record::trim_len(device);
    let mut st = inner.state.lock();
    let mut stall = Stall::default();
    let id = loop {
        inner.check_poisoned(&st)?;
        let Some(id) = st.map.id(device) else {
            return Ok(false);
        };
        if group_commit::make_room(inner, &mut st, len, &mut stall)? {
            break id;
        }
    };
    let (segment, offset) = group_commit::place(inner, &mut st, len);
    let mut bytes = Vec::with_capacity(len);
    record::encode_trim(&mut bytes, segment.seq_low(), device, before_ms);
    let ticket = st.log.enqueue(segment, offset, bytes, vec![(id, 0, len)]);
    group_commit::wait_for(inner, st, ticket)?;
    Counters::add(&inner.counters.trims, 1);
    Ok(true)
}

/// Whether the device holds a reading with ts < `before_ms` (upper tier: its index; lower
/// tier: the oldest key of each sensor, read outside the state lock).
fn has_readings_before(inner: &Inner, device: &str, before_ms: i64) -> Result<bool> {
    let lower_id = {
        let st = inner.state.lock();
        match st.map.lookup(device) {
            None => return Ok(false),
            Some((_, entry)) if entry.tier != Tier::Lower => {
                return Ok(entry.index.has_before(before_ms));
            }
            Some((_, entry)) => entry.lower_id,
        }
    };
    Ok(lower::oldest_per_sensor(inner.lower.as_ref(), lower_id)?
        .iter()
        .any(|(_, oldest_ms)| *oldest_ms < before_ms))
}
