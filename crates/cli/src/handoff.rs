//! `roamkv handoff`: asks a running `roamkv serve` (edge A) to hand a device to another edge (B),
//! and follows it until it is done; or calls a handoff off (`--abort`: the device stays at A and
//! takes writes again). docs/SERVER.md, "Handoff".

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use crate::remote::{Remote, refused};

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
    /// PEM file of the CA that signed an https server's certificate.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

pub fn run(args: &HandoffArgs) -> Result<(), String> {
    let api = Remote::connect(
        &args.server,
        args.token_file.as_deref(),
        args.ca_file.as_deref(),
    )?;
    if args.abort {
        return abort(&api, &args.device);
    }
    let to = args
        .to
        .as_deref()
        .expect("clap requires --to without --abort");
    let path = format!("/devices/{}/handoff", args.device);
    let (status, body) = api.call(reqwest::Method::POST, &path, &[], Some(json!({"to": to})))?;
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
fn follow(api: &Remote, id: &str, timeout: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut shown = String::new();
    loop {
        let (status, body) =
            api.call(reqwest::Method::GET, &format!("/handoffs/{id}"), &[], None)?;
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

fn abort(api: &Remote, device: &str) -> Result<(), String> {
    let (status, body) = api.call(reqwest::Method::GET, "/handoffs", &[], None)?;
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
    let (status, body) = api.call(
        reqwest::Method::DELETE,
        &format!("/handoffs/{id}"),
        &[],
        None,
    )?;
    if status != 200 {
        return Err(refused("calling the handoff off", status, &body));
    }
    println!(
        "handoff {id} of {device} called off: it takes writes at {} again",
        api.base
    );
    Ok(())
}
