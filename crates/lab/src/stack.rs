//! `roamkv lab stack`: paper 004's step-by-step table. SQLite single-row inserts per second and
//! block writes per insert, from Android's stock stack (ext4 ordered, TRUNCATE journal, fsync)
//! through each fix alone (fdatasync, external journal, WAL) to the fixes combined, with the
//! paper's figures beside ours; and polled vs interrupt-driven I/O (its section 6.4) where the
//! device can poll.
//!
//! Polling: io_uring's IORING_SETUP_IOPOLL completes requests by polling the device's poll
//! queues; a device without them (loop devices, virtio-blk without poll queues) cannot do it.
//! The lab asks the device (/sys/block/DEV/queue/io_poll) and tries one polled O_DIRECT write;
//! where either says no, the report says "not supported by this device" and gives no number.
use crate::LabError;
use crate::sqlite::config::{JournalMode, Op, SyncCall, Synchronous};
use crate::sqlite::measure::{RunSpec, run_on, run_one};
use crate::vm::{self, InitWords};
use roamkv_testbed::fixture::{Fixture, FsSpec, interrupted};
use roamkv_testbed::prerequisite::require_root;
use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, write_json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct StackArgs {
    /// Fewer inserts per step (a minute or two in all).
    #[arg(long)]
    pub quick: bool,
    /// Inserts per step (default 1000; --quick 200).
    #[arg(long, value_name = "N")]
    pub inserts: Option<usize>,
    /// Directory for stack.json and stack.html.
    #[arg(long, value_name = "DIR", default_value = "out/lab-stack")]
    pub out: PathBuf,
    /// Run the steps that need no second device in the qemu guest instead, on F2FS with ext4 in
    /// the same guest as the control (paper 004 ends on F2FS). --fs then names guest file
    /// systems (default: ext4,f2fs).
    #[arg(long)]
    pub vm: bool,
    /// Guest file systems for --vm.
    #[arg(long, value_name = "LIST")]
    pub fs: Option<String>,
    /// Guest memory for --vm.
    #[arg(long, default_value_t = 1024)]
    pub vm_memory_mib: u32,
}

/// One step of the table.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Step {
    pub name: &'static str,
    pub fs: FsSpec,
    pub journal_mode: JournalMode,
    pub sync_call: SyncCall,
    /// Paper 004's inserts/s for this step where its text gives one (39 stock; +17 % fdatasync;
    /// +30 % external journal; +53 % fdatasync + external journal + polling; 92 all on EXT4).
    pub paper_inserts_per_s: Option<f64>,
}

/// Paper 004's stock Android stack: 39 inserts/s (section 7).
const PAPER_STOCK: f64 = 39.0;

pub fn steps() -> Vec<Step> {
    let step = |name, fs, journal_mode, sync_call, paper| Step {
        name,
        fs,
        journal_mode,
        sync_call,
        paper_inserts_per_s: paper,
    };
    vec![
        step(
            "stock: ext4 ordered, TRUNCATE, fsync",
            FsSpec::Ext4,
            JournalMode::Truncate,
            SyncCall::Fsync,
            Some(PAPER_STOCK),
        ),
        step(
            "+ fdatasync",
            FsSpec::Ext4,
            JournalMode::Truncate,
            SyncCall::Fdatasync,
            Some(PAPER_STOCK * 1.17),
        ),
        step(
            "+ external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Truncate,
            SyncCall::Fsync,
            Some(PAPER_STOCK * 1.30),
        ),
        step(
            "+ WAL",
            FsSpec::Ext4,
            JournalMode::Wal,
            SyncCall::Fsync,
            None,
        ),
        step(
            "fdatasync + external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Truncate,
            SyncCall::Fdatasync,
            // The paper's +53 % includes polled I/O, which this row does not.
            Some(PAPER_STOCK * 1.53),
        ),
        step(
            "all on ext4: WAL + fdatasync + external journal",
            FsSpec::Ext4ExternalJournal,
            JournalMode::Wal,
            SyncCall::Fdatasync,
            Some(92.0),
        ),
    ]
}

/// The paper's best: F2FS with every fix, 157 inserts/s. This kernel has no F2FS; the row is
/// reported as not run, with the paper's figure beside it.
const PAPER_F2FS_ALL: f64 = 157.0;

#[derive(Clone, Debug, serde::Serialize)]
pub struct StepResult {
    pub step: Step,
    pub inserts_per_s: f64,
    /// 1e6 / median latency (robust to the stalls a shared host adds to the mean).
    pub inserts_per_s_at_p50: f64,
    pub block_writes_per_insert: f64,
    pub block_writes_per_insert_after_syncfs: f64,
    pub flushes_per_insert: f64,
    pub error: Option<String>,
}

/// Whether polled I/O can be measured, and why not.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PollingReport {
    pub device: String,
    pub queue_io_poll: Option<String>,
    /// The outcome of one IOPOLL O_DIRECT write, in words.
    pub iopoll_write: String,
    pub supported: bool,
    /// Every block device's io_poll flag (the machine's devices, for the reader).
    pub devices: Vec<(String, String)>,
}

pub fn run(args: &StackArgs) -> ExitCode {
    let result = if args.vm {
        run_steps_in_guest(args)
    } else {
        run_steps(args)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roamkv lab stack: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Inserts per step: --inserts, else 1000 (--quick: 200); at most a million.
fn inserts_per_step(args: &StackArgs) -> Result<usize, LabError> {
    let inserts = args.inserts.unwrap_or(if args.quick { 200 } else { 1000 });
    if inserts == 0 || inserts > 1_000_000 {
        return Err(LabError::Unsupported(
            "--inserts must be in 1..=1000000".into(),
        ));
    }
    Ok(inserts)
}

/// One single-row insert per transaction, 100 B, synchronous FULL: paper 004's measurement.
fn insert_spec(journal_mode: JournalMode, sync_call: SyncCall, inserts: usize) -> RunSpec {
    RunSpec {
        journal_mode,
        synchronous: Synchronous::Full,
        sync_call,
        op: Op::Insert,
        transactions: inserts,
        rows_per_tx: 1,
        record_bytes: 100,
        threads: 1,
        seed: 4,
    }
}

fn run_steps(args: &StackArgs) -> Result<ExitCode, LabError> {
    let inserts = inserts_per_step(args)?;
    require_root()?;
    let mut results = Vec::new();
    let mut polling = None;
    for step in steps() {
        if interrupted() {
            return Err(LabError::Interrupted);
        }
        eprintln!("roamkv lab stack: {} ({inserts} inserts)", step.name);
        let outcome = Fixture::create(step.fs, 512 << 20).and_then(|fx| {
            if polling.is_none() {
                polling = Some(polling_report(&fx));
            }
            run_one(
                &fx,
                &insert_spec(step.journal_mode, step.sync_call, inserts),
            )
        });
        results.push(match outcome {
            Ok(r) => StepResult {
                step,
                inserts_per_s: r.tx_per_sec,
                inserts_per_s_at_p50: r.tx_per_sec_at_p50,
                block_writes_per_insert: r.block_writes_per_tx,
                block_writes_per_insert_after_syncfs: r.block_writes_per_tx_after_syncfs,
                flushes_per_insert: r.flushes_per_tx,
                error: None,
            },
            Err(LabError::Interrupted) => return Err(LabError::Interrupted),
            Err(e) => StepResult {
                step,
                inserts_per_s: f64::NAN,
                inserts_per_s_at_p50: f64::NAN,
                block_writes_per_insert: f64::NAN,
                block_writes_per_insert_after_syncfs: f64::NAN,
                flushes_per_insert: f64::NAN,
                error: Some(e.to_string()),
            },
        });
    }
    let polling = polling.unwrap_or_else(|| PollingReport {
        device: "-".into(),
        queue_io_poll: None,
        iopoll_write: "not tried: no lab file system was made".into(),
        supported: false,
        devices: block_devices_io_poll(),
    });
    render(args, inserts, &results, &polling)?;
    Ok(if results.iter().any(|r| r.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn block_devices_io_poll() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir("/sys/block")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let flag = std::fs::read_to_string(e.path().join("queue/io_poll"))
                        .map_or("?".into(), |s| s.trim().to_string());
                    (name, flag)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Asks the fixture's device whether it polls, and tries one IOPOLL write on it.
fn polling_report(fx: &Fixture) -> PollingReport {
    let queue_io_poll =
        std::fs::read_to_string(format!("/sys/block/{}/queue/io_poll", fx.device_name()))
            .ok()
            .map(|s| s.trim().to_string());
    let (iopoll_write, accepted) = match iopoll_write(&fx.mount_dir().join("iopoll.dat")) {
        Ok(()) => ("a polled 4 KiB O_DIRECT write completed".to_string(), true),
        Err(e) => (e, false),
    };
    PollingReport {
        device: fx.device().display().to_string(),
        supported: accepted && queue_io_poll.as_deref() == Some("1"),
        queue_io_poll,
        iopoll_write,
        devices: block_devices_io_poll(),
    }
}

/// One 4 KiB O_DIRECT write through an io_uring made with IORING_SETUP_IOPOLL.
fn iopoll_write(path: &std::path::Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("open O_DIRECT: {e}"))?;
    let mut ring: io_uring::IoUring = io_uring::IoUring::builder()
        .setup_iopoll()
        .build(4)
        .map_err(|e| format!("io_uring_setup with IOPOLL: {e}"))?;
    let layout = std::alloc::Layout::from_size_align(4096, 4096).map_err(|e| e.to_string())?;
    // SAFETY: layout has a non-zero size; the buffer is freed below after the request completed.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    if buffer.is_null() {
        return Err("out of memory".into());
    }
    let write = io_uring::opcode::Write::new(io_uring::types::Fd(file.as_raw_fd()), buffer, 4096)
        .offset(0)
        .build();
    // SAFETY: the buffer and the fd outlive the request: we wait for its completion below.
    let pushed = unsafe { ring.submission().push(&write) }.is_ok();
    let result = if !pushed {
        Err("submission queue full".to_string())
    } else {
        match ring.submit_and_wait(1) {
            Err(e) => Err(format!("io_uring_enter: {e}")),
            Ok(_) => match ring.completion().next() {
                // The kernel accepted the request but polling found no completion: the device
                // has no poll queue to poll.
                None => Err("io_uring_enter returned, but polling found no completion".into()),
                Some(cqe) if cqe.result() == 4096 => Ok(()),
                Some(cqe) if cqe.result() < 0 => Err(format!(
                    "the polled write failed: {}",
                    std::io::Error::from_raw_os_error(-cqe.result())
                )),
                Some(cqe) => Err(format!("short polled write: {} bytes", cqe.result())),
            },
        }
    };
    // SAFETY: allocated above with this layout; the ring no longer references it.
    unsafe { std::alloc::dealloc(buffer, layout) };
    let _ = std::fs::remove_file(path);
    result
}

fn fmt(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "-".into()
    }
}

fn render(
    args: &StackArgs,
    inserts: usize,
    results: &[StepResult],
    polling: &PollingReport,
) -> Result<(), LabError> {
    let stock = results.first().map_or(f64::NAN, |r| r.inserts_per_s);
    let mut rows: Vec<Vec<String>> = results.iter().map(|r| step_row(r, stock)).collect();
    rows.push(f2fs_row());
    let polled = polling_verdict(polling);
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&STEP_COLUMNS, &rows)
    );
    println!("polled I/O (io_uring IOPOLL): {polled}");

    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "inserts_per_step": inserts, "record_bytes": 100,
        "steps": results, "paper_f2fs_all_inserts_per_s": PAPER_F2FS_ALL,
        "polling": polling, "polled_io": polled,
    });
    let json_path = write_json(&args.out, "stack", &json)?;
    let mut html = Html::new(
        "roamkv lab stack: paper 004's I/O stack, step by step",
        &header,
    );
    html.paragraph(&format!(
        "{inserts} single-row SQLite inserts (100 B, synchronous FULL) per step, each on a fresh \
         loop-device file system; block writes counted by the lab's block tracer. The paper's \
         figures are from its sections 6-7 (Galaxy S3 eMMC, Android 4.0.4); where it gives a \
         percentage, its number is 39 inserts/s times that gain."
    ));
    html.svg(&gain_chart(results, stock));
    html.table(&STEP_COLUMNS, &rows);
    html.heading("Polled vs interrupt-driven I/O");
    html.paragraph(&format!("io_uring IOPOLL: {polled}"));
    let device_rows: Vec<Vec<String>> = polling
        .devices
        .iter()
        .map(|(d, f)| vec![d.clone(), f.clone()])
        .collect();
    html.table(&["block device", "queue/io_poll"], &device_rows);
    let html_path = args.out.join("stack.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

/// The columns of the table of steps, one `step_row` each.
const STEP_COLUMNS: [&str; 11] = [
    "step",
    "fs",
    "journal",
    "sync",
    "inserts/s",
    "at p50",
    "x stock",
    "paper inserts/s",
    "paper x stock",
    "block writes/insert",
    "incl. writeback",
];

/// One step's row; `stock`: the first step's inserts/s, which the others are relative to.
fn step_row(r: &StepResult, stock: f64) -> Vec<String> {
    let mut row = vec![
        r.step.name.to_string(),
        r.step.fs.name().to_string(),
        r.step.journal_mode.name().to_string(),
        r.step.sync_call.name().to_string(),
    ];
    match &r.error {
        Some(e) => {
            row.push(format!("error: {e}"));
            row.extend((0..2).map(|_| String::new()));
        }
        None => row.extend([
            fmt(r.inserts_per_s),
            fmt(r.inserts_per_s_at_p50),
            format!("{:.2}", r.inserts_per_s / stock),
        ]),
    }
    row.push(r.step.paper_inserts_per_s.map_or("-".into(), fmt));
    row.push(
        r.step
            .paper_inserts_per_s
            .map_or("-".into(), |p| format!("{:.2}", p / PAPER_STOCK)),
    );
    row.push(fmt(r.block_writes_per_insert));
    row.push(fmt(r.block_writes_per_insert_after_syncfs));
    row
}

/// The paper's last step, which this kernel cannot run: its figures only.
fn f2fs_row() -> Vec<String> {
    vec![
        "all on F2FS".into(),
        "f2fs".into(),
        "wal".into(),
        "fdatasync".into(),
        "not run here: this kernel has no F2FS (`lab stack --vm` runs it in the guest)".into(),
        String::new(),
        String::new(),
        fmt(PAPER_F2FS_ALL),
        format!("{:.2}", PAPER_F2FS_ALL / PAPER_STOCK),
        String::new(),
        String::new(),
    ]
}

/// Whether polled I/O works on the lab's device, in words.
fn polling_verdict(polling: &PollingReport) -> String {
    if polling.supported {
        "supported (not measured by this version)".to_string()
    } else {
        format!(
            "not supported by this device ({}: queue/io_poll = {}; {})",
            polling.device,
            polling.queue_io_poll.as_deref().unwrap_or("absent"),
            polling.iopoll_write
        )
    }
}

/// Each step's inserts/s relative to the stock stack, ours beside the paper's.
fn gain_chart(results: &[StepResult], stock: f64) -> String {
    let names: Vec<String> = results.iter().map(|r| r.step.name.to_string()).collect();
    bar_chart_svg(
        "Inserts/s relative to the stock stack: ours vs paper 004",
        "x stock",
        &names,
        &[
            (
                "ours".into(),
                results.iter().map(|r| r.inserts_per_s / stock).collect(),
            ),
            (
                "paper 004".into(),
                results
                    .iter()
                    .map(|r| {
                        r.step
                            .paper_inserts_per_s
                            .map_or(f64::NAN, |p| p / PAPER_STOCK)
                    })
                    .collect(),
            ),
        ],
    )
}

// ---- the --vm route: the steps that need no second device, in the guest ---------------------

/// The steps a guest disk can take: the stock stack and the fixes that need no second device.
/// (On F2FS, "WAL + fdatasync" is the paper's last row less polled I/O, which virtio-blk cannot
/// do either.)
const GUEST_STEPS: [(&str, JournalMode, SyncCall); 4] = [
    (
        "stock: TRUNCATE, fsync",
        JournalMode::Truncate,
        SyncCall::Fsync,
    ),
    ("+ fdatasync", JournalMode::Truncate, SyncCall::Fdatasync),
    ("+ WAL", JournalMode::Wal, SyncCall::Fsync),
    ("WAL + fdatasync", JournalMode::Wal, SyncCall::Fdatasync),
];

/// Guest file systems of `lab stack --vm` by default.
const GUEST_DEFAULT_FS: &str = "ext4,f2fs";

/// Inside the guest (hidden): `GUEST_STEPS` on one mounted file system.
#[derive(clap::Args, Debug)]
pub struct GuestStackArgs {
    #[arg(long)]
    pub inserts: usize,
    /// The words the guest's /init appends (see `vm::InitWords`).
    #[arg(last = true)]
    pub init_words: Vec<String>,
}

/// One step in the guest, as it comes back to the host.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GuestStep {
    pub fs: String,
    pub step: String,
    pub journal_mode: String,
    pub sync_call: String,
    pub inserts_per_s: f64,
    pub inserts_per_s_at_p50: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_p99_9: f64,
    pub block_writes_per_insert: f64,
    pub block_writes_per_insert_after_syncfs: f64,
    pub flushes_per_insert: f64,
}

pub fn run_guest_stack(args: &GuestStackArgs) -> ExitCode {
    let outcome = InitWords::parse(&args.init_words).and_then(|init| {
        let mut steps = Vec::new();
        for (name, journal_mode, sync_call) in GUEST_STEPS {
            eprintln!("guest: {} {name} ({} inserts)", init.fs_name, args.inserts);
            let r = run_on(
                &init.target(),
                &insert_spec(journal_mode, sync_call, args.inserts),
            )?;
            steps.push(GuestStep {
                fs: init.fs_name.clone(),
                step: name.to_string(),
                journal_mode: journal_mode.name().to_string(),
                sync_call: sync_call.name().to_string(),
                inserts_per_s: r.tx_per_sec,
                inserts_per_s_at_p50: r.tx_per_sec_at_p50,
                latency_us_p50: r.latency_us.p50,
                latency_us_p99: r.latency_us.p99,
                latency_us_p99_9: r.latency_us.p99_9,
                block_writes_per_insert: r.block_writes_per_tx,
                block_writes_per_insert_after_syncfs: r.block_writes_per_tx_after_syncfs,
                flushes_per_insert: r.flushes_per_tx,
            });
        }
        init.write_results(&steps)
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("guest-stack: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_steps_in_guest(args: &StackArgs) -> Result<ExitCode, LabError> {
    let inserts = inserts_per_step(args)?;
    let names = vm::parse_guest_fs_list(args.fs.as_deref().unwrap_or(GUEST_DEFAULT_FS))?;
    require_root()?;
    let mut prefix = vm::command_prefix("stack");
    prefix.extend([
        "guest-stack".to_string(),
        "--inserts".into(),
        inserts.to_string(),
        "--".into(),
    ]);
    let guest = vm::run_guest(&prefix, &names, &vm::plain_options(args.vm_memory_mib))?;
    let mut steps: Vec<GuestStep> = Vec::new();
    let mut errors = Vec::new();
    for fs in &guest.file_systems {
        if let Some(e) = &fs.error {
            errors.push(format!("{}: {e}", fs.fs));
        }
        for m in &fs.measurements {
            match serde_json::from_value::<GuestStep>(m.clone()) {
                Ok(step) => steps.push(step),
                Err(e) => errors.push(format!("{}: unreadable step ({e}): {m}", fs.fs)),
            }
        }
    }
    render_guest(args, inserts, &guest.kernel, &steps, &errors)?;
    Ok(
        if errors.is_empty() && steps.len() == names.len() * GUEST_STEPS.len() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}

/// The columns of the guest's table, one `guest_row` each.
const GUEST_COLUMNS: [&str; 11] = [
    "fs",
    "step",
    "inserts/s",
    "at p50",
    "x guest ext4 stock",
    "paper inserts/s",
    "paper x stock",
    "p99 us",
    "p99.9 us",
    "writes/insert",
    "incl. writeback",
];

/// Paper 004's figure for a guest step, where it gives one: ext4's stock stack and fdatasync,
/// and F2FS with every fix.
fn paper_figure(fs: &str, step: &str) -> Option<f64> {
    match (fs, step) {
        ("ext4", "stock: TRUNCATE, fsync") => Some(PAPER_STOCK),
        ("ext4", "+ fdatasync") => Some(PAPER_STOCK * 1.17),
        ("f2fs", "WAL + fdatasync") => Some(PAPER_F2FS_ALL),
        _ => None,
    }
}

fn guest_row(step: &GuestStep, stock: f64) -> Vec<String> {
    let paper = paper_figure(&step.fs, &step.step);
    vec![
        format!("{} (guest)", step.fs),
        step.step.clone(),
        fmt(step.inserts_per_s),
        fmt(step.inserts_per_s_at_p50),
        format!("{:.2}", step.inserts_per_s / stock),
        paper.map_or("-".into(), fmt),
        paper.map_or("-".into(), |p| format!("{:.2}", p / PAPER_STOCK)),
        fmt(step.latency_us_p99),
        fmt(step.latency_us_p99_9),
        fmt(step.block_writes_per_insert),
        fmt(step.block_writes_per_insert_after_syncfs),
    ]
}

fn render_guest(
    args: &StackArgs,
    inserts: usize,
    kernel: &str,
    steps: &[GuestStep],
    errors: &[String],
) -> Result<(), LabError> {
    // The guest's ext4 stock stack is the baseline, as the paper's stock stack is its own.
    let stock = steps
        .iter()
        .find(|s| s.fs == "ext4" && s.step == GUEST_STEPS[0].0)
        .map_or(f64::NAN, |s| s.inserts_per_s);
    let rows: Vec<Vec<String>> = steps.iter().map(|s| guest_row(s, stock)).collect();
    println!(
        "{}",
        roamkv_testbed::report::terminal_table(&GUEST_COLUMNS, &rows)
    );
    for e in errors {
        eprintln!("guest: {e}");
    }
    let header = MachineHeader::collect();
    let json = serde_json::json!({
        "machine": header, "guest_kernel": kernel, "inserts_per_step": inserts,
        "record_bytes": 100, "steps": steps, "paper_f2fs_all_inserts_per_s": PAPER_F2FS_ALL,
        "counted_by": "the guest's /sys/block/vda/stat (untraced)", "errors": errors,
    });
    let json_path = write_json(&args.out, "stack-vm", &json)?;
    let mut html = Html::new(
        &format!(
            "roamkv lab stack --vm (guest kernel {kernel}, software emulation: compare guest rows with each other only)"
        ),
        &header,
    );
    html.paragraph(&format!(
        "{inserts} single-row SQLite inserts (100 B, synchronous FULL) per step inside a qemu          guest (one virtio disk, cache=none), each step on the same freshly made file system;          'x guest ext4 stock' is relative to the guest's own ext4 stock stack. Block writes are          the virtual disk's own counters. Errors: {}",
        if errors.is_empty() {
            "none".to_string()
        } else {
            errors.join("; ")
        }
    ));
    html.table(&GUEST_COLUMNS, &rows);
    let html_path = args.out.join("stack-vm.html");
    html.write(&html_path)?;
    println!("wrote {} and {}", json_path.display(), html_path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_start_at_the_stock_stack_and_cite_the_paper() {
        let s = steps();
        assert_eq!(s[0].fs, FsSpec::Ext4);
        assert_eq!(s[0].journal_mode, JournalMode::Truncate);
        assert_eq!(s[0].sync_call, SyncCall::Fsync);
        assert_eq!(s[0].paper_inserts_per_s, Some(39.0));
        assert_eq!(s.last().and_then(|x| x.paper_inserts_per_s), Some(92.0));
    }

    #[test]
    fn the_guest_steps_and_the_paper_figures_line_up() {
        assert_eq!(paper_figure("ext4", GUEST_STEPS[0].0), Some(PAPER_STOCK));
        assert_eq!(paper_figure("f2fs", GUEST_STEPS[3].0), Some(PAPER_F2FS_ALL));
        assert_eq!(paper_figure("vfat", GUEST_STEPS[3].0), None);
        let step = GuestStep {
            fs: "f2fs".into(),
            step: GUEST_STEPS[3].0.into(),
            journal_mode: "wal".into(),
            sync_call: "fdatasync".into(),
            inserts_per_s: 80.0,
            inserts_per_s_at_p50: 90.0,
            latency_us_p50: 1.0,
            latency_us_p99: 2.0,
            latency_us_p99_9: 3.0,
            block_writes_per_insert: 2.0,
            block_writes_per_insert_after_syncfs: 2.5,
            flushes_per_insert: 1.0,
        };
        let row = guest_row(&step, 20.0);
        assert_eq!(row[4], "4.00");
        assert_eq!(row[5], "157.0");
    }

    #[test]
    fn every_device_reports_an_io_poll_flag() {
        for (name, flag) in block_devices_io_poll() {
            assert!(!name.is_empty());
            assert!(flag == "0" || flag == "1" || flag == "?", "{name}: {flag}");
        }
    }
}
