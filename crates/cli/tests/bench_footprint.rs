//! `roamkv bench footprint --quick` end to end (about 20 s): roamkv's EdgeX and native routes
//! (real `roamkv serve` children), RocksDB and QuestDB, each on its own loop-device ext4; every
//! reading read back, the bytes on disk and written to the device positive and plausible, the
//! outputs written. InfluxDB is left out: it is installed only by `scripts/install-deps bench`.
//! And the gateway-class disk (about 15 s, beside the first): the native route alone on a device
//! throttled to 30 MB/s of writes, the probe's dd measuring that bound, and no rule left behind;
//! and a run with `--warm-up` (about 15 s) that counts its second half only.

use std::process::Command;

use roamkv_testbed::prerequisite;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
const TEST: &str = "a_quick_footprint_reads_back_every_reading_and_counts_plausible_bytes";

/// Runs `roamkv bench footprint --quick` with `args` into a fresh folder; asserts it succeeded
/// and returns its terminal output, its results.json and the folder (kept while the test runs).
fn footprint(args: &[&str]) -> (String, serde_json::Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let output = Command::new(ROAMKV)
        .args(["bench", "footprint", "--quick"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run roamkv bench footprint");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    (stdout, json, dir)
}

#[test]
fn a_quick_footprint_reads_back_every_reading_and_counts_plausible_bytes() {
    if !prerequisite::met(TEST, prerequisite::require_root()) {
        return;
    }
    if let Some(missing) = roamkv_bench::serve::peers::questdb_missing() {
        prerequisite::unmet(TEST, &missing);
        return;
    }
    let (stdout, json, dir) = footprint(&[
        "--fs-gib",
        "2",
        "--systems",
        "roamkv-edgex,roamkv-native,rocksdb,questdb",
    ]);
    assert!(stdout.contains("Where roamkv's bytes went"), "{stdout}");

    let runs = json["runs"].as_array().expect("runs");
    let systems: Vec<&str> = runs.iter().filter_map(|r| r["system"].as_str()).collect();
    assert_eq!(
        systems,
        ["roamkv-edgex", "roamkv-native", "rocksdb", "questdb"]
    );
    for run in runs {
        let readings = run["readings"].as_u64().expect("readings");
        assert_eq!(readings, 12_000, "{run}");
        let back = &run["read_back"];
        assert_eq!(back["expected"].as_u64(), Some(readings), "{run}");
        assert_eq!(back["found"].as_u64(), Some(readings), "{run}");
        assert_eq!(back["matched"].as_u64(), Some(readings), "{run}");
        // At least a byte per reading, and less than a 1 MiB each (a quick run's fixed costs,
        // such as preallocated segments and column files, are spread over 12,000 readings).
        for (phase, bytes) in [
            ("ingest", "on_disk_bytes"),
            ("settle", "on_disk_bytes"),
            ("ingest", "device_written_bytes"),
        ] {
            let b = run[phase][bytes].as_u64().expect("bytes");
            assert!(
                (readings..readings << 20).contains(&b),
                "{phase}.{bytes} = {b}: {run}"
            );
        }
        assert!(
            run["ingest"]["device_written_bytes"].as_u64() > Some(readings * 10),
            "{run}"
        );
        assert!(
            run["readings_per_sec"].as_f64().is_some_and(|r| r > 0.0),
            "{run}"
        );
    }
    // roamkv's own counters: its log holds the readings, in at least half the caller's bytes
    // (a PUTS record writes a device id and a timestamp's high bytes once for many readings)
    // and at most the caller's bytes plus a PUT record's 32 bytes of framing a reading.
    let breakdown = &runs[0]["breakdown_settled"];
    let (logged, user) = (
        breakdown["log_record_bytes"]
            .as_u64()
            .expect("log_record_bytes"),
        breakdown["user_bytes"].as_u64().expect("user_bytes"),
    );
    assert!(
        (user / 2..=user + 32 * 12_000).contains(&logged),
        "{breakdown}"
    );
    let html = std::fs::read_to_string(dir.path().join("out/report.html")).expect("report.html");
    assert!(html.contains("<svg") && html.contains("roamkv-native"));
}

const THROTTLED: &str = "a_throttled_disk_is_measured_at_its_bound_and_released";

#[test]
fn a_throttled_disk_is_measured_at_its_bound_and_released() {
    if !prerequisite::met(THROTTLED, prerequisite::require_root()) {
        return;
    }
    let (_, json, _dir) = footprint(&[
        "--fs-gib",
        "1",
        "--systems",
        "roamkv-native",
        "--disk-profile",
        "sd-card",
    ]);
    let probe = &json["settings"]["disk_probe"];
    // Asked 30 MB/s of writes: a rule that did not hold would show the host disk's GB/s; the
    // bound holds for writes the process sends itself and for the kernel's writeback alike.
    for field in ["direct_write_mbps", "buffered_fdatasync_write_mbps"] {
        let mbps = probe[field].as_f64().expect("probe MB/s");
        assert!((20.0..36.0).contains(&mbps), "{field} = {mbps}: {probe}");
    }
    let read_mbps = probe["direct_read_mbps"].as_f64().expect("probe MB/s");
    assert!((40.0..72.0).contains(&read_mbps), "{probe}");
    let run = &json["runs"][0];
    assert_eq!(run["read_back"]["matched"].as_u64(), Some(12_000), "{run}");
    // Every rule was set back to none (v1 lists only the rules in force).
    for file in ["write_bps", "read_bps", "write_iops"] {
        let path = format!("/sys/fs/cgroup/blkio/blkio.throttle.{file}_device");
        if let Ok(rules) = std::fs::read_to_string(&path) {
            assert!(
                !rules.lines().any(|l| l.starts_with("7:")),
                "{path}: {rules}"
            );
        }
    }
}

const WARMED: &str = "a_warmed_up_run_counts_its_second_half_only";

/// `--warm-up` (about 15 s): the native route alone; the stream's first half goes in and
/// settles before the counters begin, so the run's readings, and roamkv's caller bytes, are the
/// second half's, and the read-back finds both halves.
#[test]
fn a_warmed_up_run_counts_its_second_half_only() {
    if !prerequisite::met(WARMED, prerequisite::require_root()) {
        return;
    }
    let (_, json, _dir) = footprint(&["--warm-up", "--fs-gib", "1", "--systems", "roamkv-native"]);
    let run = &json["runs"][0];
    assert_eq!(run["readings"].as_u64(), Some(12_000), "{run}");
    assert_eq!(run["warm_up_readings"].as_u64(), Some(12_000), "{run}");
    let back = &run["read_back"];
    assert_eq!(back["expected"].as_u64(), Some(24_000), "{run}");
    assert_eq!(back["matched"].as_u64(), Some(24_000), "{run}");
    // A native reading hands the engine about 42 bytes ("gw-device-0007", its sensor, 8 bytes of
    // time, the value): counted over both halves it would be twice that per measured reading.
    let user = run["breakdown_settled"]["user_bytes"]
        .as_u64()
        .expect("caller's bytes") as f64
        / 12_000.0;
    assert!((30.0..60.0).contains(&user), "{user} B/reading: {run}");
    assert!(
        json["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains("warm-up")))),
        "{json}"
    );
}
