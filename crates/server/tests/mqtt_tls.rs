//! MQTT ingest from a broker that wants TLS and an account, as EdgeX's secure mode runs it: a
//! real mosquitto with a certificate made here (rcgen) and a password file made by
//! mosquitto_passwd. The right settings ingest; a wrong password, an untrusted certificate or a
//! missing account stop the start with an error naming the setting.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use roamkv_server::{Config, ServeArgs};
use roamkv_testbed::certificates::certificates;
use roamkv_testbed::prerequisite::{self, require_tool};
use rumqttc::{AsyncClient, MqttOptions, QoS, TlsConfiguration, Transport};

const USER: &str = "edge-core-data";
const PASSWORD: &str = "correct horse battery staple";

/// Certificates and a broker that speaks only TLS to account holders.
struct SecureBroker {
    broker: Mosquitto,
    ca_file: PathBuf,
    _certs: tempfile::TempDir,
}

fn secure_broker() -> SecureBroker {
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca_file, cert_file, key_file) = certificates(certs.path(), "broker");
    let broker = Mosquitto::start_with(|dir| {
        let passwords = dir.join("passwords");
        let made = std::process::Command::new("mosquitto_passwd")
            .args(["-c", "-b"])
            .arg(&passwords)
            .args([USER, PASSWORD])
            .output()
            .expect("run mosquitto_passwd");
        assert!(made.status.success(), "mosquitto_passwd: {made:?}");
        format!(
            "certfile {}\nkeyfile {}\nallow_anonymous false\npassword_file {}\n",
            cert_file.display(),
            key_file.display(),
            passwords.display()
        )
    });
    SecureBroker {
        broker,
        ca_file,
        _certs: certs,
    }
}

fn secure_settings(broker: &SecureBroker, password_file: &Path) -> impl FnOnce(&mut ServeArgs) {
    let url = format!("mqtts://127.0.0.1:{}", broker.broker.port);
    let ca_file = broker.ca_file.clone();
    let password_file = password_file.to_path_buf();
    move |a| {
        a.mqtt_broker = Some(url);
        a.mqtt_ca_file = Some(ca_file);
        a.mqtt_username = Some(USER.into());
        a.mqtt_password_file = Some(password_file);
    }
}

/// An EdgeX device service publishing over TLS with the account.
async fn publish_secure(broker: &SecureBroker, topic: String, payload: Vec<u8>) {
    let mut options = MqttOptions::new("edgex-device-service", "127.0.0.1", broker.broker.port);
    options.set_keep_alive(Duration::from_secs(5));
    options.set_credentials(USER, PASSWORD);
    let tls = roamkv_sink::tls::client_config(Some(&broker.ca_file), "CA").expect("client TLS");
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
        Arc::new(tls),
    )));
    let (client, mut events) = AsyncClient::new(options, 16);
    client
        .publish(topic, QoS::AtLeastOnce, false, payload)
        .await
        .expect("publish");
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.poll()).await {
            Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)))) => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("MQTT publisher: {e}"),
            Err(_) => panic!("MQTT publisher: no PUBACK within 10 s"),
        }
    }
    let _ = client.disconnect().await;
}

/// The error `roamkv_server::start` gives with these settings.
async fn start_error(adjust: impl FnOnce(&mut ServeArgs)) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = ServeArgs {
        data: Some(dir.path().join("data")),
        listen: Some("127.0.0.1:0".parse().expect("addr")),
        ..ServeArgs::default()
    };
    adjust(&mut args);
    let config = Config::resolve(&args).expect("settings resolve");
    match roamkv_server::start(config).await {
        Ok(running) => {
            running.shutdown();
            let _ = running.wait().await;
            panic!("the server started")
        }
        Err(e) => e,
    }
}

fn mosquitto_present(test: &str) -> bool {
    prerequisite::met(test, require_tool("mosquitto", "mosquitto"))
        && prerequisite::met(test, require_tool("mosquitto_passwd", "mosquitto"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_arrive_over_tls_with_the_account() {
    if !mosquitto_present("events_arrive_over_tls_with_the_account") {
        return;
    }
    let broker = secure_broker();
    let secrets = tempfile::tempdir().expect("tempdir");
    let password_file = secrets.path().join("mqtt-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("write");
    let server = Server::start(secure_settings(&broker, &password_file)).await;
    assert!(
        server.mqtt_subscribed().await,
        "the server never subscribed over TLS"
    );
    let origin = now_ns();
    let envelope = serde_json::json!({
        "apiVersion": "v3",
        "contentType": "application/json",
        "payload": event("truck-9", origin, &[("temperature", "21.5")]),
    });
    publish_secure(
        &broker,
        "edgex/events/device/device-virtual/thermo-profile/truck-9/readings".into(),
        envelope.to_string().into_bytes(),
    )
    .await;
    let arrived = eventually(10, || async {
        server
            .get("/api/v3/reading/count/device/name/truck-9")
            .await
            .1["count"]
            == 1
    })
    .await;
    assert!(arrived, "the event published over TLS was not ingested");
    let config = server.get("/api/v3/config").await.1;
    assert_eq!(config["config"]["mqtt"]["tls"], true);
    assert!(
        !config.to_string().contains(PASSWORD),
        "the password is never shown"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_refuses_us_stops_the_start_naming_the_setting() {
    if !mosquitto_present("a_broker_that_refuses_us_stops_the_start_naming_the_setting") {
        return;
    }
    let broker = secure_broker();
    let secrets = tempfile::tempdir().expect("tempdir");
    let wrong = secrets.path().join("wrong-password");
    std::fs::write(&wrong, "Tr0ub4dor&3\n").expect("write");

    let error = start_error(secure_settings(&broker, &wrong)).await;
    assert!(
        error.contains("refused the credentials") && error.contains("--mqtt-username"),
        "{error}"
    );

    let error = start_error(|a| {
        secure_settings(&broker, &wrong)(a);
        a.mqtt_username = None;
        a.mqtt_password_file = None;
    })
    .await;
    assert!(
        error.contains("refused") && error.contains("--mqtt-username"),
        "{error}"
    );

    // A certificate nobody here trusts: the TLS handshake fails, and the start says what is
    // wrong and what to do (roamkv_sink::explain): the CA to trust, with the setting that names it.
    let error = start_error(|a| {
        secure_settings(&broker, &wrong)(a);
        a.mqtt_ca_file = None;
    })
    .await;
    assert!(
        error.starts_with("TLS failed: the MQTT broker at ")
            && error.contains("signed by a CA this client does not trust")
            && error.contains("--mqtt-ca-file ca.crt")
            && error.contains("openssl req -x509")
            && error.contains("UnknownIssuer"),
        "{error}"
    );
}
