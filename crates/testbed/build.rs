//! Records the commit the binary is built from (`ROAMKV_GIT_SHA`, every report's header): a
//! binary copied away from its source tree, or installed from a package, has no checkout to ask
//! at run time, and asking the checkout it was built in names whatever is checked out there now.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let sha = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ROAMKV_GIT_SHA={sha}");
    // Built again when HEAD moves: HEAD itself (a checkout) and the ref it names (a commit).
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{head_ref}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
