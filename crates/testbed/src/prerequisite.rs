//! What a test does when this machine lacks something it needs (root, a tool such as strace or
//! mkfs.xfs, loop devices, tracefs): it fails, unless the developer asked to skip such tests.
//!
//! - Under CI (`CI=true`) a missing prerequisite is a failure, whatever else is set: CI installs
//!   everything (scripts/install-deps), so a machine that lost a tool must not stay green.
//! - A developer without root or without a tool sets `ROAMKV_ALLOW_SKIP=1`; the test then prints
//!   `SKIP <test>: <why>` on stderr and passes.
//! - With neither set, the test fails and says how to skip it.
//!
//! Usage in a test: `if !prerequisite::met("my_test", require_root()) { return; }`.
//!
//! The rule is here once; every crate's tests take this crate as a dev-dependency rather than
//! copy it (copies drifted: one took only "1" as set, another only `CI=true` as CI).
use crate::error::Error;
use std::path::PathBuf;

/// What to do about a missing prerequisite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Print why and let the test pass.
    Skip,
    /// Fail the test.
    Fail,
}

/// The rule above, from the values of `CI` and `ROAMKV_ALLOW_SKIP`.
pub fn verdict(ci: Option<&str>, allow_skip: Option<&str>) -> Verdict {
    if is_set(ci) || !is_set(allow_skip) {
        Verdict::Fail
    } else {
        Verdict::Skip
    }
}

/// An environment flag counts as set when it is "1", "true" or "yes".
fn is_set(value: Option<&str>) -> bool {
    matches!(value.map(str::trim), Some("1" | "true" | "yes"))
}

/// Reports that `test` cannot run here because of `reason`. Returns (after printing
/// `SKIP test: reason`) only when skipping is allowed; panics otherwise. The caller returns
/// from the test right after.
pub fn unmet(test: &str, reason: &str) {
    let ci = std::env::var("CI").ok();
    let allow_skip = std::env::var("ROAMKV_ALLOW_SKIP").ok();
    match verdict(ci.as_deref(), allow_skip.as_deref()) {
        // Written to stderr directly, not with eprintln!: the test harness captures the output
        // of passing tests, and a skip must be seen.
        Verdict::Skip => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIP {test}: {reason}");
        }
        Verdict::Fail if is_set(ci.as_deref()) => panic!(
            "{test} cannot run: {reason}. CI must provide it (scripts/install-deps installs every tool)"
        ),
        Verdict::Fail => panic!(
            "{test} cannot run: {reason}. Install what it needs (scripts/install-deps, as root), \
             or set ROAMKV_ALLOW_SKIP=1 to skip it on this machine"
        ),
    }
}

/// `Ok`: the prerequisite is there (true). `Err`: `unmet` decides, and the test returns on false.
pub fn met<T, E: std::fmt::Display>(test: &str, check: Result<T, E>) -> bool {
    match check {
        Ok(_) => true,
        Err(e) => {
            unmet(test, &e.to_string());
            false
        }
    }
}

/// Root is needed for loop devices, mount, tracefs and drop_caches.
pub fn require_root() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(Error::NotRoot)
    }
}

/// Fails with the Debian package name when `tool` is not on PATH (or in /sbin, /usr/sbin).
pub fn require_tool(tool: &str, package: &str) -> Result<PathBuf, Error> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::MissingTool {
            tool: tool.to_string(),
            package: package.to_string(),
        })
}

/// True when `program` can be started (`program --version` or any exit status counts; only a
/// failure to execute it, e.g. not installed, is false).
pub fn tool_runs(program: &str, probe_arg: &str) -> bool {
    std::process::Command::new(program)
        .arg(probe_arg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_always_fails_a_missing_prerequisite() {
        assert_eq!(verdict(Some("true"), None), Verdict::Fail);
        assert_eq!(verdict(Some("true"), Some("1")), Verdict::Fail);
        assert_eq!(verdict(Some("1"), Some("1")), Verdict::Fail);
    }

    #[test]
    fn only_an_explicit_request_skips() {
        assert_eq!(verdict(None, None), Verdict::Fail);
        assert_eq!(verdict(None, Some("0")), Verdict::Fail);
        assert_eq!(verdict(None, Some("")), Verdict::Fail);
        assert_eq!(verdict(None, Some("1")), Verdict::Skip);
        assert_eq!(verdict(Some("false"), Some("1")), Verdict::Skip);
        assert_eq!(verdict(Some(""), Some("1")), Verdict::Skip);
    }

    #[test]
    fn missing_tool_names_the_debian_package() {
        let msg = require_tool("mkfs.definitely-not-here", "f2fs-tools")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(msg.contains("apt-get install f2fs-tools"), "{msg}");
    }

    #[test]
    fn a_present_prerequisite_is_met_without_a_verdict() {
        assert!(met("t", Ok::<(), String>(())));
    }

    #[test]
    fn a_missing_tool_is_detected() {
        assert!(!tool_runs("roamkv-no-such-tool-anywhere", "--version"));
        assert!(tool_runs("sh", "-c"));
    }
}
