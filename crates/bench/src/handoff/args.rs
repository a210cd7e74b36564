//! What `roamkv bench handoff` takes: its phases, the links' shape, the rounds and their seed.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Args, Debug, Clone)]
pub struct HandoffBenchArgs {
    #[arg(long, default_value = "out/bench-handoff")]
    pub out: PathBuf,
    /// What to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "latency,bulk,faults")]
    pub phases: Vec<Phase>,
    /// Handoffs of the latency phase.
    #[arg(long, default_value_t = 100)]
    pub latency_handoffs: usize,
    /// Readings of each latency-phase device (10 sensors x 10 Hz x 60 s).
    #[arg(long, default_value_t = 6_000)]
    pub readings: usize,
    /// Bytes of each reading's value in the latency and bulk phases (an EdgeX reading's
    /// stored form is ~200 B).
    #[arg(long, default_value_t = 200)]
    pub value_bytes: usize,
    /// Size of the bulk phase's device, in MiB of values.
    #[arg(long, default_value_t = 256)]
    pub bulk_mib: u64,
    /// Fault rounds.
    #[arg(long, default_value_t = 200)]
    pub rounds: usize,
    /// Seed of the fault rounds' draws (the same seed, the same faults at the same moments).
    #[arg(long, default_value_t = 38)]
    pub seed: u64,
    /// Each node's link rate, Mbit/s (tc tbf on both ends); 0: unshaped.
    #[arg(long, default_value_t = 100)]
    pub rate_mbit: u32,
    /// Round-trip delay the relay adds between the edges and to the cloud (half each way), ms.
    #[arg(long, default_value_t = 20)]
    pub delay_ms: u64,
    /// Packets dropped at random per thousand on each node's input and output, in the fault
    /// rounds.
    #[arg(long, default_value_t = 5)]
    pub loss_permille: u32,
    /// Minutes, not an hour: at most 5 latency handoffs, 32 MiB of bulk, 10 rounds.
    #[arg(long)]
    pub quick: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Phase {
    Latency,
    Bulk,
    Faults,
}

/// The args a `--quick` run uses.
pub fn effective(args: &HandoffBenchArgs) -> HandoffBenchArgs {
    let mut a = args.clone();
    if a.quick {
        a.latency_handoffs = a.latency_handoffs.min(5);
        a.bulk_mib = a.bulk_mib.min(32);
        a.rounds = a.rounds.min(10);
    }
    a
}
