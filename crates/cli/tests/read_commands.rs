//! The commands that read, on a data directory (`--data`), change nothing in it: every file and
//! directory keeps its name, size, owner, mode and mtime, and nothing is added. They used to open
//! the lower tier (RocksDB) for writing: run as root on the package's directory they left 14
//! root-owned files (a new MANIFEST, OPTIONS, LOG and WAL), and the service's next online backup
//! failed to hard-link them. Run as root here (CI), the directory is first handed to another
//! user, as the package's is.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use roamkv_engine::{Engine, ManualClock, Options, Record};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
/// 2023-11-14T22:13:20Z, in ns.
const T0_NS: i64 = 1_700_000_000_000_000_000;

/// What `ls -lR --time-style=full-iso` shows of each entry, by path below the directory.
type Listing = BTreeMap<String, String>;

fn listing(root: &Path) -> Listing {
    let mut out = Listing::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let m = std::fs::symlink_metadata(&path).expect("stat");
            let name = path
                .strip_prefix(root)
                .expect("below")
                .display()
                .to_string();
            let size = if m.is_dir() { 0 } else { m.size() };
            out.insert(
                name,
                format!(
                    "mode {:o} owner {}:{} size {size} mtime {}.{:09}",
                    m.mode(),
                    m.uid(),
                    m.gid(),
                    m.mtime(),
                    m.mtime_nsec()
                ),
            );
            if m.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// A closed data directory with a device in each tier: car-1's readings moved to the lower tier
/// (RocksDB), car-2's still in the log, as a stopped server leaves it.
fn make_data_dir(data: &Path) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let options = Options {
        management_time_ms: 10_000,
        segment_bytes: 1 << 20,
        background_maintenance: false,
        clock: clock.clone(),
        ..Options::default()
    };
    let engine = Engine::open(data, options).expect("open");
    let put = |device: &str, i: i64| {
        let value = format!("{i}");
        engine
            .put_batch(&[Record {
                device,
                sensor: "speed",
                ts_ns: T0_NS + i,
                value: value.as_bytes(),
            }])
            .expect("put");
    };
    for i in 0..10 {
        put("car-1", i);
    }
    // Half a management time seals the active segment, one more makes its readings leave.
    clock.advance_ms(5_000);
    engine.maintain().expect("maintain (seal)");
    clock.advance_ms(10_000);
    engine.maintain().expect("maintain (leave the log)");
    for i in 0..10 {
        put("car-2", i);
    }
    let lower = engine
        .devices()
        .into_iter()
        .find(|d| d.name == "car-1")
        .expect("car-1");
    assert!(lower.lower_runs > 0, "car-1 did not move to the lower tier");
    engine.close().expect("close");
}

/// Under root (CI), the directory becomes another user's (nobody's), as the package's is
/// roamkv's: a file the command made would show as root's.
fn give_away(root: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let status = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(root)
        .status()
        .expect("chown");
    assert!(status.success());
}

#[test]
fn the_read_commands_change_nothing_in_the_data_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    make_data_dir(&data);
    give_away(&data);
    let ts = (T0_NS + 3).to_string();
    let commands: [(&[&str], &str); 7] = [
        (&["stats"], "lower"),
        (&["stats", "--json"], "\"devices\""),
        (&["devices"], "car-2"),
        (&["scan", "--device", "car-1"], "\"value\":\"9\""),
        (
            &["scan", "--device", "car-2", "--sensor", "speed"],
            "\"value\":\"9\"",
        ),
        (&["latest", "--device", "car-1"], "\"value\":\"9\""),
        (
            &[
                "get", "--device", "car-1", "--sensor", "speed", "--ts-ns", &ts,
            ],
            "\"value\":\"3\"",
        ),
    ];
    for (args, expected) in commands {
        let before = listing(&data);
        let out = Command::new(ROAMKV)
            .args(args)
            .arg("--data")
            .arg(&data)
            .output()
            .expect("run roamkv");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "roamkv {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(expected),
            "roamkv {args:?} printed {stdout}"
        );
        let after = listing(&data);
        let names: std::collections::BTreeSet<&String> =
            before.keys().chain(after.keys()).collect();
        let changed: Vec<String> = names
            .into_iter()
            .filter(|name| before.get(*name) != after.get(*name))
            .map(|name| format!("{name}: {:?} -> {:?}", before.get(name), after.get(name)))
            .collect();
        assert!(
            changed.is_empty(),
            "roamkv {args:?} --data changed the directory:\n{}",
            changed.join("\n")
        );
    }
}

/// A directory another process has open (its LOCK held) is refused, as before, with the way to
/// ask the running server instead; and the refused command changes nothing either.
#[test]
fn a_read_command_on_an_open_directory_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    make_data_dir(&data);
    let options = Options {
        background_maintenance: false,
        ..Options::default()
    };
    let engine = Engine::open(&data, options).expect("open");
    let before = listing(&data);
    let out = Command::new(ROAMKV)
        .args(["stats", "--data"])
        .arg(&data)
        .output()
        .expect("run roamkv");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--server"), "{stderr}");
    assert_eq!(before, listing(&data));
    engine.close().expect("close");
}
