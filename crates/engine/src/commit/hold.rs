//! The cap on what feed slots may hold: segments kept only for a slot are released, oldest first,
//! when they pass the cap or the log is under pressure, so a hold never makes a writer wait.
//! (Apart from `slots`, which `State` holds: these need the state, the slots do not.)

use crate::model::limits::{
    BACKUP_HOLD_RELEASE_PERCENT, FEED_HOLD_BUDGET_PERCENT, LOG_PRESSURE_PERCENT,
};
use crate::state::{Inner, State};

/// The cap in force: the option, or `FEED_HOLD_BUDGET_PERCENT` of the log budget.
pub(crate) fn hold_bytes_max(inner: &Inner) -> u64 {
    inner
        .options
        .feed_hold_bytes_max
        .unwrap_or(inner.spares.budget_bytes / 100 * FEED_HOLD_BUDGET_PERCENT)
}

/// Bytes of segments that only the hold keeps: the retirable prefix from the held segment on.
pub(crate) fn held_bytes(st: &State) -> u64 {
    let Some(from) = st.log.hold_from else {
        return 0;
    };
    st.log
        .complete_prefix()
        .filter(|(seq, _)| *seq >= from)
        .map(|(_, live)| live.segment.bytes)
        .sum()
}

/// Releases the oldest holds while the segments kept only for them are over the cap, or (any of
/// them) while the log is under pressure: a hold never makes a writer wait. Called under the
/// state lock (memory only) by maintenance right before it retires segments, and by a writer
/// that takes a new segment or finds the budget full, so that a hold is released the moment it
/// passes its cap, not at the next round of maintenance. Returns whether it released one.
pub(crate) fn enforce_cap(inner: &Inner, st: &mut State) -> bool {
    let cap = hold_bytes_max(inner);
    let log_bytes = inner.spares.log_bytes();
    let pressure = log_bytes > inner.spares.budget_bytes / 100 * LOG_PRESSURE_PERCENT;
    let nearly_full = log_bytes > inner.spares.budget_bytes / 100 * BACKUP_HOLD_RELEASE_PERCENT;
    let mut released = false;
    loop {
        let held = held_bytes(st);
        let Some(oldest) = st.log.hold_from else {
            return released;
        };
        if held == 0 || (held <= cap && !pressure) {
            return released;
        }
        let oldest_slots = || {
            st.feed
                .slots
                .values()
                .filter(move |s| !s.released && s.pos.seq == oldest)
        };
        // A reader scanning the devices keeps its hold past the cap; only the budget takes it.
        if !pressure && oldest_slots().any(|s| s.for_snapshot) {
            return released;
        }
        // A backup's copy keeps its hold until the budget is nearly full (limits.rs).
        if !nearly_full && oldest_slots().any(|s| s.transient) {
            return released;
        }
        released = true;
        for slot in st.feed.slots.values_mut() {
            if !slot.released && slot.pos.seq == oldest {
                slot.released = true;
                st.feed.releases += 1;
            }
        }
        st.log.hold_from = st.feed.hold_from();
    }
}
