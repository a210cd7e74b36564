//! A request's query string checked against the parameters its route takes. An unknown one (a
//! typo: `limt=`, `form=-1m`) is refused with 400 naming it and the ones the route takes, never
//! ignored: an ignored parameter changes the answer (a wider range, another page size) while the
//! answer says 200. A parameter given twice is refused too, unless the route takes a list.
//! Every route of the EdgeX and native APIs checks its query here: those that take parameters
//! with `pairs` or `parameters`, the others with the `NoQuery` extractor.

use std::collections::HashMap;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::error::ApiError;

/// The query's pairs in order, each a parameter of `takes`; `repeatable` ones may come more
/// than once, any other only once.
pub fn pairs(
    query: Option<&str>,
    takes: &[&str],
    repeatable: &[&str],
) -> Result<Vec<(String, String)>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("the query string does not parse: {e}")))?;
    for (i, (name, _)) in pairs.iter().enumerate() {
        if !takes.contains(&name.as_str()) {
            return Err(unknown(name, takes));
        }
        if !repeatable.contains(&name.as_str()) && pairs[..i].iter().any(|(n, _)| n == name) {
            return Err(ApiError::bad_request(format!(
                "query parameter {name:?} is given twice"
            )));
        }
    }
    Ok(pairs)
}

/// The query's parameters by name, each one of `takes` and given at most once.
pub fn parameters(
    query: Option<&str>,
    takes: &[&str],
) -> Result<HashMap<String, String>, ApiError> {
    Ok(pairs(query, takes, &[])?.into_iter().collect())
}

/// The extractor of a route that takes no query parameters: any is refused with 400.
pub struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        pairs(parts.uri.query(), &[], &[]).map(|_| NoQuery)
    }
}

fn unknown(name: &str, takes: &[&str]) -> ApiError {
    if takes.is_empty() {
        return ApiError::bad_request(format!(
            "unknown query parameter {name:?}: this route takes no query parameters"
        ));
    }
    let near = takes
        .iter()
        .filter(|known| edit_distance(name, known) <= 2)
        .min_by_key(|known| edit_distance(name, known))
        .map(|known| format!(" (did you mean {known}?)"))
        .unwrap_or_default();
    ApiError::bad_request(format!(
        "unknown query parameter {name:?}{near}: this route takes {}",
        takes.join(", ")
    ))
}

/// Levenshtein distance, by characters (names are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_repeated_parameters_are_refused_with_their_names() {
        let takes = ["offset", "limit"];
        let e = parameters(Some("limt=5"), &takes).expect_err("typo");
        assert!(
            e.message.contains("\"limt\" (did you mean limit?)")
                && e.message.ends_with("takes offset, limit"),
            "{}",
            e.message
        );
        let e = parameters(Some("limit=1&limit=2"), &takes).expect_err("twice");
        assert!(e.message.contains("given twice"), "{}", e.message);
        let e = pairs(Some("x=1"), &[], &[]).expect_err("none taken");
        assert!(e.message.contains("takes no query"), "{}", e.message);
        let e = parameters(Some("zzzzzz=1"), &takes).expect_err("far");
        assert!(!e.message.contains("did you mean"), "{}", e.message);
        assert_eq!(
            parameters(Some("limit=1&offset=2"), &takes)
                .expect("known")
                .len(),
            2
        );
        assert!(parameters(None, &takes).expect("none").is_empty());
        assert!(parameters(Some(""), &[]).expect("empty").is_empty());
        let listed = pairs(Some("device=a&device=b"), &["device"], &["device"]).expect("list");
        assert_eq!(listed.len(), 2);
        assert_eq!(edit_distance("form", "from"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
