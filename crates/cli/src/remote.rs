//! A running `roamkv serve`, as the CLI reaches it: its native API over HTTP or HTTPS, with the
//! bearer token from a file or `$ROAMKV_TOKEN`. Used by `--server` on the reading commands and
//! `depart`, and by `roamkv handoff`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use roamkv_sink::explain::{self, Dialed, Peer};
use serde_json::Value;

/// Where the server is and how to be let in (flattened into the commands that can ask one).
#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Ask a running `roamkv serve` instead of opening a data directory (which its LOCK
    /// refuses while it runs): `http://host:port` or `https://host:port`.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// File holding the server's bearer token (the read-only token is enough to read); without
    /// it, $ROAMKV_TOKEN if set.
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA that signed an https server's certificate (the system's CAs are
    /// trusted too).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub ca_file: Option<PathBuf>,
}

/// One server's native API.
pub struct Remote {
    /// `http(s)://host:port`, without a trailing slash.
    pub base: String,
    token: Option<String>,
    client: reqwest::blocking::Client,
    /// For answers that stream for as long as they need (a backup): no total timeout.
    streaming: reqwest::blocking::Client,
    /// What a failed connection is explained against (roamkv_sink::explain).
    dialed: Dialed,
}

/// How long one request may take; a scan is many requests, one page each.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Remote {
    pub fn connect(
        server: &str,
        token_file: Option<&std::path::Path>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Remote, String> {
        let dialed = dialed(server).ok_or_else(|| {
            format!("--server {server:?} is not a URL: give http://host:port or https://host:port")
        })?;
        let token = match token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--token-file {}: {e}", path.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("ROAMKV_TOKEN").ok().filter(|t| !t.is_empty()),
        };
        let tls = roamkv_sink::tls::client_config(ca_file, "--ca-file")?;
        let client = reqwest::blocking::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .use_preconfigured_tls(tls.clone())
            .build()
            .map_err(|e| format!("setting up the HTTP client: {e}"))?;
        let streaming = reqwest::blocking::Client::builder()
            .connect_timeout(REQUEST_TIMEOUT)
            .timeout(None)
            .use_preconfigured_tls(tls)
            .build()
            .map_err(|e| format!("setting up the HTTP client: {e}"))?;
        Ok(Remote {
            base: server.trim_end_matches('/').to_string(),
            token,
            client,
            streaming,
            dialed,
        })
    }

    pub fn from_args(args: &RemoteArgs) -> Result<Option<Remote>, String> {
        args.server
            .as_deref()
            .map(|server| {
                Remote::connect(server, args.token_file.as_deref(), args.ca_file.as_deref())
            })
            .transpose()
    }

    /// Sends a request to `/api/roamkv/v1{path}`; (status, JSON body or Null).
    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}/api/roamkv/v1{path}", self.base);
        let mut request = self.client.request(method, &url).query(query);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().map_err(|e| self.failed(&url, e))?;
        let status = answer.status().as_u16();
        let json = answer.json().unwrap_or(Value::Null);
        Ok((status, json))
    }

    /// A POST to `/api/roamkv/v1{path}` whose answer is read as it streams (no total timeout);
    /// any answer but 200 is an error carrying the server's message.
    pub fn post_streaming(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<reqwest::blocking::Response, String> {
        let url = format!("{}/api/roamkv/v1{path}", self.base);
        self.streaming(self.streaming.post(&url).json(body), &url)
    }

    /// A GET of `/api/roamkv/v1{path}` read as it streams, as `post_streaming`.
    pub fn get_streaming(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<reqwest::blocking::Response, String> {
        let url = format!("{}/api/roamkv/v1{path}", self.base);
        self.streaming(self.streaming.get(&url).query(query), &url)
    }

    fn streaming(
        &self,
        mut request: reqwest::blocking::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::blocking::Response, String> {
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let answer = request.send().map_err(|e| self.failed(url, e))?;
        let status = answer.status().as_u16();
        if status == 200 {
            Ok(answer)
        } else {
            Err(refused(url, status, &answer.json().unwrap_or(Value::Null)))
        }
    }

    /// A request that got no answer, said as what is wrong and what to do.
    fn failed(&self, url: &str, error: reqwest::Error) -> String {
        format!(
            "{url}: {}",
            explain::explained(&error.without_url(), &self.dialed)
        )
    }

    /// A GET that must answer 200; any other answer is an error carrying the server's message.
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, String> {
        let (status, body) = self.call(reqwest::Method::GET, path, query, None)?;
        if status == 200 {
            Ok(body)
        } else {
            Err(refused(
                &format!("{}/api/roamkv/v1{path}", self.base),
                status,
                &body,
            ))
        }
    }
}

/// "WHAT: what is wrong and what to do (STATUS: the server's message)" for a refused token, else
/// "WHAT: STATUS: the server's message" (or the body, when it has no message).
pub fn refused(what: &str, status: u16, body: &Value) -> String {
    let why = body["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_string);
    match explain::token_refusal(status, &why) {
        Some(sentence) => format!("{what}: {sentence} ({status}: {why})"),
        None => format!("{what}: {status}: {why}"),
    }
}

/// What `--server` dials, for explaining a failed connection; None when it is not an http(s) URL.
fn dialed(server: &str) -> Option<Dialed> {
    let url = reqwest::Url::parse(server).ok()?;
    let tls = match url.scheme() {
        "https" => true,
        "http" => false,
        _ => return None,
    };
    Some(Dialed {
        host: url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: url.port_or_known_default()?,
        tls,
        peer: Peer::Server,
        ca_setting: "--ca-file".into(),
    })
}
