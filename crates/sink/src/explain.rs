//! Errors a user can act on: a failed connection (TLS, TCP, DNS) or an HTTP refusal of the
//! token, said in a sentence that names what is wrong and what to do, with the command where
//! there is one, and the original error after it in parentheses (for search engines). The one
//! translation of the CLI (`--server`, `handoff`), the sink (PostgreSQL), MQTT and the handoff
//! sender; docs/SERVER.md, "When a connection fails", lists the messages.

use std::error::Error;
use std::io;

use rustls::{AlertDescription, CertificateError};

/// What was dialed, so that the advice names the right host and settings.
#[derive(Debug, Clone)]
pub struct Dialed {
    /// The host as dialed (a name or an IP address, without brackets).
    pub host: String,
    pub port: u16,
    /// Whether TLS was spoken.
    pub tls: bool,
    pub peer: Peer,
    /// The client's setting that names a CA file (`--ca-file`, `--mqtt-ca-file`, ...).
    pub ca_setting: String,
}

/// Who answers at the address dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `roamkv serve` (the CLI's `--server`, a handoff's receiver).
    Server,
    /// The MQTT broker.
    Broker,
    /// The sink's PostgreSQL-protocol database.
    Database,
}

impl Dialed {
    /// `host:port`, an IPv6 address in brackets.
    fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn who(&self) -> String {
        let what = match self.peer {
            Peer::Server => "the roamkv server",
            Peer::Broker => "the MQTT broker",
            Peer::Database => "the database",
        };
        format!("{what} at {}", self.addr())
    }

    /// The subjectAltName entry that names the host dialed.
    fn san(&self) -> String {
        if self.host.parse::<std::net::IpAddr>().is_ok() {
            format!("IP:{}", self.host)
        } else {
            format!("DNS:{}", self.host)
        }
    }

    /// How the peer is given its certificate and key.
    fn serve_with(&self) -> &'static str {
        match self.peer {
            Peer::Server => "roamkv serve --tls-cert-file server.crt --tls-key-file server.key",
            Peer::Broker => "the broker's certfile server.crt and keyfile server.key (mosquitto)",
            Peer::Database => {
                "PostgreSQL's ssl_cert_file 'server.crt' and ssl_key_file 'server.key'"
            }
        }
    }

    /// The two openssl commands that make a CA and a leaf for the host, signed by it.
    fn make_ca_and_leaf(&self) -> String {
        let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        format!(
            "`openssl req -x509 {key} -days 3650 -subj /CN=roamkv-ca -keyout ca.key -out \
             ca.crt` then `openssl req -x509 {key} -days 825 -subj /CN={host} -addext \
             subjectAltName={san} -addext basicConstraints=critical,CA:FALSE -CA ca.crt -CAkey \
             ca.key -keyout server.key -out server.crt`",
            host = self.host,
            san = self.san()
        )
    }
}

/// The error and its causes, joined by ": ", a cause that repeats the line before it left out.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in causes(error) {
        let text = e.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// The sentence for `error` with the original in parentheses, or the original alone when no
/// sentence fits it.
pub fn explained(error: &(dyn Error + 'static), dialed: &Dialed) -> String {
    match explain(error, dialed) {
        Some(sentence) => format!("{sentence} ({})", chain(error)),
        None => chain(error),
    }
}

/// What is wrong and what to do, when the error is one this module knows.
pub fn explain(error: &(dyn Error + 'static), dialed: &Dialed) -> Option<String> {
    let all = causes(error);
    if let Some(tls) = all.iter().find_map(|e| e.downcast_ref::<rustls::Error>()) {
        return tls_error(tls, dialed);
    }
    let kinds: Vec<io::ErrorKind> = all
        .iter()
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .map(io::Error::kind)
        .collect();
    let text = chain(error).to_lowercase();
    io_error(&kinds, &text, dialed)
}

/// Every error in the chain; an io::Error's own payload too (its `source` skips it), which may
/// be another io::Error (hyper-util wraps tokio-rustls's).
fn causes<'a>(error: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut all = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        all.push(e);
        next = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => e.source(),
        };
    }
    all
}

fn tls_error(error: &rustls::Error, d: &Dialed) -> Option<String> {
    let who = d.who();
    Some(match error {
        rustls::Error::InvalidCertificate(cert) => return certificate_error(cert, d),
        rustls::Error::AlertReceived(alert) => alert_received(*alert, d),
        rustls::Error::NoCertificatesPresented => format!(
            "{who} sent no certificate: give it one ({})",
            d.serve_with()
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!(
                "{who} does not speak TLS (it answered with something else, plain {} most \
                 likely): {}",
                if d.peer == Peer::Server {
                    "HTTP"
                } else {
                    "TCP"
                },
                plain_fix(d)
            )
        }
        _ => return None,
    })
}

/// What to do when TLS was spoken to a plain port.
fn plain_fix(d: &Dialed) -> String {
    match d.peer {
        Peer::Server => format!("use http://{}", d.addr()),
        Peer::Broker => format!(
            "give --mqtt-broker {} without mqtts://, or the broker's TLS port (8883 as a rule)",
            d.addr()
        ),
        Peer::Database => "drop sslmode=require from --sink, or turn ssl on in the database".into(),
    }
}

fn alert_received(alert: AlertDescription, d: &Dialed) -> String {
    let who = d.who();
    match alert {
        AlertDescription::CertificateRequired
        | AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::AccessDenied => format!(
            "{who} refused this client in the TLS handshake ({alert:?}): it asks for a client \
             certificate, which this client does not send; turn client certificates off there \
             (mosquitto: require_certificate false)"
        ),
        AlertDescription::ProtocolVersion | AlertDescription::HandshakeFailure => format!(
            "{who} and this client share no TLS version or cipher ({alert:?}): it must offer TLS \
             1.2 or 1.3 with an ECDHE cipher (this client has no older ones)"
        ),
        other => {
            format!("{who} ended the TLS handshake with the alert {other:?}: its log says why")
        }
    }
}

fn certificate_error(error: &CertificateError, d: &Dialed) -> Option<String> {
    let who = d.who();
    let ca = &d.ca_setting;
    Some(match error {
        CertificateError::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            format!(
                "{who} presents a CA certificate as its own (one made by openssl req -x509 \
                 alone is a CA: basicConstraints CA:TRUE); a TLS client accepts only a leaf \
                 certificate signed by a CA. Make a CA and a leaf signed by it: {}; serve the \
                 leaf ({}) and trust the CA here: {ca} ca.crt",
                d.make_ca_and_leaf(),
                d.serve_with()
            )
        }
        CertificateError::UnknownIssuer => format!(
            "{who} presents a certificate signed by a CA this client does not trust: give the \
             certificate of the CA that signed it with {ca} ca.crt (a self-signed leaf will not \
             do; make a CA and a leaf: {})",
            d.make_ca_and_leaf()
        ),
        CertificateError::NotValidForName => format!(
            "{who} presents a certificate that does not name {host}: dial a name it holds, or \
             make its certificate with -addext subjectAltName={san}",
            host = d.host,
            san = d.san()
        ),
        CertificateError::NotValidForNameContext { presented, .. } => format!(
            "{who} presents a certificate for {names}, not for {host} as dialed: dial a name it \
             holds, or make its certificate with -addext subjectAltName={san}",
            names = names(presented),
            host = d.host,
            san = d.san()
        ),
        CertificateError::Expired => format!(
            "{who} presents an expired certificate: make a new one ({}), or check this machine's \
             clock (`date`)",
            d.serve_with()
        ),
        CertificateError::ExpiredContext { time, not_after } => format!(
            "{who} presents a certificate that expired on {} (it is {} here): make a new one and \
             serve it ({}), or check this machine's clock (`date`)",
            date(not_after.as_secs()),
            date(time.as_secs()),
            d.serve_with()
        ),
        CertificateError::NotValidYet => format!(
            "{who} presents a certificate not valid yet: this machine's clock may be behind \
             (`date`; set it, or run an NTP client)"
        ),
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "{who} presents a certificate valid only from {} (it is {} here): this machine's \
             clock may be behind (`date`; set it, or run an NTP client)",
            date(not_before.as_secs()),
            date(time.as_secs())
        ),
        CertificateError::BadSignature => format!(
            "{who} presents a certificate whose signature does not verify against its issuer's \
             key: it was not signed by the CA in {ca}, or its chain is mixed up; serve the leaf \
             and the CAs of one chain"
        ),
        #[allow(deprecated)]
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => format!(
            "{who} presents a certificate signed with an algorithm this client refuses (SHA-1 or \
             MD5, say): make it again with ECDSA P-256 or RSA and SHA-256: {}",
            d.make_ca_and_leaf()
        ),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            format!(
                "{who} presents a certificate not meant for a TLS server (its extendedKeyUsage \
                 lacks serverAuth): make it with -addext extendedKeyUsage=serverAuth, or without \
                 that extension"
            )
        }
        _ => return None,
    })
}

fn io_error(kinds: &[io::ErrorKind], text: &str, d: &Dialed) -> Option<String> {
    use io::ErrorKind::*;
    let (who, addr) = (d.who(), d.addr());
    let has = |k: io::ErrorKind| kinds.contains(&k);
    if has(ConnectionRefused) {
        let what = match d.peer {
            Peer::Server => "is roamkv serve running, and on this port (its --listen)?",
            Peer::Broker => "is the MQTT broker running, and on this port (--mqtt-broker)?",
            Peer::Database => "is the database running, and on this port (--sink)?",
        };
        return Some(format!("nothing listens at {addr}: {what}"));
    }
    if text.contains("dns error") || text.contains("failed to lookup address") {
        return Some(format!(
            "the name {} does not resolve (DNS): check its spelling, /etc/hosts and the DNS \
             server, or give the IP address",
            d.host
        ));
    }
    if has(TimedOut) || text.contains("timed out") || text.contains("deadline has elapsed") {
        return Some(format!(
            "{who} did not answer in time: the host may be down, or a firewall drops the \
             packets; check the address and that the port is open (`nc -vz {} {}`)",
            d.host, d.port
        ));
    }
    if has(HostUnreachable) || has(NetworkUnreachable) {
        return Some(format!(
            "no route to {}: check the address and this machine's network",
            d.host
        ));
    }
    let closed = has(UnexpectedEof)
        || has(ConnectionReset)
        || has(ConnectionAborted)
        || text.contains("connection closed before message completed");
    if closed && d.tls && text.contains("handshake") {
        return Some(format!(
            "{who} closed the connection in the TLS handshake: it may speak plain {}: {}",
            if d.peer == Peer::Server {
                "HTTP"
            } else {
                "TCP"
            },
            plain_fix(d)
        ));
    }
    if (closed || text.contains("invalid http version")) && !d.tls && d.peer == Peer::Server {
        return Some(format!(
            "{who} did not answer in plain HTTP: it may speak HTTPS: use https://{addr} (with \
             {} ca.crt when its CA is not the system's)",
            d.ca_setting
        ));
    }
    None
}

/// What a refusal of the token means for the CLI (`--token-file`, `$ROAMKV_TOKEN`), from the
/// status and the server's message; None for other answers.
pub fn token_refusal(status: u16, message: &str) -> Option<String> {
    match status {
        401 if message.contains("not valid") => Some(
            "the server refused the token given: it is neither the server's read-write token \
             (its --auth-token-file) nor its read-only one (--read-only-token-file); check the \
             file given with --token-file or $ROAMKV_TOKEN"
                .into(),
        ),
        401 => Some(
            "the server wants a bearer token and none was given: give the server's token with \
             --token-file FILE or $ROAMKV_TOKEN (the read-only token is enough to read)"
                .into(),
        ),
        403 if message.contains("only read") => Some(
            "the token given is the server's read-only token, which may only read: this needs \
             its read-write token (the file of its --auth-token-file), given with --token-file \
             FILE or $ROAMKV_TOKEN"
                .into(),
        ),
        _ => None,
    }
}

/// The names a certificate holds, as rustls shows them (`DnsName("a.example")`) unwrapped.
fn names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no name".into();
    }
    let bare = |n: &String| match (n.find('"'), n.rfind('"')) {
        (Some(a), Some(b)) if b > a => n[a + 1..b].to_string(),
        _ => n.clone(),
    };
    presented.iter().map(bare).collect::<Vec<_>>().join(", ")
}

/// A certificate's date as a reader checks it against `date -u` (RFC 3339, UTC).
fn date(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Dialed {
        Dialed {
            host: "127.0.0.1".into(),
            port: 59880,
            tls: true,
            peer: Peer::Server,
            ca_setting: "--ca-file".into(),
        }
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(0), "1970-01-01T00:00:00Z");
        assert_eq!(date(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(date(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn a_rustls_error_inside_an_io_error_is_found() {
        let tls = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        let io = io::Error::new(io::ErrorKind::InvalidData, tls);
        let text = explained(&io, &server());
        assert!(text.contains("--ca-file ca.crt"), "{text}");
        assert!(
            text.ends_with("(invalid peer certificate: UnknownIssuer)"),
            "{text}"
        );
    }

    #[test]
    fn refused_names_the_address_and_unknown_errors_pass_through() {
        let io = io::Error::new(io::ErrorKind::ConnectionRefused, "Connection refused");
        let text = explained(&io, &server());
        assert!(
            text.starts_with("nothing listens at 127.0.0.1:59880"),
            "{text}"
        );
        let other = io::Error::other("something else");
        assert_eq!(explained(&other, &server()), "something else");
    }
}
