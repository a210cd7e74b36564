//! The Python package (`python/`, docs/PYTHON.md): installed with pip into a virtual environment
//! beside pyarrow, pandas and pytest (pinned; from PyPI, once per target directory), then its
//! pytest suite run against a real `roamkv serve` (this build's binary) that its fixture starts.
//! The package is installed from a copy of `python/`, so the tree stays clean.

use std::path::{Path, PathBuf};
use std::process::Command;

use roamkv_testbed::prerequisite;

const TEST: &str = "python_client";
/// What the suite runs on: pinned, so a run is the same every time.
const PACKAGES: [&str; 6] = [
    "pyarrow==26.0.1",
    "pandas==3.1.1",
    "pytest==9.2.0",
    "requests==2.34.2",
    "setuptools==84.2.1",
    "wheel==0.48.0",
];

fn run(command: &mut Command) -> Result<String, String> {
    let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(format!("{command:?} failed:\n{text}"))
    }
}

/// The virtual environment with the suite's packages, made on first use.
fn environment() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-client-venv");
    let installed = venv.join("installed");
    let wanted = PACKAGES.join("\n");
    if std::fs::read_to_string(&installed).is_ok_and(|had| had == wanted) {
        return Ok(venv);
    }
    let _ = std::fs::remove_dir_all(&venv);
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        .map_err(|e| format!("{e} (Debian: apt-get install python3-venv)"))?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet"])
        .args(PACKAGES))
    .map_err(|e| format!("{e} (the packages come from PyPI)"))?;
    std::fs::write(&installed, wanted).map_err(|e| e.to_string())?;
    Ok(venv)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if name == "__pycache__" || name == "build" || name.to_string_lossy().ends_with(".egg-info")
        {
            continue;
        }
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).expect("copy");
        }
    }
}

#[test]
fn the_python_package_passes_its_suite_against_a_real_server() {
    let venv = environment();
    if !prerequisite::met(TEST, venv.as_ref().map(|_| ())) {
        return;
    }
    let venv = venv.expect("checked");
    let work = tempfile::tempdir().expect("tempdir");
    let package = work.path().join("python");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    copy_tree(&source, &package);
    run(Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--force-reinstall",
        ])
        .arg(&package))
    .expect("pip install ./python");
    let report = run(Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env("ROAMKV_BIN", env!("CARGO_BIN_EXE_roamkv")));
    match report {
        Ok(text) => {
            println!("{text}");
            assert!(text.contains(" passed"), "{text}");
            assert!(!text.contains("skipped"), "no test may skip: {text}");
        }
        Err(e) => panic!("{e}"),
    }
}
