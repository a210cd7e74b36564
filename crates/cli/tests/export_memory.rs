//! An export's memory is bounded whatever its range (crates/export/src/limits.rs): a running
//! `roamkv serve`, moved into a memory cgroup of `CGROUP_BYTES` once it holds the readings,
//! exports more than twice that as Parquet while the cgroup's limit holds (no OOM kill, the
//! server alive, every reading in the file). And an export whose client leaves ends at once;
//! past two at once, one more is refused.

use std::io::Read;
use std::time::{Duration, Instant};

use roamkv_bench::mobility::runner::MemoryCgroup;
use roamkv_testbed::prerequisite;
use roamkv_testbed::serve::ServeProcess;

const TEST: &str = "export_memory";
/// The server's memory cgroup during the export (it covers page cache as well as the heap).
const CGROUP_BYTES: u64 = 96 << 20;
/// Readings loaded: values of `VALUE_BYTES` each, `BATCH` per request, on `DEVICES` devices.
const READINGS: usize = 6000;
const VALUE_BYTES: usize = 48 * 1024;
const BATCH: usize = 50;
const DEVICES: usize = 8;
const T0: i64 = 1_700_000_000_000_000_000;

fn binary() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_roamkv"))
}

fn load(client: &reqwest::blocking::Client, url: &str) {
    use base64::Engine as _;
    // Random bytes (xorshift): Parquet's Snappy must not shrink the export below the cap.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut value = || -> String {
        let bytes: Vec<u8> = (0..VALUE_BYTES)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    for batch in 0..READINGS / BATCH {
        let mut body = String::new();
        for i in batch * BATCH..(batch + 1) * BATCH {
            let line = serde_json::json!({
                "device": format!("big-{}", i % DEVICES), "sensor": "blob",
                "ts_ns": T0 + i as i64, "value_b64": value(),
            });
            body.push_str(&line.to_string());
            body.push('\n');
        }
        let answer = client
            .post(format!("{url}/api/roamkv/v1/readings"))
            .body(body)
            .send()
            .expect("post");
        assert_eq!(answer.status(), 201, "{:?}", answer.text());
    }
}

fn metric(client: &reqwest::blocking::Client, url: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .and_then(|a| a.text())
        .expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

#[test]
fn an_export_larger_than_the_servers_memory_cap_completes_inside_it() {
    if !prerequisite::met(TEST, prerequisite::require_root()) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = ServeProcess::start(&binary(), &dir.path().join("data"), |_| {});
    let url = server.url();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client");
    load(&client, &url);
    let cgroup = MemoryCgroup::create("roamkv-export-memory-test", CGROUP_BYTES).expect("cgroup");
    cgroup.add(server.child.id()).expect("into the cgroup");
    let mut answer = client
        .get(format!("{url}/api/roamkv/v1/export?format=parquet"))
        .send()
        .expect("export");
    assert_eq!(answer.status(), 200);
    let mut file = Vec::new();
    answer.read_to_end(&mut file).expect("the whole export");
    let exported = file.len() as u64;
    assert!(
        exported > 2 * CGROUP_BYTES,
        "the export ({exported} bytes) must be larger than twice the cap ({CGROUP_BYTES})"
    );
    assert_eq!(cgroup.oom_kills(), 0, "the cgroup's OOM killer ran");
    assert!(
        server.child.try_wait().expect("wait").is_none(),
        "the server died"
    );
    let reader = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(file))
        .expect("a Parquet file");
    use parquet::file::reader::FileReader;
    let rows = reader.metadata().file_metadata().num_rows();
    assert_eq!(rows, READINGS as i64, "every reading in the file");
    println!(
        "exported {exported} bytes through a {CGROUP_BYTES}-byte cgroup ({}); its peak: {} bytes",
        cgroup.describe(),
        cgroup.max_usage_bytes()
    );
    assert_eq!(
        metric(&client, &url, "roamkv_exported_readings_total"),
        READINGS as f64
    );
    server.signal(libc::SIGTERM);
    server.wait_exit(30);
}

#[test]
fn an_export_whose_client_leaves_ends_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = ServeProcess::start(&binary(), &dir.path().join("data"), |_| {});
    let url = server.url();
    let client = reqwest::blocking::Client::new();
    load(&client, &url);
    let mut answer = client
        .get(format!("{url}/api/roamkv/v1/export?format=csv"))
        .send()
        .expect("export");
    let mut first = vec![0u8; 1 << 16];
    answer.read_exact(&mut first).expect("the first bytes");
    assert_eq!(metric(&client, &url, "roamkv_exports_in_flight"), 1.0);
    // A second export may run beside it; a third is refused (the limit, 2) and counts nothing.
    let mut second = client
        .get(format!("{url}/api/roamkv/v1/export?format=jsonl"))
        .send()
        .expect("export");
    second.read_exact(&mut first).expect("the first bytes");
    let third = client
        .get(format!("{url}/api/roamkv/v1/export?format=arrow"))
        .send()
        .expect("export");
    assert_eq!(third.status(), 429);
    assert_eq!(metric(&client, &url, "roamkv_exports_in_flight"), 2.0);
    drop((answer, second));
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&client, &url, "roamkv_exports_in_flight") != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the export still runs 5 s after its client left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.signal(libc::SIGTERM);
    server.wait_exit(30);
    let log = server.log();
    assert!(
        log.contains("export stopped"),
        "the server logs why it stopped:\n{log}"
    );
}
