//! The file workloads of paper 001 (sequential/random read/write by block size and file size) and
//! paper 004 section 5.2 (4 KiB write + fsync/fdatasync, sequential/random, overwrite/append),
//! buffered or O_DIRECT, with the device counters read around every repetition.
//!
//! Conventions (also in docs/LAB.md):
//! - a repetition does `ops = min(file_bytes / block_bytes, ops_max)` operations; sequential ones
//!   cover the first `ops * block_bytes` bytes, random ones pick distinct blocks (a permutation);
//! - reads drop the page cache first (after preparing the file); writes of the paper-001 kind end
//!   with one fsync inside the timed region, so buffered writes are measured to the device;
//! - the file being read or overwritten is prepared (written + fsynced) outside the timed region.
use crate::LabError;
use crate::trace::{Trace, Tracer};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::{Fixture, drop_caches, interrupted};
use roamkv_testbed::stats::{Percentiles, median};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pattern {
    SeqRead,
    RandRead,
    SeqWrite,
    RandWrite,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::SeqRead => "seq-read",
            Pattern::RandRead => "rand-read",
            Pattern::SeqWrite => "seq-write",
            Pattern::RandWrite => "rand-write",
        }
    }
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
    pub fn is_read(self) -> bool {
        matches!(self, Pattern::SeqRead | Pattern::RandRead)
    }
    pub const ALL: [Pattern; 4] = [
        Pattern::SeqRead,
        Pattern::RandRead,
        Pattern::SeqWrite,
        Pattern::RandWrite,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoMode {
    Buffered,
    Direct,
}

impl IoMode {
    pub fn name(self) -> &'static str {
        match self {
            IoMode::Buffered => "buffered",
            IoMode::Direct => "direct",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncCall {
    Fsync,
    Fdatasync,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncTarget {
    Overwrite,
    Append,
}

/// One workload = one row of the results table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// Paper 001: read or write a file in `block_bytes` requests.
    Transfer {
        pattern: Pattern,
        block_bytes: u64,
        file_bytes: u64,
        io: IoMode,
    },
    /// Paper 004 §5.2: `ops` times { write 4 KiB; fsync or fdatasync }.
    SyncWrite {
        call: SyncCall,
        random: bool,
        target: SyncTarget,
        io: IoMode,
        ops: u64,
    },
}

/// The write size of the paper-004 workload.
pub const SYNC_WRITE_BYTES: u64 = 4096;
/// Alignment of O_DIRECT buffers (covers 512 B and 4 KiB logical blocks).
const DIRECT_ALIGN_BYTES: usize = 4096;
const PREPARE_CHUNK_BYTES: u64 = 1 << 20;

impl Workload {
    pub fn name(&self) -> String {
        match *self {
            Workload::Transfer {
                pattern,
                block_bytes,
                file_bytes,
                io,
            } => {
                format!(
                    "{} {}KiB {}MB {}",
                    pattern.name(),
                    block_bytes / 1024,
                    file_bytes / 1_000_000,
                    io.name()
                )
            }
            Workload::SyncWrite {
                call,
                random,
                target,
                io,
                ..
            } => format!(
                "4KiB+{} {} {} {}",
                match call {
                    SyncCall::Fsync => "fsync",
                    SyncCall::Fdatasync => "fdatasync",
                },
                if random { "rand" } else { "seq" },
                match target {
                    SyncTarget::Overwrite => "overwrite",
                    SyncTarget::Append => "append",
                },
                io.name()
            ),
        }
    }

    pub fn paper(&self) -> &'static str {
        match self {
            Workload::Transfer { .. } => "001",
            Workload::SyncWrite { .. } => "004",
        }
    }

    pub fn io(&self) -> IoMode {
        match *self {
            Workload::Transfer { io, .. } | Workload::SyncWrite { io, .. } => io,
        }
    }

    /// Number of operations of one repetition and the bytes each moves.
    pub fn ops_and_bytes(&self, ops_max: u64) -> (u64, u64) {
        match *self {
            Workload::Transfer {
                block_bytes,
                file_bytes,
                ..
            } => (
                (file_bytes / block_bytes).clamp(1, ops_max.max(1)),
                block_bytes,
            ),
            Workload::SyncWrite { ops, .. } => (ops, SYNC_WRITE_BYTES),
        }
    }
}

/// Which workloads a `lab fs` run executes.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub block_sizes_bytes: Vec<u64>,
    pub file_sizes_bytes: Vec<u64>,
    pub io_modes: Vec<IoMode>,
    pub repetitions: usize,
    pub ops_max: u64,
    pub sync_ops: u64,
    pub seed: u64,
    /// Trace one extra repetition of each sync workload (needs tracefs).
    pub trace_sync: bool,
}

impl Plan {
    /// The papers' full matrix: 1/4/16/64 KiB blocks, 10 and 100 MB files.
    pub fn full() -> Plan {
        Plan {
            block_sizes_bytes: vec![1024, 4096, 16384, 65536],
            file_sizes_bytes: vec![10_000_000, 100_000_000],
            io_modes: vec![IoMode::Buffered, IoMode::Direct],
            repetitions: 3,
            ops_max: 25_600,
            sync_ops: 1000,
            seed: 42,
            trace_sync: true,
        }
    }
    /// A few minutes in total: 4 and 64 KiB, 10 MB file, fewer operations.
    pub fn quick() -> Plan {
        Plan {
            block_sizes_bytes: vec![4096, 65536],
            file_sizes_bytes: vec![10_000_000],
            io_modes: vec![IoMode::Buffered, IoMode::Direct],
            repetitions: 3,
            ops_max: 2560,
            sync_ops: 200,
            seed: 42,
            trace_sync: true,
        }
    }

    pub fn workloads(&self) -> Vec<Workload> {
        let mut out = Vec::new();
        for &io in &self.io_modes {
            for &file_bytes in &self.file_sizes_bytes {
                for pattern in Pattern::ALL {
                    for &block_bytes in &self.block_sizes_bytes {
                        out.push(Workload::Transfer {
                            pattern,
                            block_bytes,
                            file_bytes,
                            io,
                        });
                    }
                }
            }
        }
        for &io in &self.io_modes {
            for call in [SyncCall::Fsync, SyncCall::Fdatasync] {
                for target in [SyncTarget::Overwrite, SyncTarget::Append] {
                    for random in [false, true] {
                        // Appending is sequential by definition: no random variant.
                        if target == SyncTarget::Append && random {
                            continue;
                        }
                        out.push(Workload::SyncWrite {
                            call,
                            random,
                            target,
                            io,
                            ops: self.sync_ops,
                        });
                    }
                }
            }
        }
        out
    }

    /// Image size large enough for the biggest file twice over plus file-system overhead.
    pub fn image_bytes(&self) -> u64 {
        let biggest = self
            .file_sizes_bytes
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.sync_ops * SYNC_WRITE_BYTES);
        (biggest * 3 + (256 << 20)).max(512 << 20)
    }
}

/// Byte offsets of one repetition: `ops` blocks of `block_bytes`, in order or as a seeded permutation.
pub fn offsets(random: bool, block_bytes: u64, ops: u64, seed: u64) -> Vec<u64> {
    let mut blocks: Vec<u64> = (0..ops).collect();
    if random {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        blocks.shuffle(&mut rng);
    }
    blocks.into_iter().map(|b| b * block_bytes).collect()
}

/// A heap buffer aligned for O_DIRECT, filled with pseudo-random (incompressible) bytes.
struct AlignedBuffer {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuffer {
    fn new(bytes: usize, seed: u64) -> AlignedBuffer {
        let layout =
            std::alloc::Layout::from_size_align(bytes.max(DIRECT_ALIGN_BYTES), DIRECT_ALIGN_BYTES)
                .expect("block sizes are small powers of two");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mut buffer = AlignedBuffer { ptr, layout };
        use rand::RngCore;
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(buffer.as_mut_slice());
        buffer
    }
    fn as_slice(&self, len: usize) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() bytes; len is clamped to it.
        unsafe { std::slice::from_raw_parts(self.ptr, len.min(self.layout.size())) }
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid and uniquely owned for layout.size() bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

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

/// All repetitions of one workload on one file system, with medians and spread.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measurement {
    pub fs: String,
    pub paper: String,
    pub workload: String,
    pub spec: Workload,
    pub repetitions: Vec<Repetition>,
    pub ops_per_s_median: f64,
    pub ops_per_s_min: f64,
    pub ops_per_s_max: f64,
    pub mb_per_s_median: f64,
    /// Block-layer requests per operation (all devices of the fixture), median over repetitions.
    pub device_writes_per_op: f64,
    pub device_bytes_written_per_op: f64,
    pub device_flushes_per_op: f64,
    pub device_reads_per_op: f64,
    /// Per-operation latency over every operation of every repetition, in microseconds, with
    /// fio's percentiles (p50, p99, p99.9; nearest rank).
    pub latency_us: Percentiles,
    /// Sync workloads: requests per operation by kind, from one traced repetition.
    pub traced_per_op: Option<TracedPerOp>,
    /// Set when the workload could not run (e.g. O_DIRECT unsupported in data=journal mode).
    pub error: Option<String>,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> LabError + '_ {
    move |e| LabError::io(path, e)
}

fn open_for(
    path: &Path,
    io: IoMode,
    write: bool,
    create: bool,
    append: bool,
) -> Result<File, LabError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .write(write)
        .create(create)
        .append(append);
    if io == IoMode::Direct {
        options.custom_flags(libc::O_DIRECT);
    }
    options.open(path).map_err(io_err(path))
}

/// Writes `bytes` of random data to `path` and fsyncs it (untimed preparation).
fn prepare_file(path: &Path, bytes: u64, seed: u64) -> Result<(), LabError> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == bytes) {
        return Ok(());
    }
    let file = File::create(path).map_err(io_err(path))?;
    let buffer = AlignedBuffer::new(PREPARE_CHUNK_BYTES as usize, seed);
    let mut written = 0;
    while written < bytes {
        let len = (bytes - written).min(PREPARE_CHUNK_BYTES);
        file.write_all_at(buffer.as_slice(len as usize), written)
            .map_err(io_err(path))?;
        written += len;
    }
    file.sync_all().map_err(io_err(path))
}

/// Where a workload runs: a lab `Fixture`, or a file system mounted by someone else (the guest
/// of the --vm route). Only fixtures can be traced.
pub trait Target {
    fn fs_name(&self) -> String;
    fn mount_dir(&self) -> &Path;
    /// Block devices whose counters are summed (data device, external journal device).
    fn device_names(&self) -> Vec<String>;
    fn quiesce(&self) -> Result<(), LabError>;
    fn as_fixture(&self) -> Option<&Fixture> {
        None
    }
}

impl Target for Fixture {
    fn fs_name(&self) -> String {
        self.spec().name().to_string()
    }
    fn mount_dir(&self) -> &Path {
        Fixture::mount_dir(self)
    }
    fn device_names(&self) -> Vec<String> {
        let mut names = vec![self.device_name().to_string()];
        names.extend(self.journal_device_name());
        names
    }
    fn quiesce(&self) -> Result<(), LabError> {
        Fixture::quiesce(self)
    }
    fn as_fixture(&self) -> Option<&Fixture> {
        Some(self)
    }
}

/// A file system already mounted at `mount_dir` on `device_name` (e.g. "vdb" inside the guest).
pub struct MountedDevice {
    pub fs_name: String,
    pub mount_dir: PathBuf,
    pub device_name: String,
}

impl Target for MountedDevice {
    fn fs_name(&self) -> String {
        self.fs_name.clone()
    }
    fn mount_dir(&self) -> &Path {
        &self.mount_dir
    }
    fn device_names(&self) -> Vec<String> {
        vec![self.device_name.clone()]
    }
    fn quiesce(&self) -> Result<(), LabError> {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        std::thread::sleep(std::time::Duration::from_millis(150));
        if interrupted() {
            Err(LabError::Interrupted)
        } else {
            Ok(())
        }
    }
}

fn device_counters(target: &dyn Target) -> Result<DevStat, LabError> {
    let mut total = DevStat::default();
    for name in target.device_names() {
        total = total.plus(&DevStat::read(&name)?);
    }
    Ok(total)
}

fn sync_file(file: &File, call: SyncCall, path: &Path) -> Result<(), LabError> {
    match call {
        SyncCall::Fsync => file.sync_all(),
        SyncCall::Fdatasync => file.sync_data(),
    }
    .map_err(io_err(path))
}

/// Per-operation request counts from one traced repetition (the tracer names every request,
/// unlike the device counters, which also count the empty write that carries a flush).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TracedPerOp {
    pub ops: u64,
    pub data_writes: f64,
    pub journal_writes: f64,
    pub metadata_writes: f64,
    pub flushes: f64,
    pub data_bytes: f64,
    pub journal_bytes: f64,
    pub metadata_bytes: f64,
}

impl TracedPerOp {
    fn from_trace(trace: &Trace, ops: u64) -> TracedPerOp {
        let per = |v: u64| v as f64 / ops.max(1) as f64;
        let k = &trace.summary.by_kind;
        TracedPerOp {
            ops,
            data_writes: per(k.data.writes),
            journal_writes: per(k.fs_journal.writes),
            metadata_writes: per(k.metadata.writes),
            flushes: per(trace.summary.flushes),
            data_bytes: per(k.data.bytes),
            journal_bytes: per(k.fs_journal.bytes),
            metadata_bytes: per(k.metadata.bytes),
        }
    }
}

/// Operations of the extra traced repetition of a sync workload (kept small: the trace is kept
/// in memory and the repetition is not timed).
pub const TRACED_OPS: u64 = 50;

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
fn run_once(
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

/// Runs `repetitions` repetitions and summarises them. Errors of the workload itself (such as
/// EINVAL for O_DIRECT where the file system refuses it) are recorded in `error`, not returned.
pub fn measure(
    fixture: &Fixture,
    workload: &Workload,
    plan: &Plan,
) -> Result<Measurement, LabError> {
    measure_on(fixture, workload, plan)
}

/// `measure` on any `Target` (tracing only happens on fixtures).
pub fn measure_on(
    fixture: &dyn Target,
    workload: &Workload,
    plan: &Plan,
) -> Result<Measurement, LabError> {
    let dir = fixture.mount_dir().join("lab-fs");
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let mut reps = Vec::new();
    let mut error = None;
    for rep in 0..plan.repetitions {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        match run_once(
            fixture,
            &dir,
            workload,
            plan.ops_max,
            plan.seed + rep as u64,
            false,
        ) {
            Ok((r, _)) => reps.push(r),
            Err(e @ (LabError::Interrupted | LabError::NotRoot)) => return Err(e),
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    // Paper 004 counts writes per fsync: one extra, untimed repetition under the tracer names them.
    let traced_per_op = if plan.trace_sync && error.is_none() {
        traced_repetition(fixture, &dir, workload, plan, &mut error)?
    } else {
        None
    };
    let per_rep = |f: &dyn Fn(&Repetition) -> f64| -> Vec<f64> { reps.iter().map(f).collect() };
    let mut ops_per_s = per_rep(&|r| r.ops as f64 / r.elapsed_s.max(1e-9));
    let ops_per_s_min = ops_per_s.iter().copied().fold(f64::NAN, f64::min);
    let ops_per_s_max = ops_per_s.iter().copied().fold(f64::NAN, f64::max);
    Ok(Measurement {
        fs: fixture.fs_name(),
        paper: workload.paper().to_string(),
        workload: workload.name(),
        spec: *workload,
        ops_per_s_median: median(&mut ops_per_s),
        ops_per_s_min,
        ops_per_s_max,
        mb_per_s_median: median(&mut per_rep(&|r| {
            r.bytes as f64 / 1e6 / r.elapsed_s.max(1e-9)
        })),
        device_writes_per_op: median(&mut per_rep(&|r| r.device.writes as f64 / r.ops as f64)),
        device_bytes_written_per_op: median(&mut per_rep(&|r| {
            r.device.bytes_written() as f64 / r.ops as f64
        })),
        device_flushes_per_op: median(&mut per_rep(&|r| r.device.flushes as f64 / r.ops as f64)),
        device_reads_per_op: median(&mut per_rep(&|r| r.device.reads as f64 / r.ops as f64)),
        latency_us: Percentiles::of(
            &reps
                .iter()
                .flat_map(|r| r.op_latencies_us.iter().copied())
                .collect::<Vec<f64>>(),
        ),
        repetitions: reps,
        traced_per_op,
        error,
    })
}

/// For a sync workload: one untimed repetition of `TRACED_OPS` operations under the block tracer,
/// its requests per operation by kind. A failure of the workload goes into `error`.
fn traced_repetition(
    fixture: &dyn Target,
    dir: &Path,
    workload: &Workload,
    plan: &Plan,
    error: &mut Option<String>,
) -> Result<Option<TracedPerOp>, LabError> {
    let Workload::SyncWrite {
        call,
        random,
        target,
        io,
        ..
    } = *workload
    else {
        return Ok(None);
    };
    let small = Workload::SyncWrite {
        call,
        random,
        target,
        io,
        ops: TRACED_OPS.min(plan.sync_ops),
    };
    match run_once(fixture, dir, &small, plan.ops_max, plan.seed, true) {
        Ok((_, Some(trace))) => Ok(Some(TracedPerOp::from_trace(
            &trace,
            TRACED_OPS.min(plan.sync_ops),
        ))),
        Ok((_, None)) => Ok(None),
        Err(e @ LabError::Interrupted) => Err(e),
        Err(e) => {
            *error = Some(format!("traced repetition: {e}"));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_offsets_step_by_block() {
        assert_eq!(offsets(false, 4096, 4, 1), vec![0, 4096, 8192, 12288]);
    }

    #[test]
    fn random_offsets_are_a_seeded_permutation() {
        let a = offsets(true, 1024, 1000, 7);
        let b = offsets(true, 1024, 1000, 7);
        let c = offsets(true, 1024, 1000, 8);
        assert_eq!(a, b, "same seed, same order");
        assert_ne!(a, c, "different seed, different order");
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            offsets(false, 1024, 1000, 0),
            "every block exactly once"
        );
        assert_ne!(a, sorted, "actually shuffled");
    }

    #[test]
    fn ops_are_capped_and_cover_the_file() {
        let w = Workload::Transfer {
            pattern: Pattern::SeqRead,
            block_bytes: 1024,
            file_bytes: 100_000_000,
            io: IoMode::Buffered,
        };
        assert_eq!(w.ops_and_bytes(25_600), (25_600, 1024));
        let w = Workload::Transfer {
            pattern: Pattern::SeqRead,
            block_bytes: 65536,
            file_bytes: 10_000_000,
            io: IoMode::Direct,
        };
        assert_eq!(w.ops_and_bytes(25_600), (152, 65536));
    }

    #[test]
    fn plans_cover_the_papers_matrix() {
        let full = Plan::full().workloads();
        // 2 io modes x 2 file sizes x 4 patterns x 4 block sizes + 2 io x 2 calls x 3 variants.
        assert_eq!(full.len(), 2 * 2 * 4 * 4 + 2 * 2 * 3);
        assert!(
            full.iter()
                .any(|w| w.name() == "rand-write 1KiB 100MB direct")
        );
        assert!(
            full.iter()
                .any(|w| w.name() == "4KiB+fdatasync rand overwrite buffered")
        );
        assert!(!full.iter().any(|w| w.name().contains("rand append")));
        let quick = Plan::quick().workloads();
        assert!(quick.len() < full.len() / 2);
    }
}
