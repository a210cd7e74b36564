//! The lab without the engine: `cargo run --release -p roamkv-lab --example lab -- fs --quick`
//! builds the lab alone (no RocksDB: a first build in about a minute) and runs what `roamkv lab fs
//! --quick` runs. `lab queries` then has no roamkv store (the `engine` feature is off).
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "lab")]
struct Cli {
    #[command(flatten)]
    lab: roamkv_lab::cli::LabArgs,
}

fn main() -> std::process::ExitCode {
    roamkv_lab::cli::run(&Cli::parse().lab)
}
