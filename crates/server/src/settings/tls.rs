//! HTTPS: the server's certificate chain and key, loaded at start and again on SIGHUP.
//!
//! At start a missing or unreadable file, a file with no certificate or key in it, or a key that
//! does not go with the certificate is an error naming the file: the server never falls back to
//! plain HTTP. On SIGHUP the files are read again and new connections get the new pair;
//! connections already open keep theirs, and a pair that fails to load is reported and the old
//! one kept (a renewal half-copied into place must not take the server down). rustls with the
//! ring provider, as the cloud sink's client: no OpenSSL.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain (PEM, the server's first) and its private key (PEM: PKCS#8,
/// PKCS#1 or SEC1) are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// The acceptor new connections use, replaced whole on reload.
pub struct Tls {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
}

impl Tls {
    /// Loads the pair, or says what is wrong with which file.
    pub fn load(files: TlsFiles) -> Result<Tls, String> {
        let acceptor = acceptor(&files)?;
        Ok(Tls {
            files,
            acceptor: RwLock::new(acceptor),
        })
    }

    /// The acceptor for a connection accepted now.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Reads the files again; on success new connections get the new pair, on failure nothing
    /// changes.
    /// The files the pair is read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    pub fn reload(&self) -> Result<(), String> {
        let fresh = acceptor(&self.files)?;
        *self.acceptor.write() = fresh;
        Ok(())
    }
}

fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let cert_file = files.cert_file.display();
    let key_file = files.key_file.display();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("the TLS certificate file {cert_file}: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "the TLS certificate file {cert_file} holds no certificate"
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key_file)
        .map_err(|e| format!("the TLS key file {key_file}: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("setting up TLS: {e}"))?
        .with_no_client_auth()
        // rustls checks that the key's public half is the certificate's.
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "the TLS key file {key_file} does not go with the certificate file {cert_file}: {e}"
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
