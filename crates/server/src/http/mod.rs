//! What every HTTP handler shares, whichever part it belongs to: the error a request gets
//! (`error`: status, EdgeX's error body, and the mapping of engine errors), a request body read
//! within its size and time bounds (`body`), and a query string checked against the parameters
//! its route takes (`query`). It knows nothing of the server's state.

pub mod body;
pub mod error;
pub mod query;
