//! The format writers an export feeds reading by reading: columns gathered into record batches
//! of at most `BATCH_READINGS_MAX` / `BATCH_BYTES_MAX` (Parquet, Arrow), or rows written as
//! they come (CSV, JSON lines).

use std::io::Write;

use arrow_ipc::writer::StreamWriter;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use roamkv_engine::Reading;
use roamkv_wire::edgex::readable::reading_json;
use roamkv_wire::time_arg::format_time;

use crate::columns::{Columns, decode, schema};
use crate::error::{ExportError, Result};
use crate::format::Format;
use crate::limits::{BATCH_BYTES_MAX, BATCH_READINGS_MAX, ROW_GROUP_BYTES_MAX};

/// The CSV header: the columns of `columns.rs` without the numbers (a CSV value is text), with
/// the timestamp twice (RFC 3339 and nanoseconds) and binary values in base64.
const CSV_HEADER: [&str; 8] = [
    "device",
    "sensor",
    "ts",
    "ts_ns",
    "value_type",
    "value",
    "value_b64",
    "units",
];

pub enum Sink<W: Write + Send> {
    Parquet(ArrowWriter<W>, Columns),
    Arrow(StreamWriter<W>, Columns),
    Csv(csv::Writer<W>),
    Jsonl(W),
}

impl<W: Write + Send> Sink<W> {
    /// A writer of `format` into `out`; `metadata` goes into the file's schema (Arrow) or footer
    /// (Parquet): what view the export read.
    pub fn new(format: Format, out: W, metadata: &[(String, String)]) -> Result<Sink<W>> {
        Ok(match format {
            Format::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_key_value_metadata(Some(
                        metadata
                            .iter()
                            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                            .collect(),
                    ))
                    .build();
                Sink::Parquet(
                    ArrowWriter::try_new(out, schema(), Some(props))?,
                    Columns::new(),
                )
            }
            Format::Arrow => {
                let metadata: std::collections::HashMap<String, String> =
                    metadata.iter().cloned().collect();
                let schema = schema().as_ref().clone().with_metadata(metadata);
                Sink::Arrow(StreamWriter::try_new(out, &schema)?, Columns::new())
            }
            Format::Csv => {
                let mut writer = csv::Writer::from_writer(out);
                writer.write_record(CSV_HEADER)?;
                Sink::Csv(writer)
            }
            Format::Jsonl => Sink::Jsonl(out),
        })
    }

    pub fn push(&mut self, reading: Reading) -> Result<()> {
        match self {
            Sink::Parquet(writer, columns) => {
                columns.push(&reading, &decode(&reading.value, reading.ts_ns));
                if batch_full(columns) {
                    write_parquet_batch(writer, columns)?;
                }
            }
            Sink::Arrow(writer, columns) => {
                columns.push(&reading, &decode(&reading.value, reading.ts_ns));
                if batch_full(columns) {
                    writer.write(&columns.finish()?)?;
                }
            }
            Sink::Csv(writer) => write_csv(writer, &reading)?,
            Sink::Jsonl(out) => {
                serde_json::to_writer(&mut *out, &reading_json(reading))
                    .map_err(std::io::Error::from)?;
                out.write_all(b"\n")?;
            }
        }
        Ok(())
    }

    /// Writes what is gathered and the format's end (`footer`: more of the Parquet footer's
    /// metadata, known only now); returns the output.
    pub fn finish(self, footer: &[(String, String)]) -> Result<W> {
        match self {
            Sink::Parquet(mut writer, mut columns) => {
                if columns.rows() > 0 {
                    writer.write(&columns.finish()?)?;
                }
                for (k, v) in footer {
                    writer.append_key_value_metadata(KeyValue::new(k.clone(), v.clone()));
                }
                Ok(writer.into_inner()?)
            }
            Sink::Arrow(mut writer, mut columns) => {
                if columns.rows() > 0 {
                    writer.write(&columns.finish()?)?;
                }
                writer.finish()?;
                Ok(writer.into_inner()?)
            }
            Sink::Csv(writer) => writer
                .into_inner()
                .map_err(|e| ExportError::Output(e.into_error())),
            Sink::Jsonl(out) => Ok(out),
        }
    }
}

fn batch_full(columns: &Columns) -> bool {
    columns.rows() >= BATCH_READINGS_MAX || columns.bytes() >= BATCH_BYTES_MAX
}

/// A batch into the row group in progress, which is closed once its encoded columns reach
/// `ROW_GROUP_BYTES_MAX` (the writer would otherwise hold a million rows in memory).
fn write_parquet_batch<W: Write + Send>(
    writer: &mut ArrowWriter<W>,
    columns: &mut Columns,
) -> Result<()> {
    writer.write(&columns.finish()?)?;
    if writer.in_progress_size() >= ROW_GROUP_BYTES_MAX {
        writer.flush()?;
    }
    Ok(())
}

fn write_csv<W: Write>(writer: &mut csv::Writer<W>, reading: &Reading) -> Result<()> {
    let decoded = decode(&reading.value, reading.ts_ns);
    let b64 = match decoded.text {
        Some(_) => String::new(),
        None => STANDARD.encode(&reading.value),
    };
    writer.write_record([
        reading.device.as_str(),
        reading.sensor.as_str(),
        format_time(reading.ts_ns).as_deref().unwrap_or(""),
        &reading.ts_ns.to_string(),
        decoded.value_type.as_deref().unwrap_or(""),
        decoded.text.as_deref().unwrap_or(""),
        &b64,
        decoded.units.as_deref().unwrap_or(""),
    ])?;
    Ok(())
}
