//! The settings of `roamkv lab stack`, for the host's run and the guest's alike, and the one
//! rule on them (how many inserts a step makes).
use crate::LabError;
use std::path::PathBuf;

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

/// Inserts per step: --inserts, else 1000 (--quick: 200); at most a million.
pub(super) fn inserts_per_step(args: &StackArgs) -> Result<usize, LabError> {
    let inserts = args.inserts.unwrap_or(if args.quick { 200 } else { 1000 });
    if inserts == 0 || inserts > 1_000_000 {
        return Err(LabError::Unsupported(
            "--inserts must be in 1..=1000000".into(),
        ));
    }
    Ok(inserts)
}
