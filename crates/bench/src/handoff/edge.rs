//! An edge of `roamkv bench handoff`: `roamkv serve` in its node's network namespace, on its own
//! ext4 (a loop device), killed with SIGKILL and started again on the same data when a round
//! says so; and the HTTP calls the harness makes to it (from the load's namespace).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roamkv_testbed::fixture::{Fixture, FsSpec};

use super::net::{Net, Node};
use crate::error::{BenchError, Result};

/// The port each edge listens on (in its own namespace).
pub const EDGE_PORT: u16 = 7000;
/// How long a (re)started server may take to answer /ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

pub struct NetEdge {
    pub node: Node,
    netns: String,
    fixture: Fixture,
    child: Option<Child>,
    sink_url: Option<String>,
    log: PathBuf,
    api: Api,
    /// For looks that must not hold the harness up while a link is cut: 1 s at most.
    glance: Api,
}

impl NetEdge {
    /// A new 8 GiB ext4 and the server on it, in `node`'s namespace, sinking to `sink_url`.
    pub fn start(net: &Net, node: Node, sink_url: Option<String>, out: &Path) -> Result<NetEdge> {
        let mut edge = NetEdge {
            node,
            netns: net.namespace(node),
            fixture: Fixture::create(FsSpec::Ext4, 8 << 30)?,
            child: None,
            sink_url,
            log: out.join(format!("edge-{}.log", node.name())),
            api: Api::new(Duration::from_secs(30)),
            glance: Api::new(Duration::from_secs(1)),
        };
        edge.spawn()?;
        Ok(edge)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.node.ip(), EDGE_PORT))
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn fixture(&self) -> &Fixture {
        &self.fixture
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the server and waits until it answers /ready; when it did.
    pub fn spawn(&mut self) -> Result<Instant> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| BenchError::io("opening", &self.log, e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| BenchError::io("opening", &self.log, e))?;
        let mut command = Command::new(super::super::edge_rig::roamkv_exe()?);
        // Readings at ts 1, 2, ... (1970): the default retention would delete them.
        command
            .env("ROAMKV_RETENTION_DEFAULT_H", "0")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .args(["serve", "--listen"])
            .arg(self.addr().to_string())
            .arg("--data")
            .arg(self.fixture.mount_dir().join("data"))
            // No auth token: the namespaces' network is private to the harness.
            .arg("--insecure");
        if let Some(url) = &self.sink_url {
            command.arg("--sink").arg(url);
        }
        roamkv_testbed::netns::enter_in_child(&mut command, &self.netns)?;
        let child = command
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|e| BenchError::os("starting roamkv serve", e))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = self
                .glance
                .call("GET", &format!("{}/ready", self.url()), None)
            {
                return Ok(Instant::now());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || started.elapsed() > READY_WITHIN {
                let tail = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = tail.lines().rev().take(8).collect();
                return Err(BenchError::Run(format!(
                    "edge {} not ready ({exited:?}); its log ends: {}",
                    self.node.name(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (SIGTERM, waits) and starts it again sinking to `url`.
    pub fn restart_with_sink(&mut self, url: String) -> Result<Instant> {
        self.terminate();
        self.sink_url = Some(url);
        self.spawn()
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    /// SIGKILL, and waits for the exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.pid().map_or(0.0, |pid| {
            roamkv_testbed::command::process_cpu_seconds(&format!("/proc/{pid}/stat"))
        })
    }

    /// A call to this edge under `/api/roamkv/v1`: (status, body as JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<(u16, serde_json::Value)> {
        self.api
            .call(method, &format!("{}/api/roamkv/v1{path}", self.url()), body)
    }

    /// Every reading of `device` here, (ts -> value), by paged scans (empty if it is unknown),
    /// and how many keys a scan answered more than once (a visible duplicate).
    pub fn readings(&self, device: &str) -> Result<(BTreeMap<i64, String>, u64)> {
        let mut out = BTreeMap::new();
        let mut repeated = 0;
        let mut after = String::new();
        loop {
            let path = format!("/devices/{device}/readings?limit=10000{after}");
            let (status, page) = self.call("GET", &path, None)?;
            if status == 404 {
                return Ok((out, repeated));
            }
            if status != 200 {
                return Err(BenchError::Run(format!(
                    "{path} at edge {}: {status} {page}",
                    self.node.name()
                )));
            }
            for r in page["readings"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let (Some(ts), Some(value)) = (r["ts_ns"].as_i64(), r["value"].as_str()) else {
                    return Err(BenchError::Run(format!(
                        "a reading without ts or value: {r}"
                    )));
                };
                if out.insert(ts, value.to_string()).is_some() {
                    repeated += 1;
                }
            }
            match page["next"].as_str() {
                Some(next) => after = format!("&after={next}"),
                None => return Ok((out, repeated)),
            }
        }
    }

    /// Hands `device` to `to_url`; the handoff's id.
    pub fn hand(&self, device: &str, to_url: &str) -> Result<String> {
        let (status, body) = self.call(
            "POST",
            &format!("/devices/{device}/handoff"),
            Some(format!("{{\"to\":\"{to_url}\"}}")),
        )?;
        if status != 202 {
            return Err(BenchError::HttpStatus {
                request: format!("handoff of {device} at edge {}", self.node.name()),
                status,
                body: body.to_string(),
            });
        }
        Ok(body["id"].as_str().unwrap_or_default().to_string())
    }

    /// The record of handoff `id` here (`handoff` of `GET /handoffs/{id}`).
    pub fn record(&self, id: &str) -> Result<serde_json::Value> {
        self.record_with(&self.api, id)
    }

    /// `record`, given up after 1 s (an error: the edge is down or cut off).
    pub fn glance_at_record(&self, id: &str) -> Result<serde_json::Value> {
        self.record_with(&self.glance, id)
    }

    fn record_with(&self, api: &Api, id: &str) -> Result<serde_json::Value> {
        let url = format!("{}/api/roamkv/v1/handoffs/{id}", self.url());
        let (status, body) = api.call("GET", &url, None)?;
        if status != 200 {
            return Err(BenchError::Run(format!(
                "handoff {id} at edge {}: {status} {body}",
                self.node.name()
            )));
        }
        Ok(body["handoff"].clone())
    }
}

impl Drop for NetEdge {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Blocking HTTP calls with a timeout (reqwest: the workspace's client).
pub struct Api {
    client: reqwest::blocking::Client,
}

impl Api {
    /// Made in the namespace it will call from (its connections are made there).
    pub fn new(timeout: Duration) -> Api {
        Api {
            client: reqwest::blocking::Client::builder()
                .timeout(timeout)
                .connect_timeout(Duration::from_secs(1))
                .build()
                .expect("an HTTP client without TLS builds"),
        }
    }

    pub fn call(
        &self,
        method: &str,
        url: &str,
        body: Option<String>,
    ) -> Result<(u16, serde_json::Value)> {
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| BenchError::Run(format!("method {method}: {e}")))?;
        let mut request = self.client.request(method, url);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request
            .send()
            .map_err(|e| BenchError::Run(format!("{url}: {e}")))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .map_err(|e| BenchError::Run(format!("{url}: {e}")))?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        ))
    }
}
