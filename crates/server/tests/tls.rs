//! HTTPS (settings/tls.rs): certificates made here with rcgen, a client that trusts their CA and one that
//! does not, SIGHUP with a new certificate, and every way a TLS setting can be wrong at start.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Server, event, now_ns};
use roamkv_server::{Config, ServeArgs};
use roamkv_testbed::certificates::certificates;

/// A client that trusts only the CA in `ca_file`.
fn client_trusting(ca_file: &Path) -> reqwest::Client {
    let pem = std::fs::read(ca_file).expect("CA");
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA pem"))
        // Every request on a new connection: a reloaded certificate shows on the next one.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

async fn ping(client: &reqwest::Client, base: &str) -> Result<u16, reqwest::Error> {
    let response = client.get(format!("{base}/api/v3/ping")).send().await?;
    Ok(response.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_a_client_that_trusts_its_ca_refuses_others_and_reloads_on_sighup() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(certs.path(), "first");
    let (cert_file, key_file) = (
        certs.path().join("serve.crt"),
        certs.path().join("serve.key"),
    );
    std::fs::copy(&cert, &cert_file).expect("copy");
    std::fs::copy(&key, &key_file).expect("copy");
    let (tls_cert, tls_key) = (cert_file.clone(), key_file.clone());
    let server = Server::start(move |args| {
        args.tls_cert_file = Some(tls_cert);
        args.tls_key_file = Some(tls_key);
    })
    .await;
    let base = format!("https://{}", server.addr());
    let trusting = client_trusting(&ca);

    assert_eq!(ping(&trusting, &base).await.expect("HTTPS ping"), 200);
    let request = event("tls-car", now_ns(), &[("speed", "42")]);
    let e = &request["event"];
    let posted = trusting
        .post(format!(
            "{base}/api/v3/event/device-virtual/{}/{}/{}",
            e["profileName"].as_str().expect("profile"),
            e["deviceName"].as_str().expect("device"),
            e["sourceName"].as_str().expect("source")
        ))
        .header("content-type", "application/json")
        .body(request.to_string())
        .send()
        .await
        .expect("POST over HTTPS");
    assert_eq!(posted.status().as_u16(), 201);

    // A client that does not trust the CA is refused in the handshake; plain HTTP gets nothing.
    let (other_ca, other_cert, other_key) = certificates(certs.path(), "second");
    let stranger = client_trusting(&other_ca);
    assert!(
        ping(&stranger, &base).await.is_err(),
        "untrusted CA accepted"
    );
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let http_base = format!("http://{}", server.addr());
    assert!(
        !matches!(ping(&plain, &http_base).await, Ok(200)),
        "plain HTTP answered on the TLS port"
    );

    // SIGHUP with the second pair in place: new connections get it.
    std::fs::copy(&other_cert, &cert_file).expect("copy");
    std::fs::copy(&other_key, &key_file).expect("copy");
    // SAFETY: kill(2) on our own pid; the server's tokio handler takes SIGHUP.
    unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
    let (client, url) = (&stranger, &base);
    let reloaded = common::eventually(10, move || async move {
        matches!(ping(client, url).await, Ok(200))
    })
    .await;
    assert!(reloaded, "the new certificate was not served after SIGHUP");
    assert!(
        ping(&trusting, &base).await.is_err(),
        "the old certificate is still served"
    );

    // A pair that does not load (a key of another certificate) is reported; the old one stays.
    std::fs::copy(&key, &key_file).expect("copy");
    // SAFETY: as above.
    unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ping(&stranger, &base).await.expect("still served"), 200);
    server.stop().await;
}

/// The error `roamkv serve` starts with, for these TLS settings.
async fn start_error(tls_cert_file: Option<PathBuf>, tls_key_file: Option<PathBuf>) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ServeArgs {
        data: Some(dir.path().join("data")),
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        tls_cert_file,
        tls_key_file,
        ..ServeArgs::default()
    };
    let config = match Config::resolve(&args) {
        Ok(config) => config,
        Err(e) => return e,
    };
    match roamkv_server::start(config).await {
        Ok(_) => panic!("the server started with a TLS setting that cannot work"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_setting_that_cannot_work_stops_the_start_naming_the_file() {
    let certs = tempfile::tempdir().expect("tempdir");
    let (_, cert, key) = certificates(certs.path(), "first");
    let (_, _, other_key) = certificates(certs.path(), "second");
    let missing = certs.path().join("missing.crt");

    let e = start_error(Some(missing.clone()), Some(key.clone())).await;
    assert!(e.contains(&missing.display().to_string()), "{e}");

    let e = start_error(Some(cert.clone()), Some(other_key.clone())).await;
    assert!(
        e.contains("does not go with") && e.contains(&other_key.display().to_string()),
        "{e}"
    );

    // A key file where the certificate should be: no certificate in it.
    let e = start_error(Some(key.clone()), Some(key.clone())).await;
    assert!(e.contains("holds no certificate"), "{e}");

    let e = start_error(Some(cert.clone()), None).await;
    assert!(e.contains("--tls-key-file"), "{e}");
    let e = start_error(None, Some(key)).await;
    assert!(e.contains("--tls-cert-file"), "{e}");
}
