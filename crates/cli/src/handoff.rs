//! `roamkv handoff`: asks a running `roamkv serve` (edge A) to hand a device to another edge (B),
//! and follows it until it is done; or calls a handoff off (`--abort`: the device stays at A and
//! takes writes again). docs/SERVER.md, "Handoff".

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};

#[derive(Args, Debug)]
pub struct HandoffArgs {
    /// The edge that has the device now, `http://host:port`.
    #[arg(long)]
    pub server: String,
    #[arg(long)]
    pub device: String,
    /// The edge to hand it to, `http://host:port` (as that edge is reached from the first).
    #[arg(long, required_unless_present = "abort")]
    pub to: Option<String>,
    /// Call the device's handoff off instead (before the receiver committed it).
    #[arg(long, conflicts_with = "to")]
    pub abort: bool,
    /// Return once the handoff is recorded, without following it.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up following after this many seconds (the handoff goes on in the server).
    #[arg(long, default_value_t = 600)]
    pub timeout_s: u64,
    /// File holding the server's bearer token (also $ROAMKV_TOKEN).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

struct Api {
    base: String,
    token: Option<String>,
    client: reqwest::blocking::Client,
}

impl Api {
    fn new(args: &HandoffArgs) -> Result<Api, String> {
        let token = match &args.token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("reading {}: {e}", path.display()))?
                    .trim()
                    .to_string(),
            ),
            None => std::env::var("ROAMKV_TOKEN").ok(),
        };
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Api {
            base: args.server.trim_end_matches('/').to_string(),
            token,
            client,
        })
    }

    /// Sends a request; (status, JSON body).
    fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let url = format!("{}/api/roamkv/v1{path}", self.base);
        let mut request = self.client.request(method, &url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().map_err(|e| format!("{url}: {e}"))?;
        let status = answer.status().as_u16();
        let json = answer.json().unwrap_or(Value::Null);
        Ok((status, json))
    }
}

fn refused(what: &str, status: u16, body: &Value) -> String {
    let why = body["message"]
        .as_str()
        .map_or_else(|| body.to_string(), str::to_string);
    format!("{what}: {status}: {why}")
}

pub fn run(args: &HandoffArgs) -> Result<(), String> {
    let api = Api::new(args)?;
    if args.abort {
        return abort(&api, &args.device);
    }
    let to = args
        .to
        .as_deref()
        .expect("clap requires --to without --abort");
    let path = format!("/devices/{}/handoff", args.device);
    let (status, body) = api.call(reqwest::Method::POST, &path, Some(json!({"to": to})))?;
    if status != 202 {
        return Err(refused("the handoff was refused", status, &body));
    }
    let id = body["id"].as_str().unwrap_or_default().to_string();
    println!(
        "handoff {id}: {} to {to}, epoch {}",
        args.device, body["epoch"]
    );
    if args.no_wait {
        return Ok(());
    }
    follow(&api, &id, Duration::from_secs(args.timeout_s))
}

/// Prints the handoff's progress until it is done (or called off, or the time is up).
fn follow(api: &Api, id: &str, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut shown = String::new();
    loop {
        let (status, body) = api.call(reqwest::Method::GET, &format!("/handoffs/{id}"), None)?;
        if status != 200 {
            return Err(refused("following the handoff", status, &body));
        }
        let h = &body["handoff"];
        let line = format!(
            "{}: {} chunks, {} readings, {} bytes{}",
            h["state"].as_str().unwrap_or("?"),
            h["chunks"],
            h["readings"],
            h["bytes"],
            h["last_error"]
                .as_str()
                .map(|e| format!(" (retrying: {e})"))
                .unwrap_or_default()
        );
        if line != shown {
            println!("{line}");
            shown = line;
        }
        match h["state"].as_str() {
            Some("done") => return Ok(()),
            Some("aborted") => return Err(format!("handoff {id} was called off")),
            _ => {}
        }
        if started.elapsed() > timeout {
            return Err(format!(
                "handoff {id} is not done after {} s (it goes on in the server)",
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn abort(api: &Api, device: &str) -> Result<(), String> {
    let (status, body) = api.call(reqwest::Method::GET, "/handoffs", None)?;
    if status != 200 {
        return Err(refused("listing handoffs", status, &body));
    }
    let active = body["out"].as_array().and_then(|outs| {
        outs.iter().find(|h| {
            h["device"] == device && !matches!(h["state"].as_str(), Some("done" | "aborted"))
        })
    });
    let Some(handoff) = active else {
        return Err(format!(
            "{device:?} is not being handed off from {}",
            api.base
        ));
    };
    let id = handoff["id"].as_str().unwrap_or_default();
    let (status, body) = api.call(reqwest::Method::DELETE, &format!("/handoffs/{id}"), None)?;
    if status != 200 {
        return Err(refused("calling the handoff off", status, &body));
    }
    println!(
        "handoff {id} of {device} called off: it takes writes at {} again",
        api.base
    );
    Ok(())
}
