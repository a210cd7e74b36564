//! Stand-alone runner for the lab while the `roamkv` binary is not wired: `cargo run --release
//! -p roamkv-lab --example lab -- fs --quick` is the same as `roamkv lab fs --quick`.
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
