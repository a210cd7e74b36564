//! `roamkv bench powercut`: real power cuts. roamkv runs inside a qemu guest (Debian's stock
//! kernel, software emulation) with its data directory on an ext4 virtio disk; the host SIGKILLs
//! qemu at a random moment while `roamkv load --ack` streams acknowledgements over the serial
//! console, then boots the guest again: the guest kernel replays the ext4 journal, `roamkv check`
//! verifies every checksum, and the survey (survival.rs) reads back every acknowledged record.
//!
//! What a SIGKILL of qemu models: everything in the guest's page cache and not yet handed to
//! the virtual disk is gone, as in a power cut. The disk uses `cache=none`, so the guest's
//! flushes become fdatasync of the image file on the host; writes qemu had already passed to the
//! host survive even without a flush (a disk whose volatile cache never reorders or drops
//! written data: a kinder disk than some real ones).
//!
//! Each boot does: check + survey of the previous round (if any), then load until killed. The
//! last boot only checks and surveys, then powers off cleanly.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::error::{BenchError, Result};
use crate::faults::report::{CheckOutcome, FaultResults, RoundRow};
use crate::faults::survival::{self, Ledger, Survey};
use roamkv_testbed::vm::GuestImage;

/// Every line the guest's init prints for the host starts with this.
const MARK: &str = "POWERCUT ";
/// Record numbers skipped after the most a round can have sent (see `next_start`).
const ROUND_GAP: u64 = 1000;
/// A boot that prints nothing useful for this long has hung.
const BOOT_TIMEOUT: Duration = Duration::from_secs(900);

#[derive(Args, Debug)]
pub struct PowercutArgs {
    /// Power cuts to make (the guest boots once more at the end to check the last one).
    #[arg(long, default_value_t = 20)]
    pub rounds: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory: results.json, report.html, console.log and the guest's disk image
    /// (deleted after a passing run unless --keep-data).
    #[arg(long, default_value = "out/powercut")]
    pub out: PathBuf,
    /// Earliest power cut, in ms after the guest starts loading (early cuts hit the engine's
    /// open and recovery).
    #[arg(long, default_value_t = 2000)]
    pub cut_after_ms_min: u64,
    /// Latest power cut, in ms after the guest starts loading.
    #[arg(long, default_value_t = 12000)]
    pub cut_after_ms_max: u64,
    /// Records the guest feeds its loader per second.
    #[arg(long, default_value_t = 2000)]
    pub records_per_second: u64,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    pub memory_mib: u32,
    /// Size of the guest's ext4 data disk (a sparse file), in MiB.
    #[arg(long, default_value_t = 1024)]
    pub disk_mib: u64,
    /// Where the guest's kernel and initramfs are built and kept.
    #[arg(long, default_value = "/var/cache/roamkv-bench/powercut-vm")]
    pub cache: PathBuf,
    /// Keep the disk image after a passing run.
    #[arg(long)]
    pub keep_data: bool,
}

#[derive(Args, Debug)]
pub struct GuestArgs {
    #[command(subcommand)]
    pub command: GuestCommand,
}

#[derive(Subcommand, Debug)]
pub enum GuestCommand {
    /// Print the record stream as JSON lines, from record FROM on, until stdout closes.
    Feed {
        #[arg(long)]
        from: u64,
        #[arg(long)]
        records_per_second: u64,
    },
    /// Open the data directory (cutting a torn tail) and print what it holds of the stream as one JSON line.
    Survey {
        #[arg(long)]
        data: PathBuf,
    },
}

/// Inside the guest.
pub fn guest(args: &GuestArgs) -> Result<()> {
    match &args.command {
        GuestCommand::Feed {
            from,
            records_per_second,
        } => {
            let stdout = std::io::stdout().lock();
            survival::feed(stdout, *from, *records_per_second, Instant::now());
            Ok(())
        }
        GuestCommand::Survey { data } => {
            let survey = survival::reopen_and_survey(data)?;
            let line = serde_json::to_string(&survey)?;
            println!("{line}");
            Ok(())
        }
    }
}

/// qemu, killed and reaped however a boot ends.
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one boot reported.
#[derive(Debug, Default)]
struct Boot {
    check_lines: Vec<String>,
    survey: Option<Result<Survey>>,
    acked: u64,
    /// ms from "load-start" to the kill; None for the final, clean boot.
    cut_after_ms: Option<u64>,
}

/// Everything a boot needs that does not change between rounds.
struct Guest {
    image: GuestImage,
    disk: PathBuf,
    memory_mib: u32,
    records_per_second: u64,
    console_log: std::fs::File,
}

impl Guest {
    /// Boots the guest. `load`: (first record number, cut the power this long after loading
    /// starts); None: check and survey only, then a clean power-off.
    fn boot(&mut self, load: Option<(u64, u64)>) -> Result<Boot> {
        let append = self.kernel_command_line(load);
        let mut qemu = self.start_qemu(&append)?;
        let lines = console_lines(&mut qemu);
        let booted = Instant::now();
        let _ = writeln!(self.console_log, "--- boot: {append}");
        self.follow_console(
            qemu,
            &lines,
            booted,
            load.map(|(_, cut_after_ms)| cut_after_ms),
        )
    }

    /// The guest kernel's command line: the console, and what the guest's init is to do.
    fn kernel_command_line(&self, load: Option<(u64, u64)>) -> String {
        let mut append = String::from("console=ttyS0 panic=-1 quiet");
        match load {
            Some((from, _)) => append.push_str(&format!(
                " roamkv.mode=load roamkv.from={from} roamkv.rate={}",
                self.records_per_second
            )),
            None => append.push_str(" roamkv.mode=verify"),
        }
        append
    }

    fn start_qemu(&self, append: &str) -> Result<Qemu> {
        let disks = [self.disk.clone()];
        let machine = roamkv_testbed::vm::Machine {
            image: &self.image,
            memory_mib: self.memory_mib,
            append,
            disks: &disks,
        };
        let child = machine
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::os("starting qemu-system-x86_64", e))?;
        Ok(Qemu(child))
    }

    /// Files the console's lines into a `Boot` until the power cut (`cut_after_ms` after the
    /// guest says "load-start"), or, without a cut, until the guest powers off after its survey.
    fn follow_console(
        &mut self,
        mut qemu: Qemu,
        lines: &mpsc::Receiver<String>,
        booted: Instant,
        cut_after_ms: Option<u64>,
    ) -> Result<Boot> {
        let mut boot = Boot::default();
        let mut cut_at: Option<(Instant, Instant)> = None;
        let mut last_news = Instant::now();
        loop {
            let wait = match cut_at {
                Some((_, at)) => at.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(5),
            };
            match lines.recv_timeout(wait) {
                Ok(line) => {
                    last_news = Instant::now();
                    let at_s = booted.elapsed().as_secs_f64();
                    let _ = writeln!(self.console_log, "{at_s:8.3} {line}");
                    if let Some(fatal) = self.take_line(&line, &mut boot) {
                        return Err(BenchError::Run(fatal));
                    }
                    if line.ends_with(&format!("{MARK}load-start"))
                        && let Some(cut_after_ms) = cut_after_ms
                    {
                        let now = Instant::now();
                        cut_at = Some((now, now + Duration::from_millis(cut_after_ms)));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some((started, at)) = cut_at
                        && Instant::now() >= at
                    {
                        self.cut_power(&mut qemu, started, lines, &mut boot);
                        return Ok(boot);
                    }
                    if last_news.elapsed() > BOOT_TIMEOUT {
                        return Err(BenchError::Run(format!(
                            "the guest printed nothing for {} s (see console.log)",
                            BOOT_TIMEOUT.as_secs()
                        )));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = qemu
                        .0
                        .wait()
                        .map_err(|e| BenchError::os("waiting for qemu", e))?;
                    return if cut_after_ms.is_none() && boot.survey.is_some() {
                        Ok(boot)
                    } else {
                        Err(BenchError::Run(format!(
                            "qemu exited ({status}) before the power cut (see console.log)"
                        )))
                    };
                }
            }
        }
    }

    /// The power cut: kills qemu, then files the console lines already on their way out.
    fn cut_power(
        &mut self,
        qemu: &mut Qemu,
        load_started: Instant,
        lines: &mpsc::Receiver<String>,
        boot: &mut Boot,
    ) {
        let _ = qemu.0.kill();
        let _ = qemu.0.wait();
        boot.cut_after_ms = Some(load_started.elapsed().as_millis() as u64);
        // Acks already on their way out of the console still count: each was printed after its
        // fdatasync returned.
        let _ = writeln!(self.console_log, "--- power cut");
        for line in lines.iter() {
            let _ = writeln!(self.console_log, "         {line}");
            let _ = self.take_line(&line, boot);
        }
    }

    /// Files one console line into `boot`; returns the guest's fatal error, if it reported one.
    fn take_line(&mut self, line: &str, boot: &mut Boot) -> Option<String> {
        if let Some(n) = line.strip_prefix("acked ").and_then(|n| n.parse().ok()) {
            boot.acked = n;
            return None;
        }
        // The first line after the firmware's screen clear carries escape codes in front.
        let rest = line.find(MARK).map(|at| &line[at + MARK.len()..])?;
        if let Some(check) = rest.strip_prefix("check ") {
            boot.check_lines.push(check.to_string());
        } else if let Some(survey) = rest.strip_prefix("survey ") {
            boot.survey = Some(if survey.starts_with('{') {
                serde_json::from_str(survey).map_err(|e| BenchError::step("the guest's survey", e))
            } else {
                Err(BenchError::Run(survey.to_string()))
            });
        } else if let Some(fatal) = rest.strip_prefix("fatal ") {
            return Some(format!("the guest: {fatal} (see console.log)"));
        }
        None
    }
}

/// The lines qemu prints on stdout and stderr, read by one thread per stream; the channel
/// closes when qemu has closed both.
fn console_lines(qemu: &mut Qemu) -> mpsc::Receiver<String> {
    let (lines_tx, lines) = mpsc::channel::<String>();
    for stream in [
        qemu.0
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        qemu.0
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = lines_tx.clone();
        std::thread::spawn(move || {
            // The console is a tty: lines end in "\r\n", and a kill may leave half a line.
            for line in BufReader::new(stream).split(b'\n') {
                let Ok(line) = line else { break };
                let text = String::from_utf8_lossy(&line).trim_end().to_string();
                if tx.send(text).is_err() {
                    break;
                }
            }
        });
    }
    lines
}

/// Builds the guest (kernel + initramfs with this roamkv binary) unless the cached one was built
/// from the same binary and scripts.
fn ensure_guest(cache: &Path) -> Result<GuestImage> {
    let roamkv =
        std::env::current_exe().map_err(|e| BenchError::os("finding the roamkv binary", e))?;
    let script = roamkv_testbed::vm::GuestScript {
        name: "powercut-guest.sh",
        text: include_str!("../../vm/powercut-guest.sh"),
    };
    Ok(roamkv_testbed::vm::ensure_image(cache, script, &roamkv)?)
}

/// First record number of the next round. The guest feeds at most `rate` records a second from
/// the moment it says "load-start", which the host sees before it starts its clock: so a round
/// cut `cut_after_ms` later has sent fewer than `rate * (cut_after_ms + 5 s slack)` records.
fn next_start(start: u64, rate: u64, cut_after_ms: u64) -> u64 {
    start + rate * (cut_after_ms + 5000) / 1000 + ROUND_GAP
}

pub fn run(args: &PowercutArgs) -> ExitCode {
    match cut_rounds(args) {
        Ok(results) if results.passed() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("roamkv bench powercut: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A disk image removed on every way out unless asked to keep it.
struct DiskImage {
    path: PathBuf,
    keep: bool,
}

impl Drop for DiskImage {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The run: boot after boot, each one judging the previous round and cutting the power on the
/// next.
fn cut_rounds(args: &PowercutArgs) -> Result<FaultResults> {
    if args.cut_after_ms_min >= args.cut_after_ms_max {
        return Err(BenchError::Usage(
            "--cut-after-ms-min must be below --cut-after-ms-max".into(),
        ));
    }
    for (tool, package) in [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("mkfs.ext4", "e2fsprogs"),
    ] {
        roamkv_testbed::prerequisite::require_tool(tool, package)?;
    }
    let image = ensure_guest(&args.cache)?;
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let mut disk = make_disk(args)?;
    let console_path = args.out.join("console.log");
    let mut guest = Guest {
        image,
        disk: disk.path.clone(),
        memory_mib: args.memory_mib,
        records_per_second: args.records_per_second,
        console_log: std::fs::File::create(&console_path)
            .map_err(|e| BenchError::io("creating", &console_path, e))?,
    };
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut ledger = Ledger::default();
    let mut results = new_results(args);
    let bar = progress_bar(args)?;
    let started = Instant::now();
    let mut next = 0;
    // The round whose check and survey the next boot delivers.
    let mut pending: Option<RoundRow> = None;
    for boot_number in 0..=args.rounds {
        let load = (boot_number < args.rounds).then(|| {
            (
                next,
                rng.random_range(args.cut_after_ms_min..args.cut_after_ms_max),
            )
        });
        let boot = guest.boot(load)?;
        if let Some(row) = pending.take() {
            let failed = judge_round(row, &boot, &ledger, &mut results);
            if failed {
                roamkv_testbed::report::say(
                    &bar,
                    "acknowledged data lost or damaged; stopping".into(),
                );
                break;
            }
        }
        if let Some((start, _)) = load {
            let cut_after_ms = boot.cut_after_ms.unwrap_or_default();
            ledger.record_round(start, boot.acked);
            pending = Some(RoundRow {
                round: boot_number,
                start,
                acked: boot.acked,
                kill_after_ms: cut_after_ms,
                killed_after_first_ack: boot.acked > 0,
                ..RoundRow::default()
            });
            next = next_start(start, args.records_per_second, cut_after_ms);
        }
        bar.inc(1);
        bar.set_message(format!(
            "{} acked, lost {}, corrupt {}, torn tails cut {}",
            ledger.acked_total(),
            results.lost,
            results.corrupt,
            results.torn_tails_cut
        ));
    }
    bar.finish_and_clear();
    results.elapsed_s = started.elapsed().as_secs_f64();
    println!("{}", results.terminal_table());
    results.write(&args.out)?;
    println!("wrote {}", args.out.join("results.json").display());
    disk.keep = args.keep_data || !results.passed();
    Ok(results)
}

/// The guest's data disk: a fresh sparse image with a fresh ext4, so that the rounds' record
/// numbers start at 0. Kept until the run says otherwise.
fn make_disk(args: &PowercutArgs) -> Result<DiskImage> {
    let disk = DiskImage {
        path: args.out.join("disk.img"),
        keep: true,
    };
    let _ = std::fs::remove_file(&disk.path);
    let file =
        std::fs::File::create(&disk.path).map_err(|e| BenchError::io("creating", &disk.path, e))?;
    file.set_len(args.disk_mib << 20)
        .map_err(|e| BenchError::io("sizing", &disk.path, e))?;
    drop(file);
    let mkfs = Command::new("mkfs.ext4")
        .args(["-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
        .arg(&disk.path)
        .status()
        .map_err(|e| BenchError::os("mkfs.ext4", e))?;
    if !mkfs.success() {
        return Err(BenchError::Run(format!(
            "mkfs.ext4 {} failed ({mkfs})",
            disk.path.display()
        )));
    }
    Ok(disk)
}

/// The run's results, empty, with its configuration.
fn new_results(args: &PowercutArgs) -> FaultResults {
    FaultResults::new(
        "powercut",
        args.seed,
        args.rounds,
        serde_json::json!({
            "guest": "qemu-system-x86_64 -accel tcg -smp 1, Debian stock kernel, busybox initramfs",
            "memory_mib": args.memory_mib,
            "disk": format!("{} MiB ext4 (mkfs.ext4 on the host), virtio, cache=none", args.disk_mib),
            "loader": format!("roamkv load --data /data/db {}", crate::faults::crash::LOADER_ARGS.join(" ")),
            "cut_after_ms": [args.cut_after_ms_min, args.cut_after_ms_max],
            "records_per_second": args.records_per_second,
            "cut": "SIGKILL of qemu",
        }),
    )
}

fn progress_bar(args: &PowercutArgs) -> Result<indicatif::ProgressBar> {
    let bar = indicatif::ProgressBar::new(args.rounds + 1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} boots, {elapsed} elapsed, ~{eta} left  {msg}",
        )
        .map_err(|e| BenchError::Run(e.to_string()))?,
    );
    Ok(bar)
}

/// Judges the previous round by the check and survey of the boot after it and adds it to the
/// results; true when acknowledged data was lost or damaged.
fn judge_round(
    mut row: RoundRow,
    boot: &Boot,
    ledger: &Ledger,
    results: &mut FaultResults,
) -> bool {
    let check = CheckOutcome::parse(boot.check_lines.iter().map(String::as_str), true);
    let survey = match &boot.survey {
        Some(Ok(survey)) => Ok(survey),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("the guest printed no survey".to_string()),
    };
    row.judge(
        ledger,
        &check,
        survey.as_ref().copied().map_err(String::as_str),
    );
    let failed = row.lost > 0 || !row.corrupt.is_empty() || row.wrong > 0;
    results.add(row, ledger);
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_round_starts_past_anything_the_last_could_have_sent() {
        // 2000 records/s for 3 s (+5 s slack) = 16000 records at most, then the gap.
        assert_eq!(next_start(100, 2000, 3000), 100 + 16_000 + ROUND_GAP);
    }
}
