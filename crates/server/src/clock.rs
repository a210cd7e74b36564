//! The wall clock as the server records it: milliseconds for its own records (handoffs,
//! departures, the status page's history), nanoseconds for readings' times. A clock before 1970
//! reads 0; one past i64's nanoseconds (year 2262) reads the largest.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
