//! Times as people and programs give them to the server: RFC 3339 with any fraction
//! (`2026-11-23T10:00:00.000000001Z`), a time relative to now (`-1h`, `-15m`, `-30s`), or an
//! integer (milliseconds since the epoch, as the native API took before nanoseconds); and the
//! RFC 3339 form of a reading's nanosecond timestamp for answers. One rule for every door: the
//! server's queries and answers, the CLI's arguments and JSON lines, and that fuzz target.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds to nanoseconds, the engine's one conversion (saturating at the ends of i64),
/// here beside the times that are given in milliseconds.
pub use roamkv_engine::ms_to_ns;

/// Nanoseconds since the epoch of a time argument (see the module doc), or why not.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms_to_ns(ms));
    }
    if let Some(ago) = text.strip_prefix('-') {
        let ago = humantime::parse_duration(ago)
            .map_err(|e| format!("{text:?} is not a relative time like -1h: {e}"))?;
        let at = SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("{text:?} reaches before the epoch"))?;
        return ns_since_epoch(at);
    }
    let at = humantime::parse_rfc3339_weak(text).map_err(|e| {
        format!(
            "{text:?} is not a time: give RFC 3339 (2026-11-23T10:00:00.5Z), a relative time \
             (-1h) or milliseconds since the epoch ({e})"
        )
    })?;
    ns_since_epoch(at)
}

fn ns_since_epoch(at: SystemTime) -> Result<i64, String> {
    let since = at.duration_since(UNIX_EPOCH).map_err(|_| {
        "times before 1970 are given in nanoseconds (the _ns form of the argument)".to_string()
    })?;
    i64::try_from(since.as_nanos()).map_err(|_| "the time is after 2262".to_string())
}

/// RFC 3339 with nanoseconds (UTC) for a reading's timestamp; none for times before 1970
/// (RFC 3339 tools rarely agree on those, and an integer would read back as milliseconds):
/// `ts_ns` carries them alone.
pub fn format_time(ts_ns: i64) -> Option<String> {
    let ns = u64::try_from(ts_ns).ok()?;
    Some(humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(ns)).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_relative_and_integer_times_parse_to_nanoseconds() {
        assert_eq!(
            parse_time("2023-11-14T22:13:20.000000001Z"),
            Ok(1_700_000_000_000_000_001)
        );
        assert_eq!(parse_time("1700000000000"), Ok(1_700_000_000_000_000_000));
        let an_hour_ago = parse_time("-1h").expect("relative");
        let now = ns_since_epoch(SystemTime::now()).expect("now");
        assert!((now - an_hour_ago - 3_600_000_000_000).abs() < 5_000_000_000);
        assert!(parse_time("yesterday").is_err());
        assert_eq!(
            format_time(1_700_000_000_000_000_001).as_deref(),
            Some("2023-11-14T22:13:20.000000001Z")
        );
        assert_eq!(format_time(-5), None);
    }
}
