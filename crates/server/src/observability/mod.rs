//! What the server shows of itself: Prometheus metrics (`metrics`), the status page at `/` with
//! its history of samples and departures (`status`), the view of the cloud sink and the
//! handoffs both draw (`cloud_view`), and the process's log (`logs`).
//!
//! Owns: the metric families and their labels, the page's HTML, the history's bounded buffers.
//! May not touch: the server's state (`AppState`), the engine's writes, the routes. It is handed
//! plain figures (`CloudView`, `Stats`, samples) and counts; it imports only the departures'
//! record (`Waiting`), which the status page lists, and the log's settings.

pub mod cloud_view;
pub mod logs;
pub mod metrics;
pub mod status;
