//! Event parsing: one line of a tracefs block_rq_issue / block_rq_complete event, and the
//! kernel's rwbs flags.

/// The block layer counts in 512-byte sectors, whatever the device's block size.
pub const SECTOR_BYTES: u64 = 512;

/// One block_rq_issue / block_rq_complete line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEvent {
    pub time_ns: u64,
    pub issue: bool,
    pub major: u32,
    pub minor: u32,
    pub rwbs: String,
    pub bytes: u64,
    pub sector: u64,
    pub nr_sector: u64,
    pub comm: String,
}

/// Parses a trace line such as
/// `jbd2/loop0-8-18262 [000] ..... 2701.486414: block_rq_issue: 7,0 WSM 4096 () 262408 + 8 be,0,3 [jbd2/loop0-8]`.
/// Returns None for comment lines and other events.
pub fn parse_trace_line(line: &str) -> Option<RawEvent> {
    let (issue, marker) = if let Some(i) = line.find(": block_rq_issue: ") {
        (true, i)
    } else {
        (false, line.find(": block_rq_complete: ")?)
    };
    let time_field = line[..marker].rsplit(' ').next()?;
    let time_ns = parse_seconds_ns(time_field)?;
    let body = &line[marker..];
    let body = body
        .split_once(": ")
        .and_then(|(_, b)| b.split_once(": "))
        .map(|(_, b)| b)?;
    let mut words = body.split_whitespace();
    let (major, minor) = words.next()?.split_once(',')?;
    let rwbs = words.next()?.to_string();
    let bytes = if issue {
        words.next()?.parse().ok()?
    } else {
        0
    };
    // The "(cmd)" field; empty for file-system requests, but skip whatever is between the parens.
    let after_paren = body.split_once(") ")?.1;
    let mut rest = after_paren.split_whitespace();
    let sector: u64 = rest.next()?.parse().ok()?;
    if rest.next()? != "+" {
        return None;
    }
    let nr_sector: u64 = rest.next()?.parse().ok()?;
    let comm = body
        .rsplit_once('[')
        .map(|(_, c)| c.trim_end().trim_end_matches(']').to_string())
        .unwrap_or_default();
    Some(RawEvent {
        time_ns,
        issue,
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        bytes: if issue {
            bytes
        } else {
            nr_sector * SECTOR_BYTES
        },
        rwbs,
        sector,
        nr_sector,
        comm,
    })
}

fn parse_seconds_ns(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    let mut frac_ns: u64 = frac.parse().ok()?;
    for _ in frac.len()..9 {
        frac_ns *= 10;
    }
    Some(secs * 1_000_000_000 + frac_ns)
}

/// What an rwbs string says: the operation letter, and whether a preflush / FUA was attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RwbsOp {
    pub op: char,
    pub preflush: bool,
    pub fua: bool,
}

/// rwbs layout (kernel blk_fill_rwbs): optional 'F' for PREFLUSH, then the op letter
/// (W, R, D discard, E secure erase, Z zone ops, N none, or F for a pure flush), then 'F' for FUA,
/// 'A' readahead, 'S' sync, 'M' meta, 'P' prio.
pub fn parse_rwbs(rwbs: &str) -> RwbsOp {
    let chars: Vec<char> = rwbs.chars().collect();
    let (preflush, rest) = match chars.as_slice() {
        ['F', next, ..] if "WRDEZNF".contains(*next) => (true, &chars[1..]),
        _ => (false, &chars[..]),
    };
    let op = rest.first().copied().unwrap_or('N');
    let fua = rest.get(1) == Some(&'F');
    RwbsOp { op, preflush, fua }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_issue_and_complete_lines() {
        let issue = parse_trace_line("    jbd2/loop0-8-18262   [000] .....  2701.486414: block_rq_issue: 7,0 WSM 4096 () 262408 + 8 be,0,3 [jbd2/loop0-8]").expect("issue line");
        assert!(issue.issue);
        assert_eq!(
            (
                issue.major,
                issue.minor,
                issue.bytes,
                issue.sector,
                issue.nr_sector
            ),
            (7, 0, 4096, 262408, 8)
        );
        assert_eq!(issue.time_ns, 2_701_486_414_000);
        assert_eq!(issue.comm, "jbd2/loop0-8");
        let complete = parse_trace_line("     ksoftirqd/1-22      [001] ..s..  2701.487023: block_rq_complete: 7,0 FF () 18446744073709551615 + 0 none,0,0 [0]").expect("complete line");
        assert!(!complete.issue);
        assert_eq!(complete.rwbs, "FF");
        assert!(parse_trace_line("# tracer: nop").is_none());
        assert!(parse_trace_line("garbage: block_rq_issue: x").is_none());
    }

    #[test]
    fn rwbs_flags() {
        assert_eq!(
            parse_rwbs("FF"),
            RwbsOp {
                op: 'F',
                preflush: true,
                fua: false
            }
        );
        assert_eq!(
            parse_rwbs("WS"),
            RwbsOp {
                op: 'W',
                preflush: false,
                fua: false
            }
        );
        assert_eq!(
            parse_rwbs("FWFS"),
            RwbsOp {
                op: 'W',
                preflush: true,
                fua: true
            }
        );
        assert_eq!(
            parse_rwbs("WFSM"),
            RwbsOp {
                op: 'W',
                preflush: false,
                fua: true
            }
        );
        assert_eq!(
            parse_rwbs("RAM"),
            RwbsOp {
                op: 'R',
                preflush: false,
                fua: false
            }
        );
    }
}
