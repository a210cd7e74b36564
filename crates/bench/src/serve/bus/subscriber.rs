//! The subscriber of a bus row: `roamkv serve --mqtt-broker` on a fresh data directory, or
//! mosquitto's own `mosquitto_sub` (which writes nothing: the path's ceiling); how much each
//! has taken, its CPU, and the count after the run.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use roamkv_engine::{Durability, Engine, Options};
use roamkv_testbed::command::process_cpu_seconds;
use roamkv_testbed::mosquitto::Mosquitto;
use roamkv_testbed::serve::{ServeProcess, http_call};
use rumqttc::QoS;

use crate::error::{BenchError, Result};
use crate::serve::targets::{Target, count_engine};

/// What roamkv subscribes to by default (`--mqtt-topic`), and so mosquitto_sub too.
const TOPIC_FILTER: &str = "edgex/events/device/#";
/// roamkv's default client id (`--mqtt-client-id`).
const ROAMKV_CLIENT_ID: &str = "roamkv-core-data";
const CEILING_CLIENT_ID: &str = "bench-ceiling";
/// How long a subscriber gets to come up and subscribe.
const START_WAIT: Duration = Duration::from_secs(30);

/// The subscriber under test: roamkv, or mosquitto's own.
pub enum Subscriber {
    Roamkv(ServeProcess),
    Ceiling(CeilingSubscriber),
}

/// `mosquitto_sub` printing one byte a message, which a thread here counts; killed on drop.
pub struct CeilingSubscriber {
    child: Child,
    messages: Arc<AtomicU64>,
}

impl Drop for CeilingSubscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Subscriber {
    /// Starts the subscriber of `target` on `broker` and waits until it has subscribed.
    pub fn start(
        target: Target,
        broker: &Mosquitto,
        data: &Path,
        durability: Durability,
    ) -> Result<Subscriber> {
        let qos = target.bus_qos().unwrap_or(QoS::AtLeastOnce);
        let (subscriber, client_id) = match target {
            Target::RoamkvBusQos0 | Target::RoamkvBusQos1 => {
                let exe = std::env::current_exe()
                    .map_err(|e| BenchError::os("finding the roamkv binary", e))?;
                let server = ServeProcess::start(&exe, data, |c| {
                    c.env("RUST_LOG", "warn")
                        .args(["--durability", durability_flag(durability)])
                        .args(["--mqtt-broker", &format!("127.0.0.1:{}", broker.port)]);
                });
                (Subscriber::Roamkv(server), ROAMKV_CLIENT_ID)
            }
            _ => (
                Subscriber::Ceiling(ceiling(broker.port, qos)?),
                CEILING_CLIENT_ID,
            ),
        };
        if !broker.wait_subscribed(client_id, TOPIC_FILTER, START_WAIT) {
            return Err(BenchError::Run(format!(
                "{client_id} did not subscribe to {TOPIC_FILTER} within {START_WAIT:?}"
            )));
        }
        Ok(subscriber)
    }

    /// Messages' readings it has taken so far.
    pub fn readings_taken(&self, readings_per_event: usize) -> Result<u64> {
        match self {
            Subscriber::Roamkv(server) => mqtt_readings_written(&server.addr),
            Subscriber::Ceiling(c) => {
                Ok(c.messages.load(Ordering::Relaxed) * readings_per_event as u64)
            }
        }
    }

    pub fn cpu_seconds(&self) -> f64 {
        let pid = match self {
            Subscriber::Roamkv(server) => server.child.id(),
            Subscriber::Ceiling(c) => c.child.id(),
        };
        process_cpu_seconds(&format!("/proc/{pid}/stat"))
    }

    /// Stops it and counts what it holds: roamkv's data directory opened by the engine, as
    /// the HTTP rows count theirs; the messages mosquitto_sub printed.
    pub fn finish(self, clients: usize, readings_per_event: usize) -> Result<u64> {
        match self {
            Subscriber::Roamkv(mut server) => {
                server.signal(libc::SIGTERM);
                let status = server.wait_exit(120);
                if !status.success() {
                    return Err(BenchError::Run(format!(
                        "roamkv serve exited with {status}: {}",
                        server.log_so_far()
                    )));
                }
                let data = server.data().to_path_buf();
                let options = Options {
                    durability: Durability::Sync,
                    ..Options::default()
                };
                let engine = Engine::open(&data, options).map_err(|e| {
                    BenchError::step(format!("opening {} after the run", data.display()), e)
                })?;
                let count = count_engine(&engine, clients);
                engine
                    .close()
                    .map_err(|e| BenchError::step("closing the engine", e))?;
                count
            }
            Subscriber::Ceiling(c) => {
                Ok(c.messages.load(Ordering::Relaxed) * readings_per_event as u64)
            }
        }
    }
}

fn durability_flag(durability: Durability) -> &'static str {
    match durability {
        Durability::Sync => "sync",
        _ => "none",
    }
}

/// `mosquitto_sub` as roamkv subscribes (the same filter, a persistent session, the QoS of
/// the run), printing one byte per message (`-F x -N`), counted by a thread here.
fn ceiling(port: u16, qos: QoS) -> Result<CeilingSubscriber> {
    let mut child = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", "-i"])
        .arg(CEILING_CLIENT_ID)
        .args(["-q", if qos == QoS::AtMostOnce { "0" } else { "1" }])
        .args(["-t", TOPIC_FILTER, "-F", "x", "-N"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::os("starting mosquitto_sub", e))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let messages = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&messages);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        while let Ok(n @ 1..) = stdout.read(&mut buffer) {
            counted.fetch_add(n as u64, Ordering::Relaxed);
        }
    });
    Ok(CeilingSubscriber { child, messages })
}

/// roamkv's `roamkv_ingested_readings_total{source="mqtt"}`, from its /metrics.
fn mqtt_readings_written(addr: &str) -> Result<u64> {
    let (status, body) = http_call(addr, "GET", "/metrics", "");
    if status != 200 {
        return Err(BenchError::Run(format!(
            "GET /metrics from {addr}: {status} {body}"
        )));
    }
    let line = r#"roamkv_ingested_readings_total{source="mqtt"} "#;
    Ok(body
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}
