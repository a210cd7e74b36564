//! `roamkv bench serve`'s message bus rows end to end in seconds: MQTT publishers sending
//! EdgeX envelopes through a real mosquitto at QoS 0 and 1 into a real `roamkv serve
//! --mqtt-broker`, and into mosquitto's own subscriber (the ceiling); every run's readings
//! counted back (roamkv: its data directory opened by the engine) equal to what the broker
//! took, the verdict lines printed, and no broker or subscriber left behind.

use std::process::Command;

use roamkv_testbed::prerequisite::{self, require_tool};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

#[test]
fn the_bus_rows_store_what_the_broker_took_beside_mosquittos_own_rate() {
    let test = "the_bus_rows_store_what_the_broker_took_beside_mosquittos_own_rate";
    if !prerequisite::met(test, require_tool("mosquitto", "mosquitto"))
        || !prerequisite::met(test, require_tool("mosquitto_sub", "mosquitto-clients"))
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let engines = "roamkv,roamkv-bus-qos0,roamkv-bus-qos1,mosquitto-qos0,mosquitto-qos1";
    let output = Command::new(ROAMKV)
        .args(["bench", "serve", "--quick", "--engines", engines])
        .args(["--readings-per-event", "10", "--clients", "4"])
        .args(["--seconds", "0.5", "--warmup-seconds", "0.1"])
        .arg("--skip-half-peak")
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run roamkv bench serve");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for q in [0, 1] {
        let verdict = format!("10/event: roamkv over the bus at QoS {q} ");
        assert!(stdout.contains(&verdict), "{stdout}");
    }
    assert!(stdout.contains("x mosquitto's own rate"), "{stdout}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    let runs = json["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 5, "{json}");
    for run in runs.iter().filter(|r| r["target"] != "roamkv") {
        assert_eq!(run["check"], "ok", "{run}");
        assert_eq!(run["errors"], 0, "{run}");
        let acked = run["acked_readings"].as_u64().expect("acked");
        assert!(acked > 0 && acked.is_multiple_of(10), "{run}");
        assert_eq!(run["stored_readings"].as_u64(), Some(acked), "{run}");
        assert!(
            run["readings_per_sec"].as_f64().is_some_and(|r| r > 0.0),
            "{run}"
        );
        assert!(
            run["broker_cpu_s"].as_f64().is_some_and(|c| c > 0.0),
            "the broker's CPU is measured: {run}"
        );
        assert!(run["drain_s"].as_f64().is_some(), "{run}");
        // No latency to a stored acknowledgement on the bus: not made up.
        assert!(run["p99_ms"].is_null(), "{run}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("serve-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let subscriber_left = Command::new("pgrep")
        .args(["-f", "mosquitto_sub .*bench-ceiling"])
        .output()
        .expect("pgrep");
    assert!(
        subscriber_left.stdout.is_empty(),
        "a mosquitto_sub outlived the bench: {}",
        String::from_utf8_lossy(&subscriber_left.stdout)
    );
}
