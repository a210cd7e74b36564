//! The engine's ids, a leaf every room may use.
//!
//! The three numbers the lower tier and the log are addressed by are newtypes, so that a window
//! can never be passed where a lower id or a segment is meant (they were all bare `u64`s, and
//! tuples of them read as `(u64, u64)`). Each is written on disk as 8 big-endian bytes
//! (docs/FORMAT.md); `.0` is that number.

use std::fmt;

/// An incarnation of a device, in memory (never on disk): a device that departs and comes back
/// is a new incarnation (mapping.rs).
pub type DeviceId = u64;

/// A device's prefix in the lower tier's keys (lower/keys.rs): given once, never reused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LowerId(pub u64);

/// A window of the lower tier: the readings one pass moved out of the log, in one file
/// (docs/ENGINE.md "Windows"). Ids ascend with the passes that wrote them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WindowId(pub u64);

/// A segment of the commit log, numbered in the order the log wrote them (its file name and
/// header carry it; records carry its low 32 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentSeq(pub u64);

impl SegmentSeq {
    /// The segment after this one.
    pub fn next(self) -> SegmentSeq {
        SegmentSeq(self.0 + 1)
    }
}

impl WindowId {
    /// The window after this one.
    pub fn next(self) -> WindowId {
        WindowId(self.0 + 1)
    }
}

impl LowerId {
    /// The lower id after this one.
    pub fn next(self) -> LowerId {
        LowerId(self.0 + 1)
    }
}

macro_rules! display_as_number {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    )*};
}
display_as_number!(LowerId, WindowId, SegmentSeq);
