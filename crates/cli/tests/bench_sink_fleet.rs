//! `roamkv bench sink --kafka --edges 1,2 --quick` end to end: a real three-node Kafka cluster
//! and one, then two `roamkv serve` edges, each in a network namespace of its own, drained into
//! it. It passes only if every edge's acknowledged readings are in the topic once, each size's
//! edges are its own, and the run leaves no namespace and no veth behind.

use std::process::Command;

use roamkv_testbed::{kafka, prerequisite};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

/// The namespaces (`rkf<pid>-…`) and the root namespace's veth end (`rkf<pid>`) of run `pid`.
fn left_behind(pid: u32) -> Vec<String> {
    let prefix = format!("rkf{pid}");
    [roamkv_testbed::netns::NETNS_DIR, "/sys/class/net"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn a_fleet_in_namespaces_drains_every_edge_once_and_leaves_nothing_behind() {
    let needs =
        prerequisite::require_root().and_then(|()| prerequisite::require_tool("ip", "iproute2"));
    if !prerequisite::met("bench_sink_fleet", needs) {
        return;
    }
    if let Some(why) = kafka::missing() {
        prerequisite::unmet("bench_sink_fleet", &why);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let child = Command::new(ROAMKV)
        .args(["bench", "sink", "--kafka", "--edges", "1,2", "--quick"])
        .args(["--backlog-seconds", "3", "--seconds", "4", "--clients", "2"])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run roamkv bench sink");
    let pid = child.id();
    let output = child.wait_with_output().expect("wait for the bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("each edge in a network namespace of its own"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).expect("results.json"))
            .expect("JSON");
    let sizes = json["results"]["sizes"].as_array().expect("sizes");
    assert_eq!(sizes.len(), 2, "{json}");
    for (size, n) in sizes.iter().zip([1, 2]) {
        assert_eq!(size["edges"], n, "{size}");
        assert_eq!(size["per_edge"].as_array().map(Vec::len), Some(n), "{size}");
        let acked = size["acked_readings"].as_u64().expect("acked");
        assert!(acked > 0, "{size}");
        assert_eq!(size["topic"]["distinct_readings"], acked, "{size}");
        assert_eq!(size["topic"]["duplicated"], 0, "{size}");
        assert_eq!(
            size["topic"]["by_edge"].as_object().map(|m| m.len()),
            Some(n),
            "{size}"
        );
    }
    assert!(out.join("report.html").is_file());
    assert!(
        left_behind(pid).is_empty(),
        "left behind: {:?}",
        left_behind(pid)
    );
}
