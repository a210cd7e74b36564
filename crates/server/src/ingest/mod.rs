//! Readings on their way in: the ingest threads every write path hands its readings to
//! (`writers`), the index of EdgeX event ids written beside them and read by id (`event_ids`),
//! and REST-posted events republished to EdgeX's message bus (`republish`). The routes that
//! take requests (HTTP and the bus) are in routes/; nothing here names the server's state.

pub mod event_ids;
pub mod republish;
pub mod writers;
