//! The peers `roamkv bench serve` loads beside roamkv: real servers, started fresh on loopback
//! ports under the run's directory for every run, stopped (SIGTERM) after it, and counted back.
//! Both take the same InfluxDB line protocol from the same client (`load::influx_lines`: one
//! point per reading, device, resource, profile and source as tags, the value, value type,
//! units and ids as fields, the origin in ns):
//!
//! - **InfluxDB 1.6** (Debian's `influxdb`): `/write`, its WAL fsync'd before every answer
//!   (`wal-fsync-delay = "0s"`, equal to roamkv's `sync`; it has no unsynced mode, so it is left
//!   out of `--durability none` runs); counted with `SELECT count(value)`.
//! - **QuestDB 9.2** (`org.questdb:questdb` from Maven Central on the JDK; the time-series
//!   database people pick today for fast ingest): the line protocol over HTTP on its `/write`,
//!   each request one transaction; `cairo.commit.mode=sync` (fsync at every commit) against
//!   roamkv's `sync`, its default (`nosync`: the OS writes back) against `none`. Counted with
//!   `SELECT count()` once its WAL is applied (`wal_tables()`: writer = sequencer transaction).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};
use crate::serve::load::HttpClient;

/// What to tell someone who runs the benchmark without InfluxDB.
pub const INFLUXDB_MISSING: &str = "InfluxDB 1.6 is not installed (no `influxd` on PATH): on \
     Debian, `apt-get install influxdb` (the package is InfluxDB 1.6); or leave it out with \
     `--engines roamkv,roamkv-binary,questdb,engine`";

pub fn influxd_installed() -> bool {
    Command::new("influxd")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// influxd's settings: everything on loopback under `dir`, the WAL fsync'd on every write,
/// background services that would compete for the CPU (monitor, retention, precreation,
/// continuous queries, reporting) off.
fn influxdb_config(dir: &Path, http_port: u16, rpc_port: u16) -> String {
    let d = dir.display();
    format!(
        r#"reporting-disabled = true
bind-address = "127.0.0.1:{rpc_port}"
[meta]
  dir = "{d}/meta"
[data]
  dir = "{d}/data"
  wal-dir = "{d}/wal"
  wal-fsync-delay = "0s"
  index-version = "inmem"
  cache-max-memory-size = "4g"
  query-log-enabled = false
  trace-logging-enabled = false
[retention]
  enabled = false
[shard-precreation]
  enabled = false
[monitor]
  store-enabled = false
[subscriber]
  enabled = false
[continuous_queries]
  enabled = false
[http]
  enabled = true
  bind-address = "127.0.0.1:{http_port}"
  auth-enabled = false
  log-enabled = false
  write-tracing = false
  pprof-enabled = false
[logging]
  level = "warn"
"#
    )
}

/// How to start a peer: its command, the loopback port of its HTTP endpoint, its log file.
pub struct Launch {
    pub command: Command,
    pub http_port: u16,
    pub log_path: PathBuf,
}

/// influxd with its generated config under `dir`.
pub fn influxdb_launch(dir: &Path) -> Result<Launch> {
    let http_port = free_port()?;
    let rpc_port = free_port()?;
    let config = dir.join("influxdb.conf");
    std::fs::write(&config, influxdb_config(dir, http_port, rpc_port))
        .map_err(|e| BenchError::io("writing", &config, e))?;
    let mut command = Command::new("influxd");
    command.arg("-config").arg(&config);
    Ok(Launch {
        command,
        http_port,
        log_path: dir.join("influxd.log"),
    })
}

/// The database the load writes to (InfluxDB 1.6 makes none by itself).
pub fn influxdb_create_database(addr: SocketAddr) -> Result<()> {
    let created = HttpClient::new(addr).request(
        "POST",
        "/query?q=CREATE%20DATABASE%20bench",
        "text/plain",
        b"",
    )?;
    if created.status != 200 {
        return Err(BenchError::Run(format!(
            "influxd refused CREATE DATABASE: {}",
            String::from_utf8_lossy(&created.body)
        )));
    }
    Ok(())
}

/// Waits (at most 60 s) for a started peer's `/ping` to answer 204; an error if it exits or
/// does not answer in time (the caller stops it).
pub fn wait_for_ping(
    name: &str,
    child: &mut Child,
    addr: SocketAddr,
    log_path: &Path,
) -> Result<()> {
    let mut client = HttpClient::new(addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(answer) = client.request("GET", "/ping", "text/plain", b"")
            && answer.status == 204
        {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BenchError::Run(format!(
                "{name} exited ({status}) at start; its log: {}",
                std::fs::read_to_string(log_path).unwrap_or_default()
            )));
        }
        if Instant::now() > deadline {
            return Err(BenchError::Run(format!(
                "{name} did not answer /ping within 60 s; its log: {}",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A port nobody listens on now (bound, then released; the peer binds it right after).
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BenchError::os("finding a free port", e))
}

/// The QuestDB release the bench runs (Maven Central's `org.questdb:questdb`).
pub const QUESTDB_VERSION: &str = "9.2.0";

/// Where the QuestDB jar is looked for: `ROAMKV_QUESTDB_JAR`, else where
/// `scripts/install-deps bench` puts it.
pub fn questdb_jar() -> PathBuf {
    std::env::var_os("ROAMKV_QUESTDB_JAR").map_or_else(
        || {
            PathBuf::from(format!(
                "/var/cache/roamkv/questdb/questdb-{QUESTDB_VERSION}.jar"
            ))
        },
        PathBuf::from,
    )
}

/// Why QuestDB cannot run here (no Java, no jar), or None.
pub fn questdb_missing() -> Option<String> {
    let java = Command::new("java")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if java.is_err() {
        return Some(
            "QuestDB needs Java 17 or later and there is no `java` on PATH (Debian: \
             `apt-get install openjdk-17-jre-headless`, or `scripts/install-deps bench`)"
                .into(),
        );
    }
    let jar = questdb_jar();
    (!jar.is_file()).then(|| {
        format!(
            "the QuestDB jar is not at {} (`scripts/install-deps bench` fetches QuestDB \
             {QUESTDB_VERSION} from Maven Central; or set ROAMKV_QUESTDB_JAR)",
            jar.display()
        )
    })
}

/// QuestDB's settings: the HTTP endpoint (line protocol and SQL) on a loopback port, every other
/// listener off, no telemetry; `sync`: fsync at every commit (`cairo.commit.mode=sync`), else its
/// default (`nosync`).
fn questdb_config(http_port: u16, sync: bool) -> String {
    let mut conf = format!(
        "http.bind.to=127.0.0.1:{http_port}
http.min.enabled=false
pg.enabled=false
line.tcp.enabled=false
line.udp.enabled=false
telemetry.enabled=false
telemetry.hide.tables=true
"
    );
    if sync {
        conf.push_str("cairo.commit.mode=sync\n");
    }
    conf
}

/// QuestDB on the JDK, its root (and `conf/server.conf`) under `dir`; `sync`: commits fsync'd.
pub fn questdb_launch(dir: &Path, sync: bool) -> Result<Launch> {
    if let Some(missing) = questdb_missing() {
        return Err(BenchError::Usage(missing));
    }
    let http_port = free_port()?;
    let root = dir.join("questdb");
    let conf_dir = root.join("conf");
    std::fs::create_dir_all(&conf_dir).map_err(|e| BenchError::io("creating", &conf_dir, e))?;
    let conf = conf_dir.join("server.conf");
    std::fs::write(&conf, questdb_config(http_port, sync))
        .map_err(|e| BenchError::io("writing", &conf, e))?;
    let mut command = Command::new("java");
    command
        .arg("-p")
        .arg(questdb_jar())
        .args(["-m", "io.questdb/io.questdb.ServerMain", "-d"])
        .arg(&root);
    Ok(Launch {
        command,
        http_port,
        log_path: dir.join("questdb.log"),
    })
}

/// InfluxDB's points (one per reading).
pub fn influx_count(addr: SocketAddr) -> Result<u64> {
    let mut client = HttpClient::new(addr);
    let answer = client.request(
        "GET",
        "/query?db=bench&q=SELECT%20count(%22value%22)%20FROM%20%22edgex%22",
        "text/plain",
        b"",
    )?;
    let json: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::step("influxd's count answer is not JSON", e))?;
    let series = &json["results"][0]["series"];
    if series.is_null() {
        return Ok(0); // no points at all
    }
    series[0]["values"][0][1]
        .as_u64()
        .ok_or_else(|| BenchError::Run(format!("influxd's count answer has no count: {json}")))
}

/// QuestDB's rows once every transaction it acknowledged is applied to its table (at most
/// 120 s).
pub fn questdb_count(addr: SocketAddr) -> Result<u64> {
    let mut client = HttpClient::new(addr);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let tables = questdb_query(
            &mut client,
            "/exec?query=select%20writerTxn,sequencerTxn%20from%20wal_tables()%20where%20name%3D%27edgex%27",
        )?;
        let applied = match tables["dataset"].as_array().and_then(|rows| rows.first()) {
            None => return Ok(0), // no table: no rows ever came
            Some(row) => row[0] == row[1],
        };
        if applied {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Run(format!(
                "QuestDB did not apply its WAL within 120 s: {tables}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let count = questdb_query(&mut client, "/exec?query=select%20count()%20from%20edgex")?;
    count["dataset"][0][0]
        .as_u64()
        .ok_or_else(|| BenchError::Run(format!("QuestDB's count answer has no count: {count}")))
}

fn questdb_query(client: &mut HttpClient, path: &str) -> Result<serde_json::Value> {
    let answer = client.request("GET", path, "text/plain", b"")?;
    if answer.status != 200 {
        return Err(BenchError::Run(format!(
            "QuestDB answered {} to {path}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        )));
    }
    serde_json::from_slice(&answer.body)
        .map_err(|e| BenchError::step("QuestDB's answer is not JSON", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_influxdb_config_fsyncs_every_write_on_loopback() {
        let text = influxdb_config(Path::new("/x"), 8086, 8088);
        assert!(text.contains("wal-fsync-delay = \"0s\""));
        assert!(text.contains("bind-address = \"127.0.0.1:8086\""));
        assert!(text.contains("wal-dir = \"/x/wal\""));
    }

    #[test]
    fn the_questdb_config_syncs_commits_only_when_asked() {
        let sync = questdb_config(9000, true);
        assert!(sync.contains("http.bind.to=127.0.0.1:9000"));
        assert!(sync.contains("cairo.commit.mode=sync"));
        assert!(sync.contains("pg.enabled=false"));
        assert!(!questdb_config(9000, false).contains("cairo.commit.mode"));
    }
}
