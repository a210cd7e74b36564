//! What bounds an export's memory, whatever its range: one engine page, one batch of columns,
//! one Parquet row group in progress, the output buffer. Together at most about
//! `PAGE_BYTES_TARGET` (or `PAGE_READINGS_FIRST` values of the engine's largest, 256 KiB, on a
//! device's first page) + `BATCH_BYTES_MAX` + `ROW_GROUP_BYTES_MAX` + `OUTPUT_BUFFER_BYTES`:
//! under 64 MiB whatever the values, a few MiB for a gateway's (tens of bytes each).

/// Readings the first page of a device reads (`Engine::scan_page_in`): at most 64 x 256 KiB.
pub const PAGE_READINGS_FIRST: usize = 64;
/// The most readings a page reads...
pub const PAGE_READINGS_MAX: usize = 4096;
/// ... and the bytes a page aims at: each next page's size is set from the last one's bytes
/// per reading.
pub const PAGE_BYTES_TARGET: usize = 2 * 1024 * 1024;

/// A batch of columns (Arrow record batch) is written once it holds this many readings...
pub const BATCH_READINGS_MAX: usize = 16 * 1024;
/// ... or this many bytes of values and names.
pub const BATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Parquet: a row group is closed (written out) once its encoded columns in memory reach this.
/// Larger groups compress and scan better; this keeps an export's memory flat.
pub const ROW_GROUP_BYTES_MAX: usize = 32 * 1024 * 1024;

/// What an export buffers before it hands bytes to its output (the HTTP body's chunk).
pub const OUTPUT_BUFFER_BYTES: usize = 1024 * 1024;
