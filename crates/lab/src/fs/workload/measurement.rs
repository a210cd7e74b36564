//! The repetitions of one workload on one file system summarised (`Measurement`: medians,
//! spread, latency percentiles, device requests per operation), and for the sync workloads one
//! extra repetition under the block tracer (`TracedPerOp`).
use super::file_io::io_err;
use super::run::{Repetition, run_once};
use super::spec::{Plan, Workload};
use super::target::Target;
use crate::LabError;
use crate::trace::Trace;
use roamkv_testbed::fixture::{Fixture, interrupted};
use roamkv_testbed::stats::{Percentiles, median};
use std::path::Path;

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
