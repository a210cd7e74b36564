//! The workspace as the gate tests see it: its root and its crates.
use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate under `crates/` with a `src/` (the fuzz crates live inside their crate's folder
/// and are not listed): a new crate is checked the day it appears, without editing a list.
pub fn workspace_crates() -> Vec<String> {
    let crates_dir = workspace_root().join("crates");
    let mut out: Vec<String> = std::fs::read_dir(&crates_dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", crates_dir.display()))
        .flatten()
        .filter(|e| e.path().join("src").is_dir() && e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}
