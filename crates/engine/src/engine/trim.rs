//! Deleting a device's old readings while it stays: `Engine::trim_before` writes one TRIM record
//! (docs/FORMAT.md), and applying it deletes every reading of the device with ts < the cutoff
//! that precedes the record in the log, wherever it is (docs/ENGINE.md, "Trimming old
//! readings"):
//!
//! - **In the log**: the index entries go (memory returns at once); the records stay in the
//!   log until their segment leaves it, as overwritten records do, and are not moved.
//! - **In windows**: a trim rule (cutoff, newest window given out so far) hides them from
//!   reads; they go with their window file, or when the device is consolidated.
//! - **In the settled space**: hidden from reads at once, deleted (one range delete per sensor)
//!   by the pass that takes the TRIM's segment, in its catalog batch.
//!
//! Applying a TRIM record is `State::apply` (state.rs), the same live and in recovery.

use crate::commit::group_commit::{self, Stall};
use crate::commit::index_apply;
use crate::commit_log::record;
use crate::model::error::Result;
use crate::model::reading::validate_device;
use crate::query;
use crate::state::Inner;
use crate::stats::Counters;

/// `Engine::trim_before`: logs one TRIM record when the device holds readings older than the
/// cutoff.
pub(crate) fn trim_before(inner: &Inner, device: &str, before_ns: i64) -> Result<bool> {
    validate_device(device)?;
    if !has_readings_before(inner, device, before_ns)? {
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
    record::encode_trim(&mut bytes, segment.seq_low(), device, before_ns);
    let ticket = st.log.enqueue(segment, offset, bytes, vec![(id, 0, len)]);
    if let Some(entry) = st.map.entry_mut(id) {
        entry.last_ticket = ticket;
    }
    group_commit::wait_for(inner, st, ticket)?;
    Counters::add(&inner.counters.trims, 1);
    Ok(true)
}

/// Whether the device holds a reading with ts < `before_ns`: in its index, or (read outside the
/// state lock) in the lower tier.
fn has_readings_before(inner: &Inner, device: &str, before_ns: i64) -> Result<bool> {
    {
        let mut st = inner.state.lock();
        index_apply::wait_for_device(inner, &mut st, device)?;
        match st.map.lookup(device) {
            None => return Ok(false),
            Some((_, entry)) if entry.index.has_before(before_ns) => return Ok(true),
            Some((_, entry)) if entry.lower.is_none() => return Ok(false),
            Some(_) => {}
        }
    }
    query::lower_has_before(inner, device, before_ns)
}
