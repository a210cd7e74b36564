//! `roamkv bench handoff --quick` end to end (the short form of the 200-round run, in CI): edges
//! A and B, PostgreSQL and the load in network namespaces over 100 Mbit/s links with 20 ms of
//! round trip and 0.5 % loss; 5 latency handoffs, a 32 MiB bulk one, and 10 seeded fault
//! rounds in which every kind of fault strikes (the seed makes them the same every run). It
//! passes only if no reading is lost, phantom or duplicated and no edge departed a device before
//! the receiver committed it, at either edge or in the cloud; and nothing it made is left behind.

use std::process::Command;

use roamkv_testbed::prerequisite;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

fn namespaces_of_the_bench() -> Vec<String> {
    std::fs::read_dir(roamkv_testbed::netns::NETNS_DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("rkh"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn ten_fault_rounds_lose_nothing_and_leave_nothing_behind() {
    let needs = prerequisite::require_root()
        .and_then(|()| prerequisite::require_tool("nft", "nftables"))
        .and_then(|_| roamkv_testbed::postgres::pg_bin("initdb"));
    if !prerequisite::met("bench_handoff", needs) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let output = Command::new(ROAMKV)
        .args(["bench", "handoff", "--quick", "--out"])
        .arg(&out)
        .output()
        .expect("run roamkv bench handoff");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    let totals = &json["totals"];
    assert_eq!(totals["rounds"], 10, "{totals}");
    assert_eq!(totals["handoffs"], 80, "{totals}");
    for zero in [
        "lost_edge",
        "lost_cloud",
        "phantom_edge",
        "phantom_cloud",
        "duplicates",
        "early_departs",
    ] {
        assert_eq!(totals[zero], 0, "{zero}: {totals}");
    }
    assert!(totals["acked"].as_u64().is_some_and(|a| a > 0), "{totals}");
    // The fence refused writes at the old edge, and kills refused connections.
    assert!(
        totals["refused"].as_u64().is_some_and(|r| r > 0),
        "{totals}"
    );
    let faults: Vec<&str> = json["rounds"]
        .as_array()
        .expect("rounds")
        .iter()
        .flat_map(|r| r["faults"].as_array().expect("faults").iter())
        .map(|f| f["fault"].as_str().expect("fault"))
        .collect();
    for kind in ["KillA", "KillB", "KillPostgres", "CutA", "CutB", "CutCloud"] {
        assert!(faults.contains(&kind), "no {kind} in {faults:?}");
    }
    let transfer = &json["transfer"];
    assert_eq!(
        transfer["latency_ms"].as_array().map(Vec::len),
        Some(5),
        "{transfer}"
    );
    assert!(
        transfer["bulk_readings"].as_u64().is_some_and(|r| r > 0),
        "{transfer}"
    );
    assert!(out.join("report.html").is_file());
    assert!(
        namespaces_of_the_bench().is_empty(),
        "left behind: {:?}",
        namespaces_of_the_bench()
    );
}
