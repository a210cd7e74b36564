//! What every HTTP handler shares, whichever part it belongs to: the error a request gets
//! (`error`: status, EdgeX's error body, and the mapping of engine errors) and a request body
//! read within its size and time bounds (`body`). It knows nothing of the server's state.

pub mod body;
pub mod error;
