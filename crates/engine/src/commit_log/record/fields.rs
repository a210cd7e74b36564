//! The field readers every record decoder shares: a length, an id, and the complaint of a
//! payload too short for its fixed fields.

use crate::dir::format;
use crate::model::limits;

pub(super) fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    format::u16_at(b, at).map(usize::from)
}
/// An id field: UTF-8, 1..=`max` bytes, no NUL (docs/FORMAT.md; the same rule `put` enforces).
pub(super) fn id_at<'a>(
    b: &'a [u8],
    at: usize,
    len: usize,
    what: &str,
    max: usize,
) -> Result<&'a str, String> {
    let bytes = b.get(at..at + len).ok_or("field runs past the payload")?;
    let id = std::str::from_utf8(bytes).map_err(|_| format!("{what} id is not UTF-8"))?;
    limits::id_problem(id, max).map_or(Ok(id), |problem| Err(format!("{what} id {problem}")))
}

pub(super) fn short() -> String {
    "payload shorter than its fixed fields".to_string()
}
