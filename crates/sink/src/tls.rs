//! TLS as a client (the cloud database, the MQTT broker): rustls with the ring provider,
//! trusting the system's CA certificates and those of an optional PEM file. The peer's
//! certificate chain and name are always verified.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The client set-up; `setting` names the CA file's setting in errors (e.g. "--mqtt-ca-file").
pub fn client_config(
    ca_file: Option<&Path>,
    setting: &str,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A system certificate rustls cannot use is skipped, as every TLS client does.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{setting} {} holds no certificate", path.display()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("setting up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
