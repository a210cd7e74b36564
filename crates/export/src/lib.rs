//! Data out of roamkv: readings of one device, a set of devices or all, over a time range,
//! streamed as Parquet, an Arrow IPC stream, CSV or JSON lines, in bounded memory whatever the
//! range (`limits`), from one read view of the engine (`roamkv_engine::ReadView`).
//!
//! The server's `GET /api/roamkv/v1/export` and `roamkv export --data DIR` both run an
//! [`Export`]: [`Export::plan`] checks the request against a view taken now (a bad request fails
//! there, before a byte is written), [`Export::write`] pages through the view device by device
//! into the format's writer. The columns are in `columns`; docs/SERVER.md ("Export") documents
//! them.

mod columns;
mod error;
mod format;
pub mod limits;
mod plan;
mod sink;

pub use columns::schema;
pub use error::{ExportError, Result};
pub use format::Format;
pub use plan::{Export, Request, Selection, Summary};
