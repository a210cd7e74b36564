//! The query of an EdgeX v3 request, parsed as core-data parses it (edgex-go
//! internal/pkg/utils/http.go): `offset` (-1: skip counting the total), `limit` (-1: up to
//! MaxResultCount), `numeric` (Go's `strconv.ParseBool` forms), `aggregateFunc`, and roamkv's
//! `every` (aggregate buckets); path times as signed nanoseconds. Bad values are a 400 naming the
//! parameter; nothing is silently clamped or ignored, and a parameter a route does not take is
//! refused (`EVENT_PARAMETERS`, `READING_PARAMETERS`).

use std::collections::HashMap;

use axum::http::StatusCode;
use roamkv_wire::edgex::aggregate::AggregateFunc;

use crate::http::error::ApiError;

/// The query parameters of the events routes: core-data's (its OpenAPI document's
/// `offsetParam`, `limitParam`, `numericParam`). Any other is refused (`crate::http::query`);
/// core-data ignores it (tests/edgex_openapi/DEVIATIONS.md, D15).
pub const EVENT_PARAMETERS: [&str; 3] = ["offset", "limit", "numeric"];

/// The query parameters of the readings routes: core-data's, with `aggregateFunc`, and roamkv's
/// `every`.
pub const READING_PARAMETERS: [&str; 5] = ["offset", "limit", "numeric", "aggregateFunc", "every"];

/// EdgeX's default page size.
const LIMIT_DEFAULT: usize = 20;

/// The largest offset core-data takes (math.MaxInt32 in its controllers).
const OFFSET_MAX: i64 = i32::MAX as i64;

/// `offset` and `limit` as EdgeX takes them.
pub struct Paging {
    pub offset: usize,
    pub limit: usize,
    /// false for `offset=-1`: core-data then skips counting and answers totalCount 0.
    pub count_total: bool,
}

/// What a readings (or events) request asks beyond its path.
pub struct ReadingQuery {
    pub paging: Paging,
    pub numeric: bool,
    pub aggregate: Option<AggregateFunc>,
    /// Bucket width of an aggregate over time (`every=1m`), in nanoseconds.
    pub every_ns: Option<i64>,
}

pub fn paging(
    query: &HashMap<String, String>,
    max_result_count: usize,
) -> Result<Paging, ApiError> {
    let (offset, count_total) = match query.get("offset").map(|t| (t, t.trim().parse::<i64>())) {
        None => (0, true),
        Some((_, Ok(-1))) => (0, false),
        Some((_, Ok(n))) if (0..=OFFSET_MAX).contains(&n) => (n as usize, true),
        Some((text, _)) => {
            return Err(ApiError::bad_request(format!(
                "offset {text:?} is not an integer from -1 to {OFFSET_MAX}"
            )));
        }
    };
    let limit = match query.get("limit").map(|t| (t, t.trim().parse::<i64>())) {
        None => LIMIT_DEFAULT.min(max_result_count),
        Some((_, Ok(-1))) => max_result_count,
        Some((_, Ok(n))) if n >= 0 && n as u64 <= max_result_count as u64 => n as usize,
        // Said, not clamped: a client asking for more than it gets must know. 400, as
        // core-data answers it (its limit's range is -1..=MaxResultCount).
        Some((_, Ok(n))) if n >= 0 => {
            return Err(ApiError::bad_request(format!(
                "limit {n} is above MaxResultCount {max_result_count} (--max-result-count); \
                     page with offset, or ask for -1 (everything up to MaxResultCount)"
            )));
        }
        Some((text, _)) => {
            return Err(ApiError::bad_request(format!(
                "limit {text:?} is not an integer >= -1"
            )));
        }
    };
    Ok(Paging {
        offset,
        limit,
        count_total,
    })
}

/// Go's `strconv.ParseBool`, which core-data's parameters go through.
fn parse_bool(name: &str, text: &str) -> Result<bool, ApiError> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "{name} {text:?} is not true or false"
        ))),
    }
}

/// `numeric`, on events and readings.
pub fn numeric(query: &HashMap<String, String>) -> Result<bool, ApiError> {
    query
        .get("numeric")
        .map_or(Ok(false), |text| parse_bool("numeric", text))
}

/// The whole query of a readings route.
pub fn reading_query(
    query: &HashMap<String, String>,
    max_result_count: usize,
) -> Result<ReadingQuery, ApiError> {
    let paging = paging(query, max_result_count)?;
    let numeric = numeric(query)?;
    let aggregate = match query.get("aggregateFunc") {
        None => None,
        Some(text) => Some(AggregateFunc::parse(text)?),
    };
    let every_ns = match query.get("every") {
        None => None,
        Some(_) if aggregate.is_none() => {
            return Err(ApiError::bad_request(
                "every buckets an aggregate: give aggregateFunc=MIN|MAX|COUNT|SUM|AVG with it",
            ));
        }
        Some(text) => Some(every(text)?),
    };
    Ok(ReadingQuery {
        paging,
        numeric,
        aggregate,
        every_ns,
    })
}

/// `every=1m` (humantime: 500ms, 10s, 1h30m, 1d) or a number of nanoseconds.
fn every(text: &str) -> Result<i64, ApiError> {
    let ns = match text.parse::<i64>() {
        Ok(ns) => ns,
        Err(_) => humantime::parse_duration(text)
            .ok()
            .and_then(|d| i64::try_from(d.as_nanos()).ok())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "every {text:?} is not a duration (500ms, 10s, 1m, 1h, 1d) or nanoseconds"
                ))
            })?,
    };
    if ns <= 0 {
        return Err(ApiError::bad_request(format!(
            "every {text:?} is not a positive duration"
        )));
    }
    Ok(ns)
}

/// A time in a path, in Unix nanoseconds. A number past i64 (the document allows any integer)
/// saturates: it is a time no reading has, before or after every reading.
pub fn path_ns(what: &str, text: &str) -> Result<i64, ApiError> {
    if let Ok(ns) = text.parse::<i64>() {
        return Ok(ns);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(if text.starts_with('-') {
            i64::MIN
        } else {
            i64::MAX
        });
    }
    Err(ApiError::bad_request(format!(
        "{what} {text:?} is not a Unix time in nanoseconds (an integer)"
    )))
}

/// start and end of a path, end not before start.
pub fn window(start: &str, end: &str) -> Result<(i64, i64), ApiError> {
    let (start, end) = (path_ns("start", start)?, path_ns("end", end)?);
    if end < start {
        return Err(ApiError::bad_request(format!(
            "end {end} is before start {start}"
        )));
    }
    Ok((start, end))
}

/// Applies offset/limit as core-data does: an offset past a non-empty total is 416; the total
/// is 0 when not counted (`offset=-1`).
pub fn apply_paging<T>(items: Vec<T>, paging: &Paging) -> Result<(Vec<T>, usize), ApiError> {
    let total = items.len();
    if total > 0 && paging.offset > total {
        return Err(ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("offset {} is past the {total} items", paging.offset),
        ));
    }
    let page = items
        .into_iter()
        .skip(paging.offset)
        .take(paging.limit)
        .collect();
    Ok((page, if paging.count_total { total } else { 0 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn paging_takes_minus_one_and_refuses_what_it_cannot_give() {
        let p = paging(&query(&[("offset", "-1"), ("limit", "-1")]), 50).expect("parses");
        assert_eq!((p.offset, p.limit, p.count_total), (0, 50, false));
        assert!(paging(&query(&[("offset", "-2")]), 50).is_err());
        assert!(paging(&query(&[("limit", "51")]), 50).is_err());
        assert_eq!(paging(&query(&[]), 50).expect("parses").limit, 20);
    }

    #[test]
    fn numeric_and_every_are_parsed_as_said() {
        assert!(numeric(&query(&[("numeric", "1")])).expect("parses"));
        assert!(!numeric(&query(&[("numeric", "F")])).expect("parses"));
        assert!(numeric(&query(&[("numeric", "yes")])).is_err());
        let q = reading_query(&query(&[("aggregateFunc", "avg"), ("every", "1m")]), 10)
            .expect("parses");
        assert_eq!(q.aggregate, Some(AggregateFunc::Avg));
        assert_eq!(q.every_ns, Some(60_000_000_000));
        assert!(reading_query(&query(&[("every", "1m")]), 10).is_err());
        assert!(reading_query(&query(&[("aggregateFunc", "SUM"), ("every", "0")]), 10).is_err());
    }

    #[test]
    fn path_times_past_i64_saturate_and_words_are_refused() {
        assert_eq!(
            path_ns("start", "99999999999999999999").expect("parses"),
            i64::MAX
        );
        assert_eq!(
            path_ns("start", "-99999999999999999999").expect("parses"),
            i64::MIN
        );
        assert_eq!(path_ns("start", "-5").expect("parses"), -5);
        assert!(path_ns("start", "soon").is_err());
        assert!(path_ns("start", "-").is_err());
    }
}
