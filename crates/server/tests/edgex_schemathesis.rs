//! EdgeX's own OpenAPI document of core-data (edgex_openapi/core-data.yaml, vendored unchanged
//! from edgexfoundry/edgex-go; ORIGIN.md says from which commit) drives a property-based test:
//! schemathesis, every check it has, over every operation, against a server holding readings
//! of every kind of value. 0 server errors, 0 undocumented status codes, 0 responses that
//! violate the schema. Where the document is wrong, or looser than core-data itself, the
//! correction is listed with its evidence in edgex_openapi/DEVIATIONS.md and applied by
//! edgex_openapi/effective_spec.py; what OpenAPI cannot say is in schemathesis.toml and
//! hooks.py, each with the entry it comes from.
//!
//! schemathesis comes from PyPI into a virtual environment the test makes (once per target
//! directory), at the version pinned here.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, event, now_ns, uuid};
use roamkv_testbed::prerequisite;
use serde_json::json;

const TEST: &str = "edgex_schemathesis";
const SCHEMATHESIS_VERSION: &str = "4.32.5";
/// The server's MaxResultCount; effective_spec.py writes it into `limit`'s maximum.
const MAX_RESULT_COUNT: usize = 200;
/// Cases per operation and phase; with the fixed seed, the run is the same every time.
const EXAMPLES_PER_OPERATION: &str = "60";
const SEED: &str = "20261127";

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/edgex_openapi")
}

/// The virtual environment with schemathesis, made on first use.
fn schemathesis() -> Result<PathBuf, String> {
    let venv =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("schemathesis-{SCHEMATHESIS_VERSION}"));
    let program = venv.join("bin/schemathesis");
    let installed = venv.join("installed");
    if installed.exists() {
        return Ok(program);
    }
    let run = |command: &mut Command| -> Result<(), String> {
        let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{command:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        .map_err(|e| format!("{e} (Debian: apt-get install python3-venv)"))?;
    run(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        &format!("schemathesis=={SCHEMATHESIS_VERSION}"),
    ]))
    .map_err(|e| format!("{e} (schemathesis comes from PyPI)"))?;
    std::fs::write(&installed, SCHEMATHESIS_VERSION).map_err(|e| e.to_string())?;
    Ok(program)
}

/// Readings of every kind of value core-data stores, on two devices, so that every answer has
/// something to be checked against its schema.
async fn load(server: &Server) {
    let t0 = now_ns() - 3_600_000_000_000;
    for (i, device) in ["car-1", "car-2"].iter().enumerate() {
        let origin = t0 + i as i64 * 1_000_000_000;
        let (status, body) = server
            .post_event(&event(
                device,
                origin,
                &[("speed", "10.5"), ("fuel", "0.5")],
            ))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let reading = |resource: &str, value_type: &str, field: &str, value: serde_json::Value| {
        let mut r = json!({
            "id": uuid(), "origin": t0 + 5, "deviceName": "car-1", "resourceName": resource,
            "profileName": "thermo-profile", "valueType": value_type,
        });
        r[field] = value;
        r
    };
    let mut binary = reading("camera", "Binary", "binaryValue", json!("AAEC"));
    binary["mediaType"] = json!("image/jpeg");
    let readings = [
        reading("gear", "Int8", "value", json!("-3")),
        reading("odometer", "Uint64", "value", json!("18446744073709551615")),
        reading("door", "Bool", "value", json!("true")),
        reading("plate", "String", "value", json!("B-RK 42")),
        reading("axles", "Int16Array", "value", json!("[1, 2]")),
        reading(
            "position",
            "Object",
            "objectValue",
            json!({"lat": 52.5, "lon": 13.4}),
        ),
        binary,
    ];
    let request = json!({"apiVersion": "v3", "event": {
        "apiVersion": "v3", "id": uuid(), "deviceName": "car-1", "profileName": "thermo-profile",
        "sourceName": "readings", "origin": t0 + 5, "readings": readings,
    }});
    let (status, body) = server.post_event(&request).await;
    assert_eq!(status, 201, "{body}");
}

/// Every correction in effective_spec.py (d1_..., d2_...) has its entry (D1, D2, ...) with
/// evidence in DEVIATIONS.md, and the run's other files cite entries that exist.
#[test]
fn every_correction_is_listed_with_its_evidence() {
    let list = std::fs::read_to_string(spec_dir().join("DEVIATIONS.md")).expect("DEVIATIONS.md");
    for file in ["effective_spec.py", "schemathesis.toml", "hooks.py"] {
        let text = std::fs::read_to_string(spec_dir().join(file)).expect(file);
        let cited = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|word| {
                let rest = word.strip_prefix('d').or_else(|| word.strip_prefix('D'))?;
                (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit())).then_some(rest)
            });
        let mut any = false;
        for n in cited {
            any = true;
            assert!(
                list.contains(&format!("\n## D{n}:")),
                "{file} cites D{n}, which DEVIATIONS.md does not list"
            );
        }
        assert!(any, "{file} cites no entry of DEVIATIONS.md");
    }
    assert!(
        list.contains("Evidence:"),
        "DEVIATIONS.md gives no evidence"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn edgex_core_data_openapi_holds_under_schemathesis() {
    let program = schemathesis();
    if !prerequisite::met(TEST, program.as_ref()) {
        return;
    }
    let program = program.expect("met");
    let server = Server::start(|args| args.max_result_count = Some(MAX_RESULT_COUNT)).await;
    load(&server).await;

    // D10: POST /secret is not in the run; its answer is checked here.
    let (status, body) = server
        .post("/api/v3/secret", "application/json", b"{}".to_vec())
        .await;
    assert_eq!(status, 501, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("secret store")),
        "{body}"
    );

    let dir = spec_dir();
    let effective = server.dir.path().join("core-data.effective.yaml");
    let venv_python = program.with_file_name("python");
    let status = Command::new(&venv_python)
        .arg(dir.join("effective_spec.py"))
        .arg(dir.join("core-data.yaml"))
        .arg(MAX_RESULT_COUNT.to_string())
        .arg(&effective)
        .status()
        .expect("effective_spec.py runs");
    assert!(status.success(), "effective_spec.py failed");

    let url = format!("{}/api/v3", server.base);
    // Its cache and any report go to the test's directory, not the source tree.
    let work = server.dir.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .current_dir(&work)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("SCHEMATHESIS_HOOKS", "hooks")
            .env("PYTHONPATH", &dir)
            .arg("--config-file")
            .arg(dir.join("schemathesis.toml"))
            .arg("run")
            .arg(&effective)
            // Every check runs: schemathesis's default, left to the config file so that its
            // per-operation exceptions hold (`--checks all` would override them).
            .args(["--url", &url, "--no-color"])
            .args(["--max-examples", EXAMPLES_PER_OPERATION, "--seed", SEED])
            .args(["--generation-codec", "ascii", "--workers", "2"])
            .output()
            .expect("schemathesis runs")
    })
    .await
    .expect("join");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found failures:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The run covered the operations (all 24 but D10's), not none of them.
    let tested: usize = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("Tested: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no \"Tested:\" line in\n{report}"));
    assert!(
        tested >= 21,
        "schemathesis tested {tested} operations:\n{report}"
    );
    server.stop().await;
}
