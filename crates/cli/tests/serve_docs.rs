//! docs/SERVER.md's settings table is what `roamkv serve --help` says: the same flags, each with
//! its `ROAMKV_*` variable and its file key. A setting added without its row, or a row left
//! behind by a removed one, fails here.

use std::collections::BTreeMap;
use std::process::Command;

/// A setting's three names as one source gives them.
#[derive(Debug, PartialEq, Eq)]
struct Names {
    env: String,
    file_key: Option<String>,
}

/// Flag -> its environment variable, from `roamkv serve --help` (clap prints `[env: NAME=]`).
fn from_help() -> BTreeMap<String, String> {
    let output = Command::new(env!("CARGO_BIN_EXE_roamkv"))
        .args(["serve", "--help"])
        .output()
        .expect("run roamkv serve --help");
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("utf-8");
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        // An option's own line is indented six spaces; its description's lines further (and
        // may start with another flag's name when they wrap).
        let option_line = line
            .strip_prefix("      --")
            .filter(|_| !line.starts_with("       "));
        if line.trim_start().starts_with("-h, --help") {
            current = None;
        } else if let Some(rest) = option_line {
            let flag: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            current = Some(flag);
        }
        if let (Some(flag), Some(at)) = (&current, line.find("[env: ")) {
            let env: String = line[at + "[env: ".len()..]
                .chars()
                .take_while(|c| *c != '=' && *c != ']')
                .collect();
            flags.insert(flag.clone(), env);
        } else if let Some(flag) = &current {
            flags.entry(flag.clone()).or_default();
        }
    }
    flags
}

/// Flag -> names, from the table's rows (`| --flag ... | ROAMKV_X | key | ...`).
fn from_docs() -> BTreeMap<String, Names> {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/SERVER.md"))
            .expect("read docs/SERVER.md");
    let mut rows = BTreeMap::new();
    for line in docs.lines() {
        let Some(rest) = line.strip_prefix("| `--") else {
            continue;
        };
        let cells: Vec<&str> = rest.split(" | ").collect();
        let flag: String = cells[0]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let unquote = |cell: &str| {
            cell.trim()
                .trim_matches('`')
                .split(['=', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let env = unquote(cells[1]);
        let file_key = Some(unquote(cells[2])).filter(|k| k != "—");
        rows.insert(flag, Names { env, file_key });
    }
    rows
}

#[test]
fn the_settings_table_is_serve_help() {
    let help = from_help();
    let docs = from_docs();
    assert!(help.len() > 30, "too few flags in serve --help: {help:?}");
    let missing: Vec<&String> = help.keys().filter(|f| !docs.contains_key(*f)).collect();
    let stale: Vec<&String> = docs.keys().filter(|f| !help.contains_key(*f)).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/SERVER.md's table lacks {missing:?} and has {stale:?}, which serve does not take"
    );
    for (flag, env) in &help {
        let row = &docs[flag];
        let expected_env = format!("ROAMKV_{}", flag.replace('-', "_").to_uppercase());
        assert_eq!(
            env, &expected_env,
            "--{flag} reads {env:?} from the environment"
        );
        assert_eq!(
            row.env, expected_env,
            "the table's environment name for --{flag}"
        );
        if flag != "config" {
            assert_eq!(
                row.file_key.as_deref(),
                Some(flag.replace('-', "_").as_str()),
                "the table's file key for --{flag}"
            );
        }
    }
}
