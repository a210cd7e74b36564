//! The operator's commands: load's bad-line handling, get/scan output, depart, stats, check.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");

fn roamkv(args: &[&str], data: &std::path::Path, stdin: &str) -> Output {
    let mut child = Command::new(ROAMKV)
        .args(args)
        .arg("--data")
        .arg(data)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roamkv");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("feed");
    child.wait_with_output().expect("wait")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_bad_line_stops_the_load_with_its_number_and_keeps_what_came_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d");
    let input = concat!(
        "{\"device\":\"car-1\",\"sensor\":\"speed\",\"ts\":1,\"value\":\"10\"}\n",
        "{\"device\":\"car-1\",\"sensor\":\"speed\",\"ts\":2,\"value_b64\":\"AAEC/w==\"}\n",
        "\n",
        "{\"device\":\"\",\"sensor\":\"speed\",\"ts\":3,\"value\":\"x\"}\n",
        "{\"device\":\"car-1\",\"sensor\":\"speed\",\"ts\":4,\"value\":\"never\"}\n",
    );
    let out = roamkv(&["load", "--ack"], &data, input);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("line 4") && err.contains("device id is empty"),
        "{err}"
    );
    assert!(err.contains("2 records before it are committed"), "{err}");
    assert!(
        text(&out.stdout).contains("acked 2"),
        "{}",
        text(&out.stdout)
    );

    let scan = roamkv(&["scan", "--device", "car-1"], &data, "");
    assert!(scan.status.success(), "{}", text(&scan.stderr));
    let lines: Vec<serde_json::Value> = text(&scan.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["value"], "10");
    assert_eq!(
        lines[1]["value_b64"], "AAEC/w==",
        "binary values come back as base64"
    );

    for bad in [
        "not json\n",
        "{\"device\":\"a\",\"sensor\":\"s\",\"ts\":1}\n",
        "{\"device\":\"a\",\"sensor\":\"s\",\"ts\":\"x\",\"value\":\"v\"}\n",
    ] {
        let out = roamkv(&["load"], &data, bad);
        assert!(
            !out.status.success() && text(&out.stderr).contains("line 1"),
            "{bad}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn get_depart_stats_and_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("d");
    let out = roamkv(
        &["load"],
        &data,
        "{\"device\":\"drone\",\"sensor\":\"alt\",\"ts\":-5,\"value\":\"120\"}\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let got = roamkv(
        &["get", "--device", "drone", "--sensor", "alt", "--ts", "-5"],
        &data,
        "",
    );
    assert!(got.status.success(), "{}", text(&got.stderr));
    assert!(text(&got.stdout).contains("\"value\":\"120\""));
    let missing = roamkv(
        &["get", "--device", "drone", "--sensor", "alt", "--ts", "6"],
        &data,
        "",
    );
    assert!(!missing.status.success() && text(&missing.stderr).contains("no reading"));

    let stats = roamkv(&["stats", "--json"], &data, "");
    let json: serde_json::Value = serde_json::from_slice(&stats.stdout).expect("stats json");
    assert_eq!(json["upper"]["devices"], 1);

    assert!(
        roamkv(&["depart", "--device", "drone"], &data, "")
            .status
            .success()
    );
    let scan = roamkv(&["scan", "--device", "drone"], &data, "");
    assert!(scan.status.success() && scan.stdout.is_empty());
    // A device that is not here (gone, or mistyped): said so, exit 1.
    let again = roamkv(&["depart", "--device", "drone"], &data, "");
    assert!(
        !again.status.success() && text(&again.stderr).contains("no device \"drone\""),
        "{}",
        text(&again.stderr)
    );

    let check = Command::new(ROAMKV)
        .args(["check", "--data"])
        .arg(&data)
        .output()
        .expect("check");
    assert!(check.status.success(), "{}", text(&check.stdout));
    assert!(text(&check.stdout).contains("ok"));

    // check on something that is not a data directory: a clear error, exit 1, nothing created.
    let nowhere = dir.path().join("nowhere");
    let check = Command::new(ROAMKV)
        .args(["check", "--data"])
        .arg(&nowhere)
        .output()
        .expect("check");
    assert!(!check.status.success() && text(&check.stderr).contains("not a roamkv data directory"));
    assert!(!nowhere.exists());
    // Nor do the commands that read, or depart: a mistyped --data makes nothing.
    for args in [
        &["get", "--device", "drone", "--sensor", "alt", "--ts", "-5"][..],
        &["scan", "--device", "drone"],
        &["latest", "--device", "drone"],
        &["devices"],
        &["stats"],
        &["depart", "--device", "drone"],
    ] {
        let out = roamkv(args, &nowhere, "");
        assert!(
            !out.status.success() && text(&out.stderr).contains("not a roamkv data directory"),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(!nowhere.exists(), "{args:?} created {}", nowhere.display());
    }
}

#[test]
fn unknown_options_get_a_clear_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = roamkv(
        &["load", "--durability", "sometimes"],
        &dir.path().join("d"),
        "",
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("valid: sync, periodic"),
        "{}",
        text(&out.stderr)
    );
    let out = roamkv(&["load", "--lower", "sqlite"], &dir.path().join("d"), "");
    assert!(
        text(&out.stderr).contains("valid: rocksdb, leveldb"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn completions_and_the_manual_page_come_from_the_commands() {
    let bash = Command::new(ROAMKV)
        .args(["completions", "bash"])
        .output()
        .expect("completions");
    assert!(bash.status.success());
    let script = text(&bash.stdout);
    assert!(
        script.contains("_roamkv()") && script.contains("--mqtt-password-file"),
        "{}",
        &script[..script.len().min(400)]
    );
    let man = Command::new(ROAMKV).arg("man").output().expect("man");
    assert!(man.status.success());
    let page = text(&man.stdout);
    assert!(
        page.starts_with(".ie") || page.starts_with(".TH"),
        "{}",
        &page[..page.len().min(200)]
    );
    assert!(page.contains("roamkv"));
    let unknown = Command::new(ROAMKV)
        .args(["completions", "tcsh"])
        .output()
        .expect("completions");
    assert!(!unknown.status.success() && text(&unknown.stderr).contains("possible values"));
}

/// The pages a manual page names (`roamkv\-serve(1)` in roff), as `roamkv-serve.1`.
fn pages_named(page: &str) -> Vec<String> {
    let text = page.replace("\\-", "-");
    let mut named = Vec::new();
    for (at, _) in text.match_indices("(1)") {
        let start = text[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |i| i + 1);
        if start < at {
            named.push(format!("{}.1", &text[start..at]));
        }
    }
    named
}

#[test]
fn every_page_the_manual_names_is_written_beside_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = Command::new(ROAMKV)
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .expect("man --dir");
    assert!(written.status.success(), "{}", text(&written.stderr));
    let printed = Command::new(ROAMKV).arg("man").output().expect("man");
    assert!(printed.status.success());
    let mut pages = vec![("roamkv man".to_string(), text(&printed.stdout))];
    for entry in std::fs::read_dir(dir.path()).expect("pages") {
        let path = entry.expect("entry").path();
        let page = std::fs::read_to_string(&path).expect("page");
        pages.push((path.display().to_string(), page));
    }
    assert!(dir.path().join("roamkv.1").exists() && dir.path().join("roamkv-serve.1").exists());
    let mut named_any = false;
    for (which, page) in &pages {
        assert!(page.contains(".TH"), "{which} is not roff");
        for name in pages_named(page) {
            named_any = true;
            assert!(
                dir.path().join(&name).exists(),
                "{which} names {name}, which is not among the pages written"
            );
        }
    }
    assert!(
        named_any,
        "no page names another: the check checked nothing"
    );
    assert!(
        !dir.path().join("roamkv-help.1").exists() && !pages[0].1.contains("roamkv\\-help"),
        "a page for `help`, which is --help"
    );
}
