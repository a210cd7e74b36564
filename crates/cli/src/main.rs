#![recursion_limit = "256"]
//! `roamkv`: the edge server, the operator's tools for a data directory, the demo, and (features
//! `bench` and `lab`, on by default; the Debian package leaves them out) the benchmark and the
//! I/O lab.

mod admin;
mod backup;
mod demo;
mod export;
mod handoff;
mod json;
mod reads;
mod remote;
mod stats_table;

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e`, mimalloc.h, v2 and v3: the
/// sys crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the OS at once instead of 10 ms later: a server in a memory
/// cgroup (a gateway's) was OOM-killed by an export's growing buffers, each freed copy held
/// for those 10 ms (crates/cli/tests/export_memory.rs, 96 MiB). Ingest measured the same.
fn return_freed_memory_at_once() {
    // SAFETY: sets an option value; mimalloc's options are plain integers read on each use.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

use clap::{CommandFactory, Parser, Subcommand};

#[cfg(feature = "lab")]
const ABOUT: &str = "Storage for the edge: a two-level key-value engine for devices that come and go, and a lab for flash file systems.";
/// The package's build (no lab): what it carries.
#[cfg(not(feature = "lab"))]
const ABOUT: &str = "Storage for the edge: a two-level key-value engine and edge server for devices that come and go.";

#[derive(Parser)]
#[command(
    name = "roamkv",
    version,
    about = ABOUT
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Ingest simulated moving devices into a fresh data directory and show what each tier holds.
    Demo(demo::DemoArgs),
    /// Read JSON lines from stdin and write them in batches.
    Load(admin::LoadArgs),
    /// Print one reading as a JSON line (from --data DIR, or --server URL).
    Get(reads::GetArgs),
    /// Print the readings of a device (optionally one sensor and a time range) as JSON lines.
    Scan(reads::ScanArgs),
    /// Print the newest reading of each sensor of a device (or of one sensor) as JSON lines.
    Latest(reads::LatestArgs),
    /// List the devices here: tier, age, readings in the log, runs in the lower tier.
    Devices(reads::DevicesArgs),
    /// Remove a device from this edge.
    Depart(reads::DepartArgs),
    /// Show what each tier holds and the engine's write accounting.
    Stats(reads::StatsArgs),
    /// Verify every checksum of a data directory (exit 1 on damage).
    Check(admin::CheckArgs),
    /// Copy a data directory, consistently, into a backup set while it serves (--server) or
    /// while nothing runs on it (--data); or check a set (--verify).
    Backup(backup::BackupArgs),
    /// Write readings (of some devices or all, over a time range) to a Parquet, Arrow, CSV or
    /// JSON lines file, from a running server (--server) or a data directory (--data).
    Export(export::ExportArgs),
    /// Make a new data directory from a backup.
    Restore(backup::RestoreArgs),
    /// The TPCx-IoT mobility benchmark against RocksDB, LevelDB and SQLite.
    #[cfg(feature = "bench")]
    Bench(roamkv_bench::cli::BenchArgs),
    /// The I/O lab: file systems on loop devices, block tracing, SQLite workloads.
    #[cfg(feature = "lab")]
    Lab(roamkv_lab::cli::LabArgs),
    /// Run the edge server: EdgeX core-data v3 HTTP API, MQTT ingest, metrics, status page.
    Serve(Box<roamkv_server::ServeArgs>),
    /// Hand a device from one running edge to another (or call a handoff off).
    Handoff(handoff::HandoffArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    /// (e.g. `roamkv completions bash > /etc/bash_completion.d/roamkv`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page, roff (e.g. `roamkv man | man -l -`); with --dir, write it and a
    /// page for every subcommand it names (roamkv-serve.1, ...) into DIR.
    Man {
        /// Write roamkv.1 and one page per subcommand here instead of printing roamkv.1.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Load(args) => admin::load(&args),
        Command::Get(args) => reads::get(&args),
        Command::Scan(args) => reads::scan(&args),
        Command::Latest(args) => reads::latest(&args),
        Command::Devices(args) => reads::devices(&args),
        Command::Depart(args) => reads::depart(&args),
        Command::Stats(args) => reads::stats(&args),
        Command::Check(args) => return admin::check(&args),
        Command::Backup(args) => match backup::run(&args) {
            Ok(code) => return code,
            Err(message) => Err(message),
        },
        Command::Restore(args) => backup::restore(&args),
        Command::Export(args) => export::run(&args),
        #[cfg(feature = "bench")]
        Command::Bench(args) => return roamkv_bench::cli::run(&args),
        #[cfg(feature = "lab")]
        Command::Lab(args) => return roamkv_lab::cli::run(&args),
        Command::Serve(args) => roamkv_server::run(&args),
        Command::Handoff(args) => handoff::run(&args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "roamkv", &mut std::io::stdout());
            Ok(())
        }
        // The page names a page per subcommand (roamkv-serve(1)); `--dir` writes them all, as
        // the package installs them, and no `help` page is named or written.
        Command::Man { dir: None } => {
            clap_mangen::Man::new(Cli::command().disable_help_subcommand(true))
                .render(&mut std::io::stdout())
                .map_err(|e| format!("writing the manual page: {e}"))
        }
        Command::Man { dir: Some(dir) } => clap_mangen::generate_to(Cli::command(), &dir)
            .map_err(|e| format!("writing the manual pages into {}: {e}", dir.display())),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("roamkv: {message}");
            ExitCode::FAILURE
        }
    }
}
