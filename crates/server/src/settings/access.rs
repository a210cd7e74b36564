//! Who may talk to the server and how: the address it listens on, the bearer tokens, whether
//! plain HTTP on a non-loopback address is allowed, and HTTPS's certificate and key.

use std::net::SocketAddr;
use std::path::Path;

use super::args::{FileConfig, ServeArgs};
use super::tls::TlsFiles;

/// Both files or neither: half a TLS setting is a mistake, not plain HTTP.
pub(super) fn resolve_tls(args: &ServeArgs, file: &FileConfig) -> Result<Option<TlsFiles>, String> {
    let cert_file = args.tls_cert_file.clone().or(file.tls_cert_file.clone());
    let key_file = args.tls_key_file.clone().or(file.tls_key_file.clone());
    match (cert_file, key_file) {
        (Some(cert_file), Some(key_file)) => Ok(Some(TlsFiles {
            cert_file,
            key_file,
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(
            "--tls-cert-file needs --tls-key-file (or `tls_key_file` in the config file)".into(),
        ),
        (None, Some(_)) => Err(
            "--tls-key-file needs --tls-cert-file (or `tls_cert_file` in the config file)".into(),
        ),
    }
}

/// The bearer tokens the server takes (SIGHUP may replace them: reload.rs).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    /// The read-write token; None: auth is off.
    pub write: Option<Vec<u8>>,
    /// The read-only token (GET and HEAD), if there is one.
    pub read_only: Option<Vec<u8>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("write", &self.write.as_ref().map(|_| "***"))
            .field("read_only", &self.read_only.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Where the server listens and who may talk to it.
pub(super) struct Access {
    pub(super) listen: SocketAddr,
    pub(super) auth_token: Option<Vec<u8>>,
    pub(super) read_only_token: Option<Vec<u8>>,
    pub(super) insecure: bool,
}

impl Access {
    /// Without a token, only a loopback address (unless --insecure).
    pub(super) fn resolve(args: &ServeArgs, file: &FileConfig) -> Result<Access, String> {
        let listen = args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 59880)));
        let auth_token = match args
            .auth_token_file
            .clone()
            .or(file.auth_token_file.clone())
        {
            Some(path) => Some(read_token(&path)?),
            None => None,
        };
        let read_only_token = match args
            .read_only_token_file
            .clone()
            .or(file.read_only_token_file.clone())
        {
            Some(path) => Some(read_token(&path)?),
            None => None,
        };
        if read_only_token.is_some() && auth_token.is_none() {
            return Err(
                "--read-only-token-file needs --auth-token-file (the read-write token): \
                 otherwise nothing could write"
                    .into(),
            );
        }
        if read_only_token.is_some() && read_only_token == auth_token {
            return Err("the read-only token must differ from the read-write token".into());
        }
        let insecure = args.insecure || file.insecure.unwrap_or(false);
        if auth_token.is_none() && !listen.ip().is_loopback() && !insecure {
            return Err(format!(
                "refusing to listen on {listen} without an auth token: give --auth-token-file FILE, \
                 listen on a loopback address, or pass --insecure"
            ));
        }
        Ok(Access {
            listen,
            auth_token,
            read_only_token,
            insecure,
        })
    }
}

pub(super) fn read_token(path: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading auth token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.len() < 16 {
        return Err(format!(
            "auth token in {} is {} characters; use at least 16",
            path.display(),
            token.len()
        ));
    }
    Ok(token.as_bytes().to_vec())
}
