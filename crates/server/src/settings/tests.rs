//! The settings' resolution, flag by flag.

use super::cloud::*;
use super::*;

fn args(data: &str) -> ServeArgs {
    ServeArgs {
        data: Some(data.into()),
        ..ServeArgs::default()
    }
}

#[test]
fn defaults_listen_on_loopback_with_sync_durability() {
    let config = Config::resolve(&args("/tmp/x")).expect("resolve");
    assert!(config.listen.ip().is_loopback());
    assert_eq!(config.durability, Durability::Sync);
    assert!(config.auth_token.is_none());
}

#[test]
fn the_commit_delay_and_the_export_rate_take_their_defaults_and_bounds() {
    let config = Config::resolve(&args("/tmp/x")).expect("resolve");
    assert_eq!(config.commit_delay, std::time::Duration::from_millis(2));
    assert_eq!(config.export_bytes_per_sec, 2 << 20);
    let mut a = args("/tmp/x");
    a.commit_delay_us = Some(0);
    a.export_rate_mib = Some(0);
    let config = Config::resolve(&a).expect("zero: off");
    assert!(config.commit_delay.is_zero());
    assert_eq!(config.export_bytes_per_sec, 0);
    a.commit_delay_us = Some(100_001);
    let error = Config::resolve(&a).expect_err("a stall, not a wait");
    assert!(
        error.contains("commit_delay_us must be at most 100000"),
        "{error}"
    );
}

#[test]
fn non_loopback_without_token_is_refused_unless_insecure() {
    let mut a = args("/tmp/x");
    a.listen = Some("0.0.0.0:59880".parse().expect("addr"));
    let error = Config::resolve(&a).expect_err("must refuse");
    assert!(error.contains("--insecure"), "{error}");
    a.insecure = true;
    assert!(Config::resolve(&a).is_ok());
}

#[test]
fn file_settings_apply_and_flags_win() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        "data = \"/from/file\"\ndurability = \"none\"\nmax_result_count = 7\n",
    )
    .expect("write");
    let mut a = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    a.max_result_count = Some(9);
    let config = Config::resolve(&a).expect("resolve");
    assert_eq!(config.data, PathBuf::from("/from/file"));
    assert_eq!(config.durability, Durability::None);
    assert_eq!(config.max_result_count, 9);
    std::fs::write(&path, "colour = \"blue\"\n").expect("write");
    let error = Config::resolve(&a).expect_err("unknown key");
    assert!(error.contains("colour"), "{error}");
}

#[test]
fn short_tokens_and_bad_brokers_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "short\n").expect("write");
    let mut a = args("/tmp/x");
    a.auth_token_file = Some(token);
    assert!(Config::resolve(&a).is_err());
    let mut b = args("/tmp/x");
    b.mqtt_broker = Some("localhost".into());
    assert!(Config::resolve(&b).is_err());
}

#[test]
fn sink_settings_are_checked_and_on_depart_cloud_needs_a_sink() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = args("/tmp/x");
    a.on_depart = Some("cloud".into());
    let error = Config::resolve(&a).expect_err("no sink");
    assert!(error.contains("--sink"), "{error}");
    a.sink = Some("postgres://edge@db.example:notaport/fleet".into());
    let error = Config::resolve(&a).expect_err("bad URL");
    assert!(error.starts_with("--sink:"), "{error}");
    a.sink = Some("postgres://edge@db.example:5432/fleet".into());
    a.sink_password_file = Some(dir.path().join("missing"));
    let error = Config::resolve(&a).expect_err("no password file");
    assert!(error.contains("--sink-password-file"), "{error}");
    std::fs::write(dir.path().join("pw"), "s3cret\n").expect("write");
    a.sink_password_file = Some(dir.path().join("pw"));
    let config = Config::resolve(&a).expect("resolve");
    let sink = config.sink.as_ref().expect("a sink");
    assert_eq!(sink.password.as_deref(), Some("s3cret"));
    assert!(!format!("{sink:?}").contains("s3cret"));
    assert_eq!(config.on_depart, OnDepart::Cloud);
    a.on_depart = Some("later".into());
    assert!(Config::resolve(&a).is_err());
}

#[test]
fn mqtt_brokers_take_a_scheme_and_credentials_need_a_broker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = args("/tmp/x");
    a.mqtt_username = Some("edge".into());
    let error = Config::resolve(&a).expect_err("no broker");
    assert!(error.contains("--mqtt-broker"), "{error}");
    a.mqtt_broker = Some("mqtts://broker.local:8883".into());
    let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
    assert!(mqtt.tls.is_some());
    assert_eq!((mqtt.host.as_str(), mqtt.port), ("broker.local", 8883));
    a.mqtt_broker = Some("tcp://broker.local:1883".into());
    assert!(
        Config::resolve(&a)
            .expect("resolve")
            .mqtt
            .expect("mqtt")
            .tls
            .is_none()
    );
    a.mqtt_broker = Some("ftp://broker.local:21".into());
    let error = Config::resolve(&a).expect_err("scheme");
    assert!(error.contains("scheme"), "{error}");

    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "").expect("write");
    a.mqtt_broker = Some("broker.local:1883".into());
    a.mqtt_ca_file = Some(ca.clone());
    let error = Config::resolve(&a).expect_err("CA without TLS");
    assert!(error.contains("mqtts://"), "{error}");
    a.mqtt_broker = Some("ssl://broker.local:8883".into());
    let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
    assert_eq!(mqtt.tls.expect("tls").ca_file, Some(ca));

    let password = dir.path().join("pw");
    std::fs::write(&password, "s3cret\n").expect("write");
    a.mqtt_password_file = Some(password.clone());
    let mqtt = Config::resolve(&a).expect("resolve").mqtt.expect("mqtt");
    assert_eq!(mqtt.password.as_deref(), Some("s3cret"));
    assert!(!format!("{mqtt:?}").contains("s3cret"));
    a.mqtt_username = None;
    let error = Config::resolve(&a).expect_err("password without user");
    assert!(error.contains("--mqtt-username"), "{error}");
}

#[test]
fn a_read_only_token_needs_a_different_read_write_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = dir.path().join("write");
    let read = dir.path().join("read");
    std::fs::write(&write, "write-token-0123456789\n").expect("write");
    std::fs::write(&read, "read-token-0123456789\n").expect("write");
    let mut a = args("/tmp/x");
    a.read_only_token_file = Some(read.clone());
    let error = Config::resolve(&a).expect_err("read-only alone");
    assert!(error.contains("--auth-token-file"), "{error}");
    a.auth_token_file = Some(read.clone());
    assert!(Config::resolve(&a).is_err(), "the same token twice");
    a.auth_token_file = Some(write);
    let config = Config::resolve(&a).expect("resolve");
    assert_eq!(
        config.read_only_token.as_deref(),
        Some(&b"read-token-0123456789"[..])
    );
}
