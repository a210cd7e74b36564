//! One repetition of a workload (`Repetition`): the untimed preparation, then the timed
//! operations with the device counters read around them, optionally under the block tracer.
use super::file_io::{AlignedBuffer, io_err, open_for, prepare_file, sync_file};
use super::spec::{IoMode, Pattern, SYNC_WRITE_BYTES, SyncCall, SyncTarget, Workload, offsets};
use super::target::{Target, device_counters};
use crate::LabError;
use crate::trace::{Trace, Tracer};
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::drop_caches;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One timed repetition.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Repetition {
    pub elapsed_s: f64,
    pub ops: u64,
    pub bytes: u64,
    pub device: DevStat,
    /// Latency of each operation (a read or write; with its sync call in the sync workloads), in
    /// microseconds: not written out, pooled over the repetitions into `Measurement::latency_us`.
    #[serde(skip)]
    pub op_latencies_us: Vec<f64>,
}

/// Starts the tracer if `traced`; the timed region begins right after.
fn maybe_trace(target: &dyn Target, traced: bool) -> Result<Option<Tracer>, LabError> {
    match (traced, target.as_fixture()) {
        (true, Some(fixture)) => Tracer::start(fixture).map(Some),
        _ => Ok(None),
    }
}

fn stop_trace(target: &dyn Target, tracer: Option<Tracer>) -> Result<Option<Trace>, LabError> {
    match (tracer, target.as_fixture()) {
        (Some(tracer), Some(fixture)) => tracer.stop(fixture).map(Some),
        _ => Ok(None),
    }
}

/// Runs one timed repetition of `workload` in `dir` (a directory on the fixture); with `traced`,
/// the operations run under the block tracer and its trace is returned too.
pub(super) fn run_once(
    fixture: &dyn Target,
    dir: &Path,
    workload: &Workload,
    ops_max: u64,
    seed: u64,
    traced: bool,
) -> Result<(Repetition, Option<Trace>), LabError> {
    let (ops, op_bytes) = workload.ops_and_bytes(ops_max);
    let buffer = AlignedBuffer::new(op_bytes as usize, seed);
    let run = OneRun {
        fixture,
        dir,
        ops,
        buffer: &buffer,
        seed,
        traced,
    };
    match *workload {
        Workload::Transfer {
            pattern,
            block_bytes,
            file_bytes,
            io,
        } => run.transfer(pattern, block_bytes, file_bytes, io),
        Workload::SyncWrite {
            call,
            random,
            target,
            io,
            ops: _,
        } => run.sync_write(call, random, target, io),
    }
}

/// One repetition's setting: where it runs, how many operations, what it writes.
struct OneRun<'a> {
    fixture: &'a dyn Target,
    dir: &'a Path,
    ops: u64,
    buffer: &'a AlignedBuffer,
    seed: u64,
    traced: bool,
}

impl OneRun<'_> {
    /// Paper 001: reads or writes of `block_bytes` over a file of `file_bytes`.
    fn transfer(
        &self,
        pattern: Pattern,
        block_bytes: u64,
        file_bytes: u64,
        io: IoMode,
    ) -> Result<(Repetition, Option<Trace>), LabError> {
        let OneRun {
            fixture,
            dir,
            ops,
            buffer,
            seed,
            traced,
        } = *self;
        let path: PathBuf = dir.join(format!("file-{file_bytes}"));
        if pattern == Pattern::SeqWrite {
            let _ = std::fs::remove_file(&path);
        } else {
            prepare_file(&path, file_bytes, seed)?;
        }
        if pattern.is_read() {
            drop_caches()?;
        } else {
            fixture.quiesce()?;
        }
        let offsets = offsets(pattern.is_random(), block_bytes, ops, seed);
        let mut read_buffer = AlignedBuffer::new(block_bytes as usize, 0);
        let tracer = maybe_trace(fixture, traced)?;
        let before = device_counters(fixture)?;
        let mut op_latencies_us = Vec::with_capacity(offsets.len());
        let started = Instant::now();
        let file = open_for(
            &path,
            io,
            !pattern.is_read(),
            pattern == Pattern::SeqWrite,
            false,
        )?;
        for &offset in &offsets {
            let op_started = Instant::now();
            if pattern.is_read() {
                let slice = &mut read_buffer.as_mut_slice()[..block_bytes as usize];
                file.read_exact_at(slice, offset).map_err(io_err(&path))?;
            } else {
                file.write_all_at(buffer.as_slice(block_bytes as usize), offset)
                    .map_err(io_err(&path))?;
            }
            op_latencies_us.push(op_started.elapsed().as_secs_f64() * 1e6);
        }
        if !pattern.is_read() {
            file.sync_all().map_err(io_err(&path))?;
        }
        drop(file);
        let elapsed_s = started.elapsed().as_secs_f64();
        let device = device_counters(fixture)?.delta(&before);
        let trace = stop_trace(fixture, tracer)?;
        Ok((
            Repetition {
                elapsed_s,
                ops,
                bytes: ops * block_bytes,
                device,
                op_latencies_us,
            },
            trace,
        ))
    }

    /// Paper 004: 4 KiB writes, each followed by the sync call.
    fn sync_write(
        &self,
        call: SyncCall,
        random: bool,
        target: SyncTarget,
        io: IoMode,
    ) -> Result<(Repetition, Option<Trace>), LabError> {
        let OneRun {
            fixture,
            dir,
            ops,
            buffer,
            seed,
            traced,
        } = *self;
        let path = dir.join("sync-target");
        let _ = std::fs::remove_file(&path);
        if target == SyncTarget::Overwrite {
            prepare_file(&path, ops * SYNC_WRITE_BYTES, seed)?;
        } else {
            File::create(&path)
                .and_then(|f| f.sync_all())
                .map_err(io_err(&path))?;
            // The new directory entry must be durable before timing starts.
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        fixture.quiesce()?;
        let offsets = offsets(random, SYNC_WRITE_BYTES, ops, seed);
        let tracer = maybe_trace(fixture, traced)?;
        let before = device_counters(fixture)?;
        let mut op_latencies_us = Vec::with_capacity(offsets.len());
        let started = Instant::now();
        let file = open_for(&path, io, true, false, false)?;
        for &offset in &offsets {
            let op_started = Instant::now();
            // Appending writes at the current end; offsets are sequential so they coincide.
            file.write_all_at(buffer.as_slice(SYNC_WRITE_BYTES as usize), offset)
                .map_err(io_err(&path))?;
            sync_file(&file, call, &path)?;
            op_latencies_us.push(op_started.elapsed().as_secs_f64() * 1e6);
        }
        drop(file);
        let elapsed_s = started.elapsed().as_secs_f64();
        let device = device_counters(fixture)?.delta(&before);
        let trace = stop_trace(fixture, tracer)?;
        Ok((
            Repetition {
                elapsed_s,
                ops,
                bytes: ops * SYNC_WRITE_BYTES,
                device,
                op_latencies_us,
            },
            trace,
        ))
    }
}
