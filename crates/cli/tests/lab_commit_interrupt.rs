//! Ctrl-C in the middle of `roamkv lab commit` leaves no loop device, mount, write throttle,
//! PostgreSQL server or work directory behind. Runs the real binary as root with Debian's postgresql; fails without
//! them, or skips when asked (`roamkv_testbed::prerequisite`).
use roamkv_testbed::prerequisite::{met, require_root};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TEST: &str = "ctrl_c_during_lab_commit_leaves_nothing_behind";

/// Image files of the lab's loop devices attached now (`losetup -a`).
fn lab_images() -> Vec<String> {
    let out = Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup -a");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let start = l.find('(')?;
            let end = l.rfind(')')?;
            Some(l[start + 1..end].to_string())
        })
        .filter(|p| p.contains("roamkv-lab-"))
        .collect()
}

/// Command lines of running postgres processes.
fn postgres_commands() -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains("postgres") && cmd.contains("-D") {
                out.push(cmd);
            }
        }
    }
    out
}

#[test]
fn ctrl_c_during_lab_commit_leaves_nothing_behind() {
    if !met(TEST, require_root()) {
        return;
    }
    if !met(TEST, roamkv_testbed::postgres::pg_bin("initdb")) {
        return;
    }
    let images_before = lab_images();
    let rules_before = throttle_rules();
    let out = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args([
            "lab",
            "commit",
            "--engines",
            "postgresql,sqlite",
            "--devices",
            "slow",
            "--sessions",
            "2",
            "--transactions",
            "100000",
        ])
        .arg("--out")
        .arg(out.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roamkv");
    // Wait until the slow device is measured: the data and log file systems, the throttle and
    // (next) the PostgreSQL cluster exist.
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let started = Instant::now();
    let mut ready = false;
    while let Some(Ok(line)) = lines.next() {
        if line.contains("slow log device") {
            ready = true;
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no progress");
    }
    assert!(
        ready,
        "roamkv lab commit ended before the slow device was ready"
    );
    let during: Vec<String> = lab_images()
        .into_iter()
        .filter(|i| !images_before.contains(i))
        .collect();
    assert!(!during.is_empty(), "no loop device of the run was seen");
    // Interrupt while the run's PostgreSQL server is up (it starts right after the calibration).
    let ours = |c: &String| {
        during
            .iter()
            .any(|i| c.contains(i.trim_end_matches("data.img")))
    };
    let waited = Instant::now();
    let pg_during = loop {
        let found: Vec<String> = postgres_commands().into_iter().filter(ours).collect();
        if !found.is_empty() {
            break found;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the run's PostgreSQL server never started"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(1)); // pgbench sessions are running
    // SAFETY: kill has no memory-safety preconditions; the pid is our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // Drain stderr so the child never blocks on a full pipe while it cleans up.
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
    let status = child.wait().expect("wait");
    let tail = drain.join().unwrap_or_default();
    assert!(!status.success(), "an interrupted run must not succeed");
    let left: Vec<String> = lab_images()
        .into_iter()
        .filter(|i| during.contains(i))
        .collect();
    assert!(left.is_empty(), "loop devices left: {left:?}\n{tail:?}");
    let mounts = std::fs::read_to_string("/proc/mounts").expect("mounts");
    for image in &during {
        let dir = image.trim_end_matches("data.img");
        assert!(!mounts.contains(dir), "{dir} still mounted");
        // Its work directory (images, mount point) goes with the last undo step.
        assert!(
            !std::path::Path::new(dir).exists(),
            "{dir} (the run's work directory) left behind"
        );
        assert!(
            !postgres_commands().iter().any(|c| c.contains(dir)),
            "a postgres server on {dir} still runs (was: {pg_during:?})"
        );
    }
    let new_rules: Vec<String> = throttle_rules()
        .into_iter()
        .filter(|r| !rules_before.contains(r))
        .collect();
    assert!(
        new_rules.is_empty(),
        "write throttle rules left: {new_rules:?}"
    );
}

/// The block layer's write-IOPS rules of the root blkio cgroup ("7:3 200" lines).
fn throttle_rules() -> Vec<String> {
    std::fs::read_to_string("/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device")
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
