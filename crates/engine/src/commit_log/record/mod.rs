//! Commit-log records: the encoder and the decoder (docs/FORMAT.md, "Record").
//!
//! ```text
//! offset size field
//!  0      4   crc32c, little-endian, of the payload followed by header bytes [4, 16)
//!  4      4   payload_len (u32 LE)
//!  8      4   segment_seq_low: low 32 bits of the segment's sequence number
//! 12      1   kind: 1 = REGISTER, 2 = PUT, 3 = DEPART, 4 = SEGMENT_END, 5 = TRIM, 6 = PUTS
//! 13      1   flags: bit 0 = last record of its batch; bit 1 = every byte of the log before
//!             this record was durable (fdatasync'd) when this record was written
//! 14      2   reserved, zero
//! 16      payload_len bytes of payload (layout per kind, below)
//! ```
//! The offsets below are chained from the field sizes, as the table reads. The segment sequence
//! inside every record is what makes recycled segments safe: a record left over from the file's
//! previous life carries an older sequence and reads as "end of data". The decoder never panics
//! on any input (see the fuzz target in fuzz/).

mod decode;
mod encode;
mod fields;
mod layout;
mod puts;

pub use decode::{BatchStep, declared_len, decode, decode_trusted, next_batch, stored_crc};
pub use encode::{
    encode_depart, encode_put_unsealed, encode_puts_unsealed, encode_register, encode_segment_end,
    encode_trim, mark_synced_before, seal,
};
pub use layout::{
    Body, Decode, Decoded, FLAG_BATCH_END, FLAG_SYNCED_BEFORE, HEADER_BYTES,
    PUTS_PAYLOAD_BYTES_SOFT_MAX, PUTS_READINGS_MAX, SEGMENT_END_BYTES, depart_len, put_len,
    puts_reading_len, register_len, trim_len,
};
pub use puts::{PutsIter, PutsReading, PutsReadings};
