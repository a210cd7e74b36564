//! The tracer: a private tracefs instance plus the file-extent watcher for one fixture, from
//! `start` to `stop`, which classifies what was seen.

use super::classify::{Capture, Trace, classify};
use super::events::{RawEvent, parse_trace_line};
use super::file_extents::{FileExtents, scan_files, watch_files};
use super::layout::{FileExtent, Layout, btrfs_chunks, device_numbers, journal_extents};
use super::tracefs::{
    configure_instance, disable_instance, ensure_tracefs, monotonic_ns, open_pipe, read_pipe,
    write_tracefs,
};
use crate::LabError;
use roamkv_testbed::fixture::Fixture;
use roamkv_testbed::fixture::cleanup::{
    Undo, install_interrupt_cleanup, new_owner_id, register_undo, undo_owner,
};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// A private tracefs instance filtered to one fixture's device(s), streaming into memory.
pub struct Tracer {
    instance: PathBuf,
    owner: u64,
    start_ns: u64,
    started: Instant,
    stop_flag: Arc<AtomicBool>,
    reader: Option<JoinHandle<Result<Vec<String>, LabError>>>,
    watcher: Option<JoinHandle<FileExtents>>,
    layout: Layout,
    chunks: Vec<(u64, u64, u64)>,
    device_names: HashMap<(u32, u32), String>,
}

impl Tracer {
    pub fn start(fixture: &Fixture) -> Result<Tracer, LabError> {
        roamkv_testbed::prerequisite::require_root()?;
        let root = ensure_tracefs()?;
        install_interrupt_cleanup();
        let data_device = device_numbers(fixture.device())?;
        let journal_device = fixture.journal_device().map(device_numbers).transpose()?;
        let mut device_names = HashMap::new();
        device_names.insert(data_device, fixture.device_name().to_string());
        if let (Some(numbers), Some(name)) = (journal_device, fixture.journal_device_name()) {
            device_names.insert(numbers, name);
        }
        let chunks = btrfs_chunks(fixture);
        let layout = Layout {
            data_device,
            journal_device,
            journal_extents: journal_extents(fixture),
            files: Vec::new(),
        };
        let mut extents = BTreeMap::new();
        scan_files(fixture.mount_dir(), &chunks, &mut extents);

        let owner = new_owner_id();
        let instance = root
            .join("instances")
            .join(format!("roamkv-lab-{}-{owner}", std::process::id()));
        fs::create_dir(&instance)
            .map_err(|e| LabError::TracefsUnavailable(format!("{}: {e}", instance.display())))?;
        register_undo(owner, Undo::RemoveDir(instance.clone()));
        let mut tracer = Tracer {
            instance: instance.clone(),
            owner,
            start_ns: 0,
            started: Instant::now(),
            stop_flag: Arc::new(AtomicBool::new(false)),
            reader: None,
            watcher: None,
            layout,
            chunks: chunks.clone(),
            device_names,
        };
        let devices: Vec<(u32, u32)> = std::iter::once(data_device).chain(journal_device).collect();
        configure_instance(&instance, &devices)?;
        let (pipe, pipe_path) = open_pipe(&instance)?;
        let stop = tracer.stop_flag.clone();
        tracer.reader = Some(std::thread::spawn(move || read_pipe(pipe, pipe_path, stop)));
        let stop = tracer.stop_flag.clone();
        let root_dir = fixture.mount_dir().to_path_buf();
        tracer.watcher = Some(std::thread::spawn(move || {
            watch_files(root_dir, chunks, stop, extents)
        }));
        tracer.start_ns = monotonic_ns();
        tracer.started = Instant::now();
        write_tracefs(&instance.join("tracing_on"), "1")?;
        Ok(tracer)
    }

    /// Stops tracing and classifies every request seen since `start`.
    pub fn stop(self, fixture: &Fixture) -> Result<Trace, LabError> {
        self.stop_with_capture(fixture).map(|(trace, _)| trace)
    }

    /// Like `stop`, also returning the raw tracefs lines and the layout (to record test fixtures).
    pub fn stop_with_capture(mut self, fixture: &Fixture) -> Result<(Trace, Capture), LabError> {
        let duration_us = self.started.elapsed().as_micros() as u64;
        write_tracefs(&self.instance.join("tracing_on"), "0")?;
        self.stop_flag.store(true, Ordering::SeqCst);
        let lines = match self.reader.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| LabError::TracefsUnavailable("trace reader panicked".into()))??,
            None => Vec::new(),
        };
        let mut extents = match self.watcher.take() {
            Some(handle) => handle
                .join()
                .map_err(|_| LabError::TracefsUnavailable("extent watcher panicked".into()))?,
            None => BTreeMap::new(),
        };
        // After sync, delayed allocations have physical blocks; the trace is already off.
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        scan_files(fixture.mount_dir(), &self.chunks, &mut extents);
        let mut layout = self.layout.clone();
        for (path, ranges) in extents {
            let deleted = !fixture.mount_dir().join(&path).exists();
            layout
                .files
                .extend(ranges.into_iter().map(|range| FileExtent {
                    path: path.clone(),
                    range,
                    deleted,
                }));
        }
        let events: Vec<RawEvent> = lines.iter().filter_map(|l| parse_trace_line(l)).collect();
        let mut trace = classify(&events, &layout, self.start_ns, &self.device_names);
        trace.summary.duration_us = duration_us;
        let device_names = self
            .device_names
            .iter()
            .map(|((major, minor), name)| (format!("{major},{minor}"), name.clone()))
            .collect();
        Ok((
            trace,
            Capture {
                lines,
                layout,
                start_ns: self.start_ns,
                device_names,
            },
        ))
    }

    /// The layout gathered at start (journal extents, devices); files are filled in by `stop`.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        disable_instance(&self.instance);
        self.stop_flag.store(true, Ordering::SeqCst);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
        if let Some(h) = self.watcher.take() {
            let _ = h.join();
        }
        undo_owner(self.owner);
    }
}
