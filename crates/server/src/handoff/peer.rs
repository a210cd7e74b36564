//! How this edge reaches another: the next edge of a handoff (begin, chunks, commit, abort) and,
//! for `arrived`, the edge a device left. One HTTP client for `http://` and `https://` edges
//! (rustls with ring as the sink's, `roamkv_sink::tls`: the system's CAs and those of
//! `--peer-ca-file`), the peer token (`--peer-token-file`) on every request, and a failure said
//! as what is wrong and what to do (`roamkv_sink::explain`), which the handoff's record shows.

use std::time::Duration;

use parking_lot::RwLock;
use reqwest::{Client, Method, RequestBuilder};
use roamkv_sink::explain::{self, Dialed, Peer};

use crate::settings::PeerSettings;

/// The setting that names the next edges' CA, in advice.
const CA_SETTING: &str = "--peer-ca-file";

/// The client and the token every request to another edge carries; SIGHUP replaces both
/// (settings/reload.rs: a rotated peer token or a renewed CA file, read again).
pub struct PeerLink {
    current: RwLock<(Client, Option<String>)>,
}

impl PeerLink {
    /// The client, trusting the system's CAs and those of `--peer-ca-file`; the token of
    /// `--peer-token-file` is presented as `Authorization: Bearer <token>`.
    pub fn new(settings: &PeerSettings) -> Result<PeerLink, String> {
        Ok(PeerLink {
            current: RwLock::new(link(settings)?),
        })
    }

    /// Puts `settings` in force for the requests made from now on (the CA file read again);
    /// an error leaves the link as it was.
    pub fn replace(&self, settings: &PeerSettings) -> Result<(), String> {
        let fresh = link(settings)?;
        *self.current.write() = fresh;
        Ok(())
    }

    /// A request to another edge, with the peer token.
    pub fn request(&self, method: Method, url: &str) -> RequestBuilder {
        let current = self.current.read();
        let request = current.0.request(method, url);
        match &current.1 {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// The client and the token of `settings`.
fn link(settings: &PeerSettings) -> Result<(Client, Option<String>), String> {
    let tls = roamkv_sink::tls::client_config(settings.ca_file.as_deref(), CA_SETTING)?;
    let client = Client::builder()
        .use_preconfigured_tls(tls)
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| format!("making the handoff HTTP client: {e}"))?;
    Ok((client, settings.token.clone()))
}

/// What `url` (`http(s)://host:port...`) dials, for the advice.
fn dialed(url: &str) -> Option<Dialed> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some(Dialed {
        host: parsed
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: parsed.port_or_known_default()?,
        tls: parsed.scheme() == "https",
        peer: Peer::Server,
        ca_setting: CA_SETTING.into(),
    })
}

/// A request to the edge at `url` that got no answer: what is wrong and what to do, the
/// original error after it.
pub fn unanswered(url: &str, error: reqwest::Error) -> String {
    let error = error.without_url();
    match dialed(url) {
        Some(dialed) => explain::explained(&error, &dialed),
        None => explain::chain(&error),
    }
}

/// The edge at `url` refused this edge's peer token (401, 403): what to do; None for any other
/// answer. `message` is its ErrorResponse's message.
pub fn token_refused(url: &str, status: u16, message: &str) -> Option<String> {
    // The one translation says whether this is a refusal of the token; its advice is the CLI's
    // (--token-file), so the sender's setting is named here.
    explain::token_refusal(status, message)?;
    let edge = dialed(url).map_or_else(|| url.to_string(), |d| format!("{}:{}", d.host, d.port));
    let give = "give this edge that edge's read-write token (the file of its --auth-token-file) \
                with --peer-token-file FILE";
    Some(match status {
        403 => format!(
            "the edge at {edge} took this edge's peer token for its read-only token (its \
             --read-only-token-file), and a handoff writes: {give}"
        ),
        _ if message.contains("not valid") => format!(
            "the edge at {edge} refused this edge's peer token: it is not that edge's token; \
             {give}"
        ),
        _ => format!("the edge at {edge} wants a bearer token and this edge sent none: {give}"),
    })
}

/// The message of an ErrorResponse body, or the body itself.
pub fn message_of(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_token_names_the_peer_setting() {
        let url = "https://127.0.0.1:4000";
        let wrong = token_refused(url, 401, "the bearer token is not valid").expect("refusal");
        assert!(wrong.contains("refused this edge's peer token"), "{wrong}");
        assert!(wrong.contains("--peer-token-file"), "{wrong}");
        let none = token_refused(url, 401, "this route needs an Authorization").expect("none");
        assert!(none.contains("sent none"), "{none}");
        let read_only = token_refused(
            url,
            403,
            "this token may only read (GET, HEAD); POST needs the read-write token",
        )
        .expect("read-only");
        assert!(read_only.contains("read-only token"), "{read_only}");
        assert!(token_refused(url, 409, "stale epoch").is_none());
        assert!(token_refused(url, 403, "something else").is_none());
    }

    #[test]
    fn the_message_of_an_error_response_is_read() {
        assert_eq!(message_of(r#"{"message":"no","statusCode":401}"#), "no");
        assert_eq!(message_of("plain"), "plain");
    }
}
