//! One SQLite run on a fixture, traced, and the block writes it caused, split by kind.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::config::{JournalMode, Op, SyncCall, Synchronous};
use super::vfs::SyncCounts;
use super::workload::{self, DbConfig, LatencyUs, StreamSpec};
use crate::LabError;
use crate::fs::workload::Target;
use crate::trace::{Kind, Request, Summary, Tracer, WriteCount, parse_rwbs};
use roamkv_testbed::devstat::DevStat;
use roamkv_testbed::fixture::Fixture;

/// One point of the matrix.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct RunSpec {
    pub journal_mode: JournalMode,
    pub synchronous: Synchronous,
    pub sync_call: SyncCall,
    pub op: Op,
    pub transactions: usize,
    pub rows_per_tx: usize,
    pub record_bytes: usize,
    pub threads: usize,
    pub seed: u64,
}

/// Block writes split the way paper 004's MOST splits them.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Split {
    /// Writes into the database files (*.db).
    pub db: WriteCount,
    /// Writes into the rollback journal (*-journal) or the write-ahead log (*-wal).
    pub journal: WriteCount,
    /// Other file data (the WAL index *-shm, anything else under the mount point).
    pub other_data: WriteCount,
    /// The file system's own journal/log (ext4 jbd2, XFS log).
    pub fs_journal: WriteCount,
    /// Inode tables, bitmaps, directory blocks, btrees, superblocks.
    pub metadata: WriteCount,
    /// Cache-flush requests (not counted in the writes).
    pub flushes: u64,
}

impl Split {
    pub fn of(summary: &Summary) -> Split {
        let mut s = Split {
            fs_journal: summary.by_kind.fs_journal,
            metadata: summary.by_kind.metadata,
            flushes: summary.flushes,
            ..Split::default()
        };
        let add = |w: &mut WriteCount, c: &WriteCount| {
            w.writes += c.writes;
            w.bytes += c.bytes;
        };
        for (path, count) in &summary.by_file {
            // The tracer names a file that no longer exists "path (deleted)": DELETE mode's journal.
            let path = path.strip_suffix(" (deleted)").unwrap_or(path);
            if path.ends_with(".db") {
                add(&mut s.db, count);
            } else if path.ends_with(".db-journal") || path.ends_with(".db-wal") {
                add(&mut s.journal, count);
            } else {
                add(&mut s.other_data, count);
            }
        }
        // Data writes without a file name (none with the current tracer) count as other data.
        let named = s.db.writes + s.journal.writes + s.other_data.writes;
        let named_bytes = s.db.bytes + s.journal.bytes + s.other_data.bytes;
        s.other_data.writes += summary.by_kind.data.writes.saturating_sub(named);
        s.other_data.bytes += summary.by_kind.data.bytes.saturating_sub(named_bytes);
        s
    }
    /// The split of the requests `keep` selects (same rules as the tracer's summary: a write
    /// with a preflush flag also costs a flush).
    pub fn of_requests(requests: &[Request], keep: impl Fn(&Request) -> bool) -> Split {
        let mut s = Split::default();
        let add = |w: &mut WriteCount, bytes: u64| {
            w.writes += 1;
            w.bytes += bytes;
        };
        for r in requests.iter().filter(|r| keep(r)) {
            match r.kind {
                Kind::Flush => s.flushes += 1,
                Kind::Read => {}
                Kind::FsJournal => add(&mut s.fs_journal, r.bytes),
                Kind::Metadata => add(&mut s.metadata, r.bytes),
                Kind::Data => {
                    let name = r.file.as_deref().unwrap_or("");
                    let name = name.strip_suffix(" (deleted)").unwrap_or(name);
                    if name.ends_with(".db") {
                        add(&mut s.db, r.bytes);
                    } else if name.ends_with(".db-journal") || name.ends_with(".db-wal") {
                        add(&mut s.journal, r.bytes);
                    } else {
                        add(&mut s.other_data, r.bytes);
                    }
                }
            }
            if r.kind != Kind::Flush && parse_rwbs(&r.rwbs).preflush {
                s.flushes += 1;
            }
        }
        s
    }
    pub fn total(&self) -> WriteCount {
        let parts = [
            self.db,
            self.journal,
            self.other_data,
            self.fs_journal,
            self.metadata,
        ];
        WriteCount {
            writes: parts.iter().map(|p| p.writes).sum(),
            bytes: parts.iter().map(|p| p.bytes).sum(),
        }
    }
    pub fn plus(&self, o: &Split) -> Split {
        let a = |x: WriteCount, y: WriteCount| WriteCount {
            writes: x.writes + y.writes,
            bytes: x.bytes + y.bytes,
        };
        Split {
            db: a(self.db, o.db),
            journal: a(self.journal, o.journal),
            other_data: a(self.other_data, o.other_data),
            fs_journal: a(self.fs_journal, o.fs_journal),
            metadata: a(self.metadata, o.metadata),
            flushes: self.flushes + o.flushes,
        }
    }
    /// Per-transaction averages: (name, writes, bytes) rows.
    pub fn per_tx(&self, tx: u64) -> serde_json::Value {
        let d = tx.max(1) as f64;
        let w = |c: WriteCount| serde_json::json!({ "writes": c.writes as f64 / d, "bytes": c.bytes as f64 / d });
        serde_json::json!({
            "db": w(self.db), "journal": w(self.journal), "other_data": w(self.other_data),
            "fs_journal": w(self.fs_journal), "metadata": w(self.metadata), "flushes": self.flushes as f64 / d,
        })
    }
}

/// The result of one run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunResult {
    pub fs: String,
    pub journal_mode: JournalMode,
    pub synchronous: Synchronous,
    pub sync_call: SyncCall,
    pub op: Op,
    pub rows_per_tx: usize,
    pub threads: usize,
    pub transactions: u64,
    pub record_bytes: usize,
    pub elapsed_s: f64,
    pub tx_per_sec: f64,
    /// 1e6 / median latency: a rate that ignores the long stalls a shared host adds to the mean.
    pub tx_per_sec_at_p50: f64,
    pub latency_us: LatencyUs,
    /// Whether the block tracer ran (a lab fixture): then `immediate`/`deferred` split the
    /// writes by kind; untraced (in the qemu guest), the totals come from the device's counters.
    pub traced: bool,
    /// Block writes (data + fs journal + metadata) per transaction while the transactions ran.
    pub block_writes_per_tx: f64,
    pub block_bytes_per_tx: f64,
    pub flushes_per_tx: f64,
    /// The same including the deferred write-back forced by syncfs after the run.
    pub block_writes_per_tx_after_syncfs: f64,
    pub block_bytes_per_tx_after_syncfs: f64,
    /// Absolute counts while running, and of the syncfs afterwards.
    pub immediate: Split,
    pub deferred: Split,
    /// Per-transaction split (immediate) and including the deferred write-back.
    pub per_tx: serde_json::Value,
    pub per_tx_after_syncfs: serde_json::Value,
    /// Sync calls the VFS shim made/delegated during the timed part.
    pub sync_calls: SyncCounts,
    /// /sys/block counters over the timed part (a cross-check of the trace).
    pub devstat: DevStat,
}

/// Runs one combination on `fixture`: fresh database file(s), fill if needed, quiesce, trace the
/// timed transactions, then trace a syncfs for the deferred write-back.
pub fn run_one(fx: &Fixture, spec: &RunSpec) -> Result<RunResult, LabError> {
    run_on(fx, spec)
}

/// `run_one` on any target: traced where the target is a lab fixture; elsewhere (a file system
/// the qemu guest mounted) counted by the device's own counters only, so `immediate` and
/// `deferred` stay empty and `traced` is false.
pub fn run_on(target: &dyn Target, spec: &RunSpec) -> Result<RunResult, LabError> {
    roamkv_testbed::fixture::clear_dir(target.mount_dir())?;
    let db_config = DbConfig {
        journal_mode: spec.journal_mode,
        synchronous: spec.synchronous,
        sync_call: spec.sync_call,
    };
    let werr = |e: workload::WorkloadError| LabError::Unsupported(format!("sqlite workload: {e}"));
    let streams: Vec<StreamSpec> = (0..spec.threads)
        .map(|t| StreamSpec {
            op: spec.op,
            transactions: spec.transactions,
            rows_per_tx: spec.rows_per_tx,
            record_bytes: spec.record_bytes,
            seed: spec.seed.wrapping_add(t as u64 * 7919),
        })
        .collect();
    let mut conns = open_filled(target.mount_dir(), db_config, &streams).map_err(werr)?;
    target.quiesce()?;

    let devices = target.device_names();
    let dev_before = device_counters(&devices)?;
    let sync_before = SyncCounts::read();
    let tracer = target.as_fixture().map(Tracer::start).transpose()?;
    let barrier = Barrier::new(spec.threads);
    let started = Instant::now();
    let results = run_streams(&mut conns, &streams, &barrier);
    let elapsed = started.elapsed();
    let end_ns = monotonic_ns();
    let sync_calls = SyncCounts::read().delta(&sync_before);
    let devstat = device_counters(&devices)?.delta(&dev_before);
    // Deferred write-back: what the page cache still held, forced out by syncfs inside the same
    // trace (a second tracer would not do: stopping one syncs the file system untraced).
    target.quiesce()?;
    let devstat_after_syncfs = device_counters(&devices)?.delta(&dev_before);
    let before_stop_ns = monotonic_ns();
    let trace = match (tracer, target.as_fixture()) {
        (Some(tracer), Some(fx)) => Some(tracer.stop(fx)?),
        _ => None,
    };
    let mut latencies = Vec::new();
    for r in results {
        latencies.extend(r.map_err(werr)?);
    }
    drop(conns);
    Ok(result_of(
        target,
        spec,
        Timed {
            latencies,
            elapsed,
            end_ns,
            before_stop_ns,
            sync_calls,
            devstat,
            devstat_after_syncfs,
            trace,
        },
    ))
}

/// What the timed part of a run left to count.
struct Timed {
    latencies: Vec<Duration>,
    elapsed: Duration,
    /// Monotonic clock when the transactions ended, and just before the tracer stopped.
    end_ns: u64,
    before_stop_ns: u64,
    sync_calls: SyncCounts,
    /// Device counters over the transactions, and including the syncfs after them.
    devstat: DevStat,
    devstat_after_syncfs: DevStat,
    trace: Option<crate::trace::Trace>,
}

/// The run's figures: from the trace where there is one, else from the device counters.
fn result_of(target: &dyn Target, spec: &RunSpec, timed: Timed) -> RunResult {
    let Timed {
        latencies,
        elapsed,
        end_ns,
        before_stop_ns,
        sync_calls,
        devstat,
        devstat_after_syncfs,
        trace,
    } = timed;
    let tx = latencies.len() as u64;
    let (immediate, deferred) = match &trace {
        // Request times count from the tracer's start; `duration_us` is start..stop on the same
        // clock.
        Some(trace) => {
            let start_ns = before_stop_ns.saturating_sub(trace.summary.duration_us * 1000);
            let boundary_us = end_ns.saturating_sub(start_ns) / 1000;
            (
                Split::of_requests(&trace.requests, |r| r.time_us <= boundary_us),
                Split::of_requests(&trace.requests, |r| r.time_us > boundary_us),
            )
        }
        None => (Split::default(), Split::default()),
    };
    let both = immediate.plus(&deferred);
    let d = tx.max(1) as f64;
    let latency_us = LatencyUs::of(&latencies);
    // Untraced: the device's counters give the totals (not split by kind).
    let (writes, bytes, flushes, writes_all, bytes_all) = if trace.is_some() {
        (
            immediate.total().writes,
            immediate.total().bytes,
            immediate.flushes,
            both.total().writes,
            both.total().bytes,
        )
    } else {
        (
            devstat.writes,
            devstat.bytes_written(),
            devstat.flushes,
            devstat_after_syncfs.writes,
            devstat_after_syncfs.bytes_written(),
        )
    };
    RunResult {
        fs: target.fs_name(),
        journal_mode: spec.journal_mode,
        synchronous: spec.synchronous,
        sync_call: spec.sync_call,
        op: spec.op,
        rows_per_tx: spec.rows_per_tx,
        threads: spec.threads,
        transactions: tx,
        record_bytes: spec.record_bytes,
        elapsed_s: elapsed.as_secs_f64(),
        tx_per_sec: tx as f64 / elapsed.as_secs_f64().max(1e-9),
        tx_per_sec_at_p50: if latency_us.p50 > 0.0 {
            1e6 / latency_us.p50
        } else {
            0.0
        },
        latency_us,
        traced: trace.is_some(),
        block_writes_per_tx: writes as f64 / d,
        block_bytes_per_tx: bytes as f64 / d,
        flushes_per_tx: flushes as f64 / d,
        block_writes_per_tx_after_syncfs: writes_all as f64 / d,
        block_bytes_per_tx_after_syncfs: bytes_all as f64 / d,
        immediate,
        deferred,
        per_tx: immediate.per_tx(tx),
        per_tx_after_syncfs: both.per_tx(tx),
        sync_calls,
        devstat,
    }
}

/// The summed counters of the target's devices (data device, external journal device).
fn device_counters(devices: &[String]) -> Result<DevStat, LabError> {
    let mut sum = DevStat::default();
    for name in devices {
        sum = sum.plus(&DevStat::read(name)?);
    }
    Ok(sum)
}

/// One database per stream, created in `dir` and filled with the rows the stream needs.
fn open_filled(
    dir: &std::path::Path,
    db_config: DbConfig,
    streams: &[StreamSpec],
) -> Result<Vec<rusqlite::Connection>, workload::WorkloadError> {
    let mut conns = Vec::with_capacity(streams.len());
    for (t, s) in streams.iter().enumerate() {
        let conn = workload::open(&dir.join(format!("t{t}.db")), db_config)?;
        workload::fill(&conn, s.rows_needed(), s.record_bytes, s.seed)?;
        conns.push(conn);
    }
    Ok(conns)
}

/// Runs every stream on its own thread, all released at once by `barrier`; each returns its
/// transaction latencies.
fn run_streams(
    conns: &mut [rusqlite::Connection],
    streams: &[StreamSpec],
    barrier: &Barrier,
) -> Vec<Result<Vec<Duration>, workload::WorkloadError>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = conns
            .iter_mut()
            .zip(streams)
            .map(|(conn, s)| {
                scope.spawn(move || {
                    barrier.wait();
                    workload::run_stream(conn, s)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(workload::WorkloadError::Invalid(
                        "worker thread panicked".into(),
                    ))
                })
            })
            .collect()
    })
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC is the tracer's clock ("mono").
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
