//! `roamkv bench serve` end to end in a few seconds, without InfluxDB: a real `roamkv serve`
//! child process (EdgeX JSON and binary batches) and the in-process engine, peak and half-peak
//! runs, every run's stored readings counted back, and the outputs written; and the QuestDB peer
//! (a real QuestDB on the JDK), started, loaded with line protocol, counted back and stopped.

use std::process::Command;

use roamkv_testbed::prerequisite;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

#[test]
fn a_tiny_serve_bench_stores_what_it_acks_and_writes_its_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let output = Command::new(ROAMKV)
        .args([
            "bench",
            "serve",
            "--quick",
            "--engines",
            "roamkv,roamkv-binary,engine",
        ])
        .args(["--readings-per-event", "10", "--clients", "4"])
        .args(["--seconds", "0.5", "--warmup-seconds", "0.1"])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run roamkv bench serve");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("10/event: roamkv over HTTP"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    let runs = json["runs"].as_array().expect("runs");
    // Three systems at their peak, the two HTTP ones again at half of it.
    assert_eq!(runs.len(), 5, "{json}");
    for run in runs {
        assert_eq!(run["check"], "ok", "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        let acked = run["acked_readings"].as_u64().expect("acked");
        assert!(acked > 0 && acked % 10 == 0, "{run}");
        assert_eq!(run["stored_readings"].as_u64(), Some(acked), "{run}");
        assert!(
            run["readings_per_sec"].as_f64().is_some_and(|r| r > 0.0),
            "{run}"
        );
        assert!(run["p99_ms"].as_f64().is_some_and(|p| p > 0.0), "{run}");
    }
    let half: Vec<&serde_json::Value> = runs.iter().filter(|r| r["phase"] == "half-peak").collect();
    assert_eq!(half.len(), 2, "{json}");
    assert!(half.iter().all(|r| {
        r["offered_readings_per_sec"]
            .as_f64()
            .is_some_and(|o| o > 0.0)
    }));
    let summaries = json["summaries"].as_array().expect("summaries");
    let names: Vec<&str> = summaries
        .iter()
        .filter_map(|s| s["target"].as_str())
        .collect();
    assert_eq!(names, ["roamkv", "roamkv-binary", "engine"]);
    assert!(
        json["decode_cost"][0]["json_parse_us_per_reading"]
            .as_f64()
            .is_some_and(|c| c > 0.0)
    );
    // The device under the data directories was probed (its fdatasync tail bounds every p99).
    let device = &json["device"];
    assert!(device["probes"].as_u64().is_some_and(|n| n > 0), "{device}");
    assert!(
        device["fdatasync_max_us"].as_u64() >= device["fdatasync_p50_us"].as_u64(),
        "{device}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(
        html.contains("<svg") && html.contains("Peak ingest"),
        "report has its charts"
    );
    // Every run's data directory was removed.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The QuestDB peer at matched durability: started fresh (its jar on the JDK, as
/// `scripts/install-deps test` fetches it), loaded, counted back once its WAL is applied (every
/// acked reading there), stopped, its directory removed; and no process of it left behind.
#[test]
fn the_questdb_peer_stores_what_it_acks() {
    // The bench's own check: Java on PATH and the jar where install-deps puts it.
    if let Some(missing) = roamkv_bench::serve::peers::questdb_missing() {
        prerequisite::unmet("the_questdb_peer_stores_what_it_acks", &missing);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let output = Command::new(ROAMKV)
        .args(["bench", "serve", "--quick", "--engines", "questdb"])
        .args(["--readings-per-event", "10", "--clients", "4"])
        .args([
            "--seconds",
            "0.5",
            "--warmup-seconds",
            "0.1",
            "--skip-half-peak",
        ])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run roamkv bench serve");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    assert_eq!(json["config"]["durability"], "sync", "{json}");
    let runs = json["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{json}");
    let run = &runs[0];
    assert_eq!(run["target"], "questdb", "{run}");
    assert_eq!(run["check"], "ok", "{run}");
    assert_eq!(run["errors"], 0, "{run}");
    let acked = run["acked_readings"].as_u64().expect("acked");
    assert!(acked > 0 && acked.is_multiple_of(10), "{run}");
    assert_eq!(run["stored_readings"].as_u64(), Some(acked), "{run}");
    assert!(
        run["server_cpu_s"].as_f64().is_some_and(|c| c > 0.0),
        "QuestDB's own CPU is measured: {run}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let java_left = Command::new("pgrep")
        .arg("-f")
        .arg(dir.path())
        .output()
        .expect("pgrep");
    assert!(
        java_left.stdout.is_empty(),
        "a QuestDB process outlived the bench: {}",
        String::from_utf8_lossy(&java_left.stdout)
    );
}
