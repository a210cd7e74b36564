//! The next edges, as this edge's handoff sender reaches them: the bearer token it presents there
//! (`--peer-token-file`: the next edge's read-write token) and the CA that signed their
//! certificates (`--peer-ca-file`, trusted besides the system's). The token is never shown: not
//! in /api/v3/config, not in a log, not in `Debug`.

use std::path::PathBuf;

use super::access::read_token;
use super::args::{FileConfig, ServeArgs};

/// How this edge reaches the next ones.
#[derive(Clone, Default)]
pub struct PeerSettings {
    /// Sent as `Authorization: Bearer <token>` with every handoff request.
    pub token: Option<String>,
    /// PEM file of the CA certificates that signed the next edges' certificates.
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for PeerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerSettings")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// Flag, then `$ROAMKV_PEER_*` (clap reads both into `args`), then the file. An unreadable or
/// short token file, a token that cannot be an HTTP header, or a missing CA file is an error
/// naming the setting.
pub(super) fn resolve_peer(args: &ServeArgs, file: &FileConfig) -> Result<PeerSettings, String> {
    let token = match args
        .peer_token_file
        .clone()
        .or(file.peer_token_file.clone())
    {
        Some(path) => {
            let token = read_token(&path).map_err(|e| format!("--peer-token-file: {e}"))?;
            if !token.iter().all(u8::is_ascii_graphic) {
                return Err(format!(
                    "--peer-token-file {}: the token may hold only printable ASCII without \
                     spaces (it is sent in an HTTP header)",
                    path.display()
                ));
            }
            Some(String::from_utf8(token).expect("ASCII"))
        }
        None => None,
    };
    let ca_file = args.peer_ca_file.clone().or(file.peer_ca_file.clone());
    if let Some(path) = &ca_file
        && let Err(e) = std::fs::metadata(path)
    {
        return Err(format!("--peer-ca-file {}: {e}", path.display()));
    }
    Ok(PeerSettings { token, ca_file })
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ServeArgs};

    #[test]
    fn the_flag_wins_over_the_file_and_the_token_is_never_shown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from_file, from_flag) = (dir.path().join("file-token"), dir.path().join("flag-token"));
        std::fs::write(&from_file, "token-from-the-file-0123456789\n").expect("write");
        std::fs::write(&from_flag, "token-from-the-flag-0123456789\n").expect("write");
        let ca = dir.path().join("peer-ca.crt");
        std::fs::write(&ca, "").expect("write");
        let toml = dir.path().join("serve.toml");
        std::fs::write(
            &toml,
            format!(
                "data = \"/tmp/x\"\npeer_token_file = {:?}\npeer_ca_file = {:?}\n",
                from_file.display().to_string(),
                ca.display().to_string()
            ),
        )
        .expect("write");
        let mut args = ServeArgs {
            config: Some(toml),
            ..ServeArgs::default()
        };
        let config = Config::resolve(&args).expect("resolve");
        assert_eq!(
            config.peer.token.as_deref(),
            Some("token-from-the-file-0123456789")
        );
        assert_eq!(config.peer.ca_file.as_deref(), Some(ca.as_path()));
        args.peer_token_file = Some(from_flag);
        let config = Config::resolve(&args).expect("resolve");
        assert_eq!(
            config.peer.token.as_deref(),
            Some("token-from-the-flag-0123456789")
        );
        let shown = format!("{} {:?}", config.to_json(), config);
        assert!(!shown.contains("token-from-the"), "{shown}");
        assert_eq!(config.to_json()["peer"]["token"], true);
    }

    #[test]
    fn a_short_token_or_a_missing_ca_file_names_the_setting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let short = dir.path().join("short");
        std::fs::write(&short, "short\n").expect("write");
        let mut args = ServeArgs {
            data: Some("/tmp/x".into()),
            peer_token_file: Some(short),
            ..ServeArgs::default()
        };
        let error = Config::resolve(&args).expect_err("short token");
        assert!(error.starts_with("--peer-token-file"), "{error}");
        args.peer_token_file = None;
        args.peer_ca_file = Some(dir.path().join("missing.crt"));
        let error = Config::resolve(&args).expect_err("no CA file");
        assert!(error.starts_with("--peer-ca-file"), "{error}");
    }
}
