//! An export: a request checked against a read view ([`Export::plan`]), then the view's readings
//! written device by device, page by page ([`Export::write`]).
//!
//! What one export sees (roamkv_engine::ReadView): the devices at this edge when it began, and
//! of them the readings acknowledged before it began; later writes are left out. Exactly so
//! while the log segment that was being written when it began is still in the log (60 s by
//! default, less under log pressure); past that, readings of those devices written after it
//! began may be in it too (`Summary::exact` says which, and so does the Parquet footer). A
//! device that departs during the export has only what was written before it departed; a trim
//! during it hides what it trims from the pages not read yet.

use std::io::Write;

use roamkv_engine::{Engine, ReadView, ScanCursor};
use roamkv_wire::edgex::event_index::is_deleted;
use roamkv_wire::names::{check_device_name, check_resource_name};

use crate::error::{ExportError, Result};
use crate::format::Format;
use crate::limits::{PAGE_BYTES_TARGET, PAGE_READINGS_FIRST, PAGE_READINGS_MAX};
use crate::sink::Sink;

/// Which devices an export reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every device at this edge when the export begins.
    All,
    /// These, each of which must be here.
    Devices(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub selection: Selection,
    /// One sensor of each device, or all.
    pub sensor: Option<String>,
    /// Readings with from_ns <= ts < to_ns.
    pub from_ns: i64,
    pub to_ns: i64,
    pub format: Format,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub readings: u64,
    pub devices: usize,
    /// The view's end in the log (`SEGMENT:OFFSET`).
    pub view: String,
    /// Whether nothing written after the view was taken is in the export.
    pub exact: bool,
}

/// A request checked against the view it will read.
pub struct Export {
    request: Request,
    view: ReadView,
    devices: Vec<String>,
}

impl Export {
    /// Checks the request and takes the view (every write acknowledged so far is in it). An
    /// error here is the request's (`BadRequest`, `UnknownDevice`) or the engine's; nothing was
    /// written.
    pub fn plan(engine: &Engine, request: Request) -> Result<Export> {
        if request.from_ns >= request.to_ns {
            return Err(ExportError::BadRequest(format!(
                "the range is empty: start ({} ns) is not before end ({} ns)",
                request.from_ns, request.to_ns
            )));
        }
        if let Some(sensor) = &request.sensor {
            check_resource_name(sensor).map_err(|e| ExportError::BadRequest(e.to_string()))?;
        }
        if let Selection::Devices(names) = &request.selection {
            if names.is_empty() {
                return Err(ExportError::BadRequest("no device named".into()));
            }
            for name in names {
                check_device_name(name).map_err(|e| ExportError::BadRequest(e.to_string()))?;
            }
        }
        let view = engine.read_view()?;
        let devices = match &request.selection {
            Selection::All => view.devices().iter().map(|d| d.name.clone()).collect(),
            Selection::Devices(names) => {
                let mut names = names.clone();
                names.sort();
                names.dedup();
                for name in &names {
                    let here = view
                        .devices()
                        .binary_search_by(|d| d.name.as_str().cmp(name))
                        .is_ok();
                    if !here {
                        return Err(ExportError::UnknownDevice(name.clone()));
                    }
                }
                names
            }
        };
        Ok(Export {
            request,
            view,
            devices,
        })
    }

    pub fn format(&self) -> Format {
        self.request.format
    }

    /// The devices it reads, in the order it writes them (by name).
    pub fn devices(&self) -> &[String] {
        &self.devices
    }

    /// Writes the export into `out` (buffer it: the formats write in small pieces); returns
    /// what it wrote and the output. An output that fails (a client that left) ends it at its
    /// next write.
    pub fn write<W: Write + Send>(self, engine: &Engine, out: W) -> Result<(Summary, W)> {
        let view_meta = vec![
            ("roamkv.view".to_string(), self.view.position()),
            (
                "roamkv.range_ns".to_string(),
                format!("{}..{}", self.request.from_ns, self.request.to_ns),
            ),
        ];
        let mut sink = Sink::new(self.request.format, out, &view_meta)?;
        let mut readings = 0u64;
        for device in &self.devices {
            readings += self.write_device(engine, device, &mut sink)?;
        }
        let exact = engine.view_is_exact(&self.view);
        let out = sink.finish(&[("roamkv.exact".to_string(), exact.to_string())])?;
        let summary = Summary {
            readings,
            devices: self.devices.len(),
            view: self.view.position(),
            exact,
        };
        Ok((summary, out))
    }

    /// One device's readings in the range, page by page; deleted EdgeX readings are skipped.
    fn write_device<W: Write + Send>(
        &self,
        engine: &Engine,
        device: &str,
        sink: &mut Sink<W>,
    ) -> Result<u64> {
        let request = &self.request;
        let mut after: Option<ScanCursor> = None;
        let mut written = 0;
        let mut limit = PAGE_READINGS_FIRST;
        loop {
            let page = engine.scan_page_in(
                &self.view,
                device,
                request.sensor.as_deref(),
                request.from_ns,
                request.to_ns,
                after.as_ref(),
                limit,
            )?;
            limit = next_page_readings(&page.readings);
            for reading in page.readings {
                if !is_deleted(&reading.value) {
                    sink.push(reading)?;
                    written += 1;
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(written),
            }
        }
    }
}

/// The next page's size: as many readings as `PAGE_BYTES_TARGET` holds at the last page's bytes
/// per reading, within 1..=`PAGE_READINGS_MAX`.
fn next_page_readings(page: &[roamkv_engine::Reading]) -> usize {
    let bytes: usize = page
        .iter()
        .map(|r| r.value.len() + r.sensor.len() + r.device.len())
        .sum();
    let per_reading = (bytes / page.len().max(1)).max(1);
    (PAGE_BYTES_TARGET / per_reading).clamp(1, PAGE_READINGS_MAX)
}
