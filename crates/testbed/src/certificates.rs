//! Certificates for tests of TLS (the server's HTTPS, MQTT over TLS, the sink's PostgreSQL, the
//! CLI's `--ca-file`): a CA of its own and a certificate for 127.0.0.1 signed by it, as PEM
//! files. Behind the `certificates` feature, so only tests compile rcgen.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// Writes `{name}-ca.crt`, `{name}-server.crt` and `{name}-server.key` into `dir`; returns
/// their paths in that order. Two names give two CAs that do not trust each other.
pub fn certificates(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A name of its own: with rcgen's default, the same as the server's, OpenSSL clients
    // (Python's ssl, curl) take the server's certificate for a self-signed one.
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("roamkv test CA {name}"));
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("server key");
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &ca, &ca_key)
        .expect("server certificate");
    let paths = (
        dir.join(format!("{name}-ca.crt")),
        dir.join(format!("{name}-server.crt")),
        dir.join(format!("{name}-server.key")),
    );
    std::fs::write(&paths.0, ca.pem()).expect("write");
    std::fs::write(&paths.1, server.pem()).expect("write");
    std::fs::write(&paths.2, key.serialize_pem()).expect("write");
    paths
}

/// A server certificate that is wrong in one way, for tests of what a client says of it.
#[derive(Debug, Clone, Copy)]
pub enum Flawed {
    /// A self-signed CA certificate served as the server's own (`openssl req -x509` alone).
    CaAsLeaf,
    /// A leaf for another name than 127.0.0.1.
    OtherName(&'static str),
    /// A leaf whose validity ended in 2020.
    Expired,
}

/// Writes `{name}-ca.crt`, `{name}-server.crt` and `{name}-server.key` as `certificates` does,
/// with the server's certificate `flawed` (for `CaAsLeaf` the CA file is the certificate itself).
pub fn flawed_certificates(dir: &Path, name: &str, flawed: Flawed) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("server key");
    let server = match flawed {
        Flawed::CaAsLeaf => {
            let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.self_signed(&key).expect("self-signed CA")
        }
        Flawed::OtherName(other) => CertificateParams::new(vec![other.to_string()])
            .expect("params")
            .signed_by(&key, &ca, &ca_key)
            .expect("server certificate"),
        Flawed::Expired => {
            let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
            params
                .signed_by(&key, &ca, &ca_key)
                .expect("server certificate")
        }
    };
    let paths = (
        dir.join(format!("{name}-ca.crt")),
        dir.join(format!("{name}-server.crt")),
        dir.join(format!("{name}-server.key")),
    );
    let trusted = match flawed {
        Flawed::CaAsLeaf => server.pem(),
        _ => ca.pem(),
    };
    std::fs::write(&paths.0, trusted).expect("write");
    std::fs::write(&paths.1, server.pem()).expect("write");
    std::fs::write(&paths.2, key.serialize_pem()).expect("write");
    paths
}
