//! `roamkv bench ...`: the subcommands and their dispatch; each command lives in its module
//! (`mobility`, `steady`, `serve`, `sink`, `handoff`, `backup`, `export`, `footprint`,
//! `faults`).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::mobility::sweep::{MobilityArgs, mobility};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

// Parsed once per process: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// TPCx-IoT with mobile devices (paper 002) against roamkv, RocksDB, LevelDB and SQLite.
    Mobility(MobilityArgs),
    /// The long run: minutes of the mobility workload per engine, with space, memory and
    /// throughput recorded every second (is space flat? does memory stay in its budget?).
    Steady(crate::steady::SteadyArgs),
    /// Kill -9 soak: SIGKILL a real `roamkv load --ack` at random moments, re-verify every acknowledged record after each kill.
    Crash(crate::faults::crash::CrashArgs),
    /// Power cuts: roamkv in a virtual machine on an ext4 disk, the machine killed at random moments.
    Powercut(crate::faults::powercut::PowercutArgs),
    /// HTTP ingest of `roamkv serve` (EdgeX events of 1..100 readings) against InfluxDB 1.6 at
    /// equal durability and the in-process engine; peak rate, p50/p99, p99 at half the peak.
    Serve(crate::serve::ServeBenchArgs),
    /// The cloud sink of `roamkv serve` into a private PostgreSQL (and with `--kafka` into a
    /// three-node Kafka cluster, side by side): its capacity, its lag at half of it, an outage
    /// drained, resume times.
    Sink(crate::sink::SinkBenchArgs),
    /// Devices handed between two `roamkv serve`s over shaped, lossy, delayed links in network
    /// namespaces, with the cloud's PostgreSQL: time per handoff, the bulk rate against the
    /// link's, and seeded rounds of kill -9 and link cuts checked against the writers' ledger.
    Handoff(crate::handoff::HandoffBenchArgs),
    /// An online backup of `roamkv serve` during full ingest: what it costs ingest, its rate
    /// against the disk's sequential read, the restore and open times.
    Backup(crate::backup::BackupBenchArgs),
    /// Data out of `roamkv serve`: Parquet exports against the engine's scan, the server's
    /// memory meanwhile, what exports cost ingest; with --python, Client.scan against JSON pages.
    Export(crate::export::ExportBenchArgs),
    /// What a gateway's sensor stream costs its disk: bytes on disk and bytes written to the
    /// device per reading, roamkv (EdgeX and native routes) against InfluxDB 1.6, QuestDB 9.2
    /// and RocksDB, every reading read back.
    Footprint(crate::footprint::FootprintArgs),
    /// The guest side of `powercut` (run inside the virtual machine; not for direct use).
    #[command(hide = true)]
    PowercutGuest(crate::faults::powercut::GuestArgs),
    /// One measured process (started by `mobility`; not for direct use).
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        spec: String,
    },
}

pub fn run(args: &BenchArgs) -> ExitCode {
    let outcome = match &args.command {
        BenchCommand::Mobility(m) => mobility(m),
        BenchCommand::Steady(s) => match crate::steady::run(s) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
        BenchCommand::Worker { spec } => crate::mobility::worker::main(spec),
        BenchCommand::Crash(c) => return crate::faults::crash::run(c),
        BenchCommand::Powercut(p) => return crate::faults::powercut::run(p),
        BenchCommand::Serve(s) => return crate::serve::run(s),
        BenchCommand::Sink(s) => return crate::sink::run(s),
        BenchCommand::Handoff(h) => return crate::handoff::run(h),
        BenchCommand::Backup(b) => return crate::backup::run(b),
        BenchCommand::Export(x) => return crate::export::run(x),
        BenchCommand::Footprint(f) => return crate::footprint::run(f),
        BenchCommand::PowercutGuest(g) => crate::faults::powercut::guest(g),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roamkv bench: {e}");
            ExitCode::FAILURE
        }
    }
}
