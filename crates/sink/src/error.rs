//! What a destination's calls fail with (either destination: db.rs, kafka/), sorted by what the
//! sink does next, and sink URLs as messages show them (without their password).

/// Why a call to the destination failed, by what the sink does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbError {
    /// Worth retrying: the destination is down, restarting, overloaded, or a transaction lost a
    /// serialization conflict.
    Retryable(String),
    /// A retry will fail the same way (schema, permissions, bad data): the sink stops and says
    /// so; the log's hold keeps the backlog up to its cap.
    Fatal(String),
    /// Another process moved this edge's cursor: two writers under one identity.
    Fenced(String),
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Retryable(m) => write!(f, "{m} (retrying)"),
            DbError::Fatal(m) => write!(f, "{m}"),
            DbError::Fenced(m) => write!(f, "{m}"),
        }
    }
}

/// The URL with its password hidden, for messages and the status page.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
