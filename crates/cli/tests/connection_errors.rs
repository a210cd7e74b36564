//! What the CLI says when it cannot reach a running `roamkv serve` (`--server`), one test a case
//! (issue 53, item 5): each message names what is wrong and what to do, and keeps the original
//! error at its end in parentheses. The translation is `crates/sink/src/explain.rs`; docs/SERVER.md,
//! "When a connection fails", lists the messages.

use std::path::{Path, PathBuf};
use std::process::Command;

use roamkv_testbed::certificates::{Flawed, certificates, flawed_certificates};
use roamkv_testbed::serve::ServeProcess;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
const READ_WRITE_TOKEN: &str = "read-write-token-0123456789";
const READ_ONLY_TOKEN: &str = "read-only-token-0123456789";

/// `roamkv ARGS` that must fail: its stderr.
fn fails(args: &[&str], token: Option<&str>) -> String {
    let mut command = Command::new(ROAMKV);
    command.args(args).env_remove("ROAMKV_TOKEN");
    if let Some(token) = token {
        command.env("ROAMKV_TOKEN", token);
    }
    let output = command.output().expect("run roamkv");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "succeeded: {stderr}");
    println!("roamkv {}:\n{stderr}", args.join(" "));
    stderr
}

fn assert_says(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
}

/// `roamkv serve` over HTTPS with `cert` and `key`.
fn https_server(dir: &Path, cert: &Path, key: &Path) -> ServeProcess {
    ServeProcess::start(Path::new(ROAMKV), &dir.join("data"), |c| {
        c.arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-key-file")
            .arg(key);
    })
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8")
}

/// The case: a self-signed CA certificate (`openssl req -x509` alone) served as the
/// server's own. The message says so and gives the commands of a CA and a leaf; run as given,
/// they make certificates the CLI then accepts.
#[test]
fn a_ca_certificate_served_as_the_servers_own_is_named_with_the_commands_that_fix_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = flawed_certificates(dir.path(), "edge", Flawed::CaAsLeaf);
    let server = https_server(dir.path(), &cert, &key);
    let message = fails(
        &["devices", "--server", &server.url(), "--ca-file", path(&ca)],
        None,
    );
    assert_says(
        &message,
        &[
            "presents a CA certificate as its own",
            "openssl req -x509",
            "subjectAltName=IP:127.0.0.1",
            "basicConstraints=critical,CA:FALSE",
            "-CA ca.crt",
            "roamkv serve --tls-cert-file server.crt --tls-key-file server.key",
            "--ca-file ca.crt",
            "CaUsedAsEndEntity)",
        ],
    );
    drop(server);

    // The commands, run as the message gives them (where openssl is installed).
    if Command::new("openssl").arg("version").output().is_err() {
        println!("openssl not installed: the commands are not run");
        return;
    }
    let made = dir.path().join("made");
    std::fs::create_dir(&made).expect("mkdir");
    for command in message.split('`').skip(1).step_by(2) {
        if !command.starts_with("openssl ") || !command.contains(" -out ") {
            continue;
        }
        let ran = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&made)
            .output()
            .expect("sh");
        assert!(ran.status.success(), "{command}: {ran:?}");
    }
    let (cert, key): (PathBuf, PathBuf) = (made.join("server.crt"), made.join("server.key"));
    let server = https_server(&made, &cert, &key);
    let listed = Command::new(ROAMKV)
        .args(["devices", "--server", &server.url(), "--ca-file"])
        .arg(made.join("ca.crt"))
        .env_remove("ROAMKV_TOKEN")
        .output()
        .expect("run roamkv");
    assert!(listed.status.success(), "{listed:?}");
}

#[test]
fn a_certificate_of_an_unknown_ca_says_to_give_the_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_ca, cert, key) = certificates(dir.path(), "edge");
    let server = https_server(dir.path(), &cert, &key);
    let message = fails(&["devices", "--server", &server.url()], None);
    assert_says(
        &message,
        &[
            "signed by a CA this client does not trust",
            "--ca-file ca.crt",
            "UnknownIssuer)",
        ],
    );
}

#[test]
fn a_certificate_for_another_name_names_both_and_the_san_to_add() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) =
        flawed_certificates(dir.path(), "edge", Flawed::OtherName("edge-7.example"));
    let server = https_server(dir.path(), &cert, &key);
    let message = fails(
        &["devices", "--server", &server.url(), "--ca-file", path(&ca)],
        None,
    );
    assert_says(
        &message,
        &[
            "a certificate for edge-7.example, not for 127.0.0.1 as dialed",
            "-addext subjectAltName=IP:127.0.0.1",
            "certificate not valid for name",
        ],
    );
}

#[test]
fn an_expired_certificate_says_when_it_expired() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = flawed_certificates(dir.path(), "edge", Flawed::Expired);
    let server = https_server(dir.path(), &cert, &key);
    let message = fails(
        &["devices", "--server", &server.url(), "--ca-file", path(&ca)],
        None,
    );
    assert_says(
        &message,
        &[
            "a certificate that expired on 2020-01-01",
            "make a new one",
            "--tls-cert-file",
            "certificate expired",
        ],
    );
}

/// A plain server without tokens, and its address.
fn plain_server(dir: &Path, tokens: bool) -> ServeProcess {
    let (rw, ro) = (dir.join("rw.token"), dir.join("ro.token"));
    std::fs::write(&rw, READ_WRITE_TOKEN).expect("write");
    std::fs::write(&ro, READ_ONLY_TOKEN).expect("write");
    ServeProcess::start(Path::new(ROAMKV), &dir.join("data"), |c| {
        if tokens {
            c.arg("--auth-token-file")
                .arg(&rw)
                .arg("--read-only-token-file")
                .arg(&ro);
        }
    })
}

#[test]
fn tls_spoken_to_a_plain_http_server_says_use_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = plain_server(dir.path(), false);
    let https = format!("https://{}", server.addr);
    let message = fails(&["devices", "--server", &https], None);
    assert_says(
        &message,
        &[
            &format!("the roamkv server at {}", server.addr),
            &format!("use http://{}", server.addr),
        ],
    );
    assert!(message.trim_end().ends_with(')'), "{message}");
}

#[test]
fn plain_http_spoken_to_an_https_server_says_use_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_ca, cert, key) = certificates(dir.path(), "edge");
    let server = https_server(dir.path(), &cert, &key);
    let http = format!("http://{}", server.addr);
    let message = fails(&["devices", "--server", &http], None);
    assert_says(&message, &[&format!("use https://{}", server.addr)]);
}

#[test]
fn nothing_listening_says_so_with_the_address() {
    let port = roamkv_testbed::services::free_port();
    let message = fails(
        &["devices", "--server", &format!("http://127.0.0.1:{port}")],
        None,
    );
    assert_says(
        &message,
        &[
            &format!("nothing listens at 127.0.0.1:{port}: is roamkv serve running"),
            "(error sending request",
        ],
    );
}

#[test]
fn no_token_says_how_to_give_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = plain_server(dir.path(), true);
    let message = fails(&["devices", "--server", &server.url()], None);
    assert_says(
        &message,
        &[
            "the server wants a bearer token and none was given",
            "--token-file FILE or $ROAMKV_TOKEN",
            "(401: this route needs an Authorization: Bearer <token> header)",
        ],
    );
    let wrong = fails(&["devices", "--server", &server.url()], Some("not-it"));
    assert_says(&wrong, &["refused the token given", "(401: "]);
}

#[test]
fn the_read_only_token_on_a_write_says_to_give_the_read_write_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = plain_server(dir.path(), true);
    let message = fails(
        &["depart", "--device", "visitor", "--server", &server.url()],
        Some(READ_ONLY_TOKEN),
    );
    assert_says(
        &message,
        &[
            "the server's read-only token, which may only read",
            "read-write token (the file of its --auth-token-file)",
            "(403: this token may only read",
        ],
    );
}
