//! A real Apache Kafka 4.4.0 cluster on loopback for tests and benchmarks: three (or N) nodes in
//! KRaft mode, each a combined controller and broker, run from the jars scripts/install-deps
//! fetched from Maven Central (`libs_dir`), on free loopback ports (or another address of this
//! namespace, `start_on`: a fleet's edges in namespaces of their own), in a private directory, with
//! a log per node printed when a test fails and every JVM killed on drop.
//!
//! Combined nodes, not 3 controllers + 3 brokers: three JVMs instead of six start in about half
//! the time and memory on the 2-core machine, and the faults the sink is tested against need no
//! more: killing a partition's leader also kills one of the three voters, which leaves a quorum
//! of two (and is the harsher fault when it was the active controller: the metadata leader moves
//! too). Heartbeats are 500 ms and a broker's session 3 s (defaults 2 s and 9 s), so that a
//! killed leader is fenced and its partitions move within seconds; every other setting is
//! Kafka's default except the internal topics' partition counts (3, not 50: each is a
//! replicated log the cluster would create and elect leaders for).

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, print_tail};
use crate::error::Error;

/// The version install-deps fetches.
pub const KAFKA_VERSION: &str = "4.4.0";
/// How long a node gets to say "Kafka Server started".
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of each node's log a failed test prints.
const LOG_TAIL_LINES: usize = 40;
/// The brokers' heap: small, the machine has 2 cores and runs three of them beside the tests.
const BROKER_HEAP: &str = "-Xmx256m";
/// What a node prints once it serves clients.
const STARTED: &str = "Kafka Server started";

/// Where the broker's class path is: `ROAMKV_KAFKA_LIBS`, else install-deps' cache.
pub fn libs_dir() -> PathBuf {
    std::env::var_os("ROAMKV_KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(format!(
                "/var/cache/roamkv/kafka/kafka-{KAFKA_VERSION}/libs"
            ))
        })
}

/// Why a cluster cannot start here (no Java, no jars), for `prerequisite::unmet`; None when it can.
pub fn missing() -> Option<String> {
    let libs = libs_dir();
    if !libs
        .join(format!("kafka_2.13-{KAFKA_VERSION}.jar"))
        .exists()
    {
        return Some(format!(
            "Kafka {KAFKA_VERSION}'s jars are not in {} (scripts/install-deps test fetches them)",
            libs.display()
        ));
    }
    match Command::new("java").arg("-version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("`java` not found (openjdk-17-jre-headless)".into()),
    }
}

/// One node: its ports, its directory, its process when running.
struct Node {
    id: u32,
    port: u16,
    controller_port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Starts so far: each writes its own log, `node.N.log`.
    starts: u32,
}

impl Node {
    fn log_path(&self) -> PathBuf {
        self.dir.join(format!("node.{}.log", self.starts))
    }
}

pub struct KafkaCluster {
    nodes: Vec<Node>,
    /// The address the brokers listen on and advertise (their controllers stay on loopback).
    host: Ipv4Addr,
    dir: tempfile::TempDir,
    /// From the first JVM started to every node serving: what start-up costs a test.
    pub startup: Duration,
}

impl KafkaCluster {
    /// Formats and starts `size` nodes (3 for replication 3 with min.insync.replicas 2) and waits
    /// until every one serves.
    pub fn start(size: usize) -> Result<KafkaCluster, Error> {
        KafkaCluster::start_on(size, Ipv4Addr::LOCALHOST)
    }

    /// `start` with the brokers listening on, and advertising, `host` (an address of this
    /// namespace that clients in other namespaces reach: `netns::Bridged::add_host_link`).
    pub fn start_on(size: usize, host: Ipv4Addr) -> Result<KafkaCluster, Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::io("tempdir", e))?;
        let nodes: Vec<Node> = (1..=size as u32)
            .map(|id| Node {
                id,
                port: free_port(),
                controller_port: free_port(),
                dir: dir.path().join(format!("node-{id}")),
                child: None,
                starts: 0,
            })
            .collect();
        let mut cluster = KafkaCluster {
            nodes,
            host,
            dir,
            startup: Duration::ZERO,
        };
        let begun = Instant::now();
        cluster.format()?;
        for i in 0..cluster.nodes.len() {
            cluster.spawn(i)?;
        }
        for i in 0..cluster.nodes.len() {
            cluster.wait_started(i)?;
        }
        cluster.startup = begun.elapsed();
        Ok(cluster)
    }

    /// `HOST:PORT,…`: every broker, what a client bootstraps from.
    pub fn bootstrap(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", self.host, n.port))
            .collect();
        addrs.join(",")
    }

    /// The client port of node `id` (1-based).
    pub fn port(&self, id: u32) -> u16 {
        self.node(id).port
    }

    /// The process ids of the running nodes (a bench reads their CPU time in /proc).
    pub fn pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.child.as_ref().map(Child::id))
            .collect()
    }

    /// Node ids, 1-based.
    pub fn ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn node(&self, id: u32) -> &Node {
        &self.nodes[id as usize - 1]
    }

    /// Writes each node's settings and formats its log directory with one cluster id (in
    /// parallel: each format is a JVM of about a second).
    fn format(&mut self) -> Result<(), Error> {
        let voters: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
            .collect();
        let voters = voters.join(",");
        let cluster_id = cluster_id();
        let mut formats = Vec::new();
        for node in &self.nodes {
            std::fs::create_dir_all(&node.dir).map_err(|e| Error::io(&node.dir, e))?;
            let props = node.dir.join("server.properties");
            std::fs::write(&props, settings(node, self.host, &voters, self.nodes.len()))
                .map_err(|e| Error::io(&props, e))?;
            // `--cluster-id=ID` in one argument: an id may begin with '-' (one in 64 of the
            // alphabet's first letters), which `-t ID` hands to the parser as an option.
            let id_arg = format!("--cluster-id={cluster_id}");
            let mut args = vec!["kafka.tools.StorageTool", "format", &id_arg, "-c"];
            let props = props.to_string_lossy().into_owned();
            args.push(&props);
            formats.push(java(&["-Xmx128m", "-XX:TieredStopAtLevel=1"], &args)?);
        }
        for format in formats {
            finish(format, "kafka-storage format")?;
        }
        Ok(())
    }

    /// Starts node `i` (0-based) with a new log file.
    fn spawn(&mut self, i: usize) -> Result<(), Error> {
        let node = &mut self.nodes[i];
        node.starts += 1;
        let log = node.log_path();
        let file = std::fs::File::create(&log).map_err(|e| Error::io(&log, e))?;
        let err = file.try_clone().map_err(|e| Error::io(&log, e))?;
        let props = node.dir.join("server.properties");
        let child = Command::new("java")
            .args([BROKER_HEAP, "-Xms64m", "-XX:+UseSerialGC", "-cp"])
            .arg(class_path())
            .arg("kafka.Kafka")
            .arg(&props)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::io("java", e))?;
        node.child = Some(child);
        Ok(())
    }

    /// Waits until node `i`'s current log says it started and its port answers.
    fn wait_started(&mut self, i: usize) -> Result<(), Error> {
        let deadline = Instant::now() + START_TIMEOUT;
        let host = self.host;
        let node = &mut self.nodes[i];
        loop {
            let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
            if log.contains(STARTED) && TcpStream::connect((host, node.port)).is_ok() {
                return Ok(());
            }
            let exited = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                print_tail(&format!("kafka node {}", node.id), &log, LOG_TAIL_LINES);
                return Err(Error::Unsupported(format!(
                    "kafka node {} did not start ({})",
                    node.id,
                    exited.map_or("timed out".into(), |s| s.to_string())
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL to node `id`, reaped: the kill -9 of a fault test.
    pub fn kill(&mut self, id: u32) {
        if let Some(mut child) = self.nodes[id as usize - 1].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a killed node again on its ports and data, and waits until it serves.
    pub fn restart(&mut self, id: u32) -> Result<(), Error> {
        self.kill(id);
        self.spawn(id as usize - 1)?;
        self.wait_started(id as usize - 1)
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to node `id`: a node that stops answering without
    /// closing its connections, as behind a cut link.
    pub fn pause(&self, id: u32, stop: bool) {
        if let Some(child) = &self.node(id).child {
            let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on the pid of a child this cluster owns and has not reaped.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Creates `topic` with `partitions`, replication 3 (or the cluster's size if smaller) and
    /// `configs` (`name=value`, e.g. `min.insync.replicas=2`).
    pub fn create_topic(
        &self,
        topic: &str,
        partitions: u32,
        configs: &[&str],
    ) -> Result<(), Error> {
        let replication = self.nodes.len().min(3).to_string();
        let partitions = partitions.to_string();
        let mut args = vec!["--create", "--topic", topic, "--partitions", &partitions];
        args.extend(["--replication-factor", &replication]);
        for config in configs {
            args.extend(["--config", config]);
        }
        self.tool("org.apache.kafka.tools.TopicCommand", &args, None)
            .map(|_| ())
    }

    /// The node that leads `partition` of `topic` now (None while it has no leader).
    pub fn leader(&self, topic: &str, partition: u32) -> Result<Option<u32>, Error> {
        let out = self.tool(
            "org.apache.kafka.tools.TopicCommand",
            &["--describe", "--topic", topic],
            None,
        )?;
        Ok(parse_leader(&out, partition))
    }

    /// Produces `KEY:VALUE` lines with acks=all through Kafka's console producer.
    pub fn produce(&self, topic: &str, records: &[(&str, &str)]) -> Result<(), Error> {
        let input: String = records.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let args = ["--topic", topic, "--property", "parse.key=true"];
        let args = [&args[..], &["--property", "key.separator=:"]].concat();
        let args = [&args[..], &["--producer-property", "acks=all"]].concat();
        self.tool(
            "org.apache.kafka.tools.ConsoleProducer",
            &args,
            Some(&input),
        )
        .map(|_| ())
    }

    /// Reads `count` values of `topic` from the beginning (read_committed), each `KEY:VALUE`.
    pub fn consume(&self, topic: &str, count: usize) -> Result<Vec<String>, Error> {
        self.console_consume(topic, Some(count), Duration::from_secs(30))
    }

    /// Reads every value of `topic` from the beginning (read_committed), each `KEY:VALUE`,
    /// until none comes for `idle`: a count that must not stop at what the reader expects (a
    /// record found twice is read too).
    pub fn consume_all(&self, topic: &str, idle: Duration) -> Result<Vec<String>, Error> {
        self.console_consume(topic, None, idle)
    }

    /// Kafka's console consumer: `count` values at most, or until none comes for `idle`.
    fn console_consume(
        &self,
        topic: &str,
        count: Option<usize>,
        idle: Duration,
    ) -> Result<Vec<String>, Error> {
        let count = count.map(|c| c.to_string());
        let idle = idle.as_millis().to_string();
        let mut args = vec!["--topic", topic, "--from-beginning"];
        if let Some(count) = &count {
            args.extend(["--max-messages", count.as_str()]);
        }
        let args = [&args[..], &["--timeout-ms", &idle, "--isolation-level"]].concat();
        let args = [
            &args[..],
            &["read_committed", "--formatter-property", "print.key=true"],
        ]
        .concat();
        let args = [&args[..], &["--formatter-property", "key.separator=:"]].concat();
        let out = self.tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &args,
            None,
        )?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// Runs one of Kafka's tools (`class`) against this cluster with `args`, `stdin` fed to it;
    /// its standard output.
    pub fn tool(&self, class: &str, args: &[&str], stdin: Option<&str>) -> Result<String, Error> {
        let bootstrap = self.bootstrap();
        let mut all = vec![class, "--bootstrap-server", &bootstrap];
        all.extend_from_slice(args);
        let mut child = java(&["-Xmx128m", "-XX:TieredStopAtLevel=1"], &all)?;
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(input.as_bytes())
                .map_err(|e| Error::io("kafka tool stdin", e))?;
        }
        drop(child.stdin.take());
        finish(child, class)
    }

    /// The directory the nodes keep their settings, data and logs in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        for id in self.ids() {
            self.pause(id, false);
            self.kill(id);
        }
        if std::thread::panicking() {
            for node in &self.nodes {
                let text = std::fs::read_to_string(node.log_path()).unwrap_or_default();
                print_tail(&format!("kafka node {}", node.id), &text, LOG_TAIL_LINES);
            }
        }
    }
}

/// A node's server.properties.
fn settings(node: &Node, host: Ipv4Addr, voters: &str, size: usize) -> String {
    let replication = size.min(3);
    let min_isr = replication.min(2);
    format!(
        "process.roles=broker,controller\nnode.id={id}\ncontroller.quorum.voters={voters}\n\
         listeners=PLAINTEXT://{host}:{port},CONTROLLER://127.0.0.1:{cport}\n\
         advertised.listeners=PLAINTEXT://{host}:{port}\ncontroller.listener.names=CONTROLLER\n\
         listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
         inter.broker.listener.name=PLAINTEXT\nlog.dirs={data}\nauto.create.topics.enable=false\n\
         offsets.topic.replication.factor={replication}\noffsets.topic.num.partitions=3\n\
         transaction.state.log.replication.factor={replication}\n\
         transaction.state.log.min.isr={min_isr}\ntransaction.state.log.num.partitions=3\n\
         min.insync.replicas={min_isr}\ngroup.initial.rebalance.delay.ms=0\n\
         broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=3000\n",
        id = node.id,
        port = node.port,
        cport = node.controller_port,
        data = node.dir.join("data").display(),
    )
}

/// The class path: every jar in `libs_dir`.
fn class_path() -> String {
    format!("{}/*", libs_dir().display())
}

/// Starts a JVM on the class path with `jvm` options and `args` (a main class first), its output
/// piped.
fn java(jvm: &[&str], args: &[&str]) -> Result<Child, Error> {
    Command::new("java")
        .args(jvm)
        .arg("-cp")
        .arg(class_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("java", e))
}

/// Waits for a tool's JVM; its stdout, or its failure with the end of its stderr.
fn finish(child: Child, what: &str) -> Result<String, Error> {
    let out = child.wait_with_output().map_err(|e| Error::io("java", e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        return Err(Error::CommandFailed {
            command: what.into(),
            status: out.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The leader of `partition` in TopicCommand's `--describe` output (`Partition: 0  Leader: 2`;
/// `Leader: none` while there is none).
fn parse_leader(describe: &str, partition: u32) -> Option<u32> {
    let wanted = format!("Partition: {partition}\t");
    let line = describe.lines().find(|l| l.contains(&wanted))?;
    let after = line.split("Leader: ").nth(1)?;
    after.split_whitespace().next()?.parse().ok()
}

/// A fresh cluster id: 16 random bytes in URL-safe base64 without padding, as Kafka's Uuid.
fn cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 16];
    if let Ok(mut urandom) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut urandom, &mut bytes);
    }
    bytes[0] |= 1; // never the reserved all-zero id
    let mut bits = 0u32;
    let mut held = 0;
    let mut id = String::new();
    for byte in bytes {
        bits = (bits << 8) | u32::from(byte);
        held += 8;
        while held >= 6 {
            held -= 6;
            id.push(ALPHABET[((bits >> held) & 63) as usize] as char);
        }
    }
    if held > 0 {
        id.push(ALPHABET[((bits << (6 - held)) & 63) as usize] as char);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_id_is_22_url_safe_characters() {
        let id = cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }

    #[test]
    fn the_leader_is_read_from_describe() {
        let out = "Topic: t\tTopicId: x\tPartitionCount: 2\n\
                   \tTopic: t\tPartition: 0\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3,1\n\
                   \tTopic: t\tPartition: 1\tLeader: none\tReplicas: 3,1,2\tIsr: 3\n";
        assert_eq!(parse_leader(out, 0), Some(2));
        assert_eq!(parse_leader(out, 1), None);
        assert_eq!(parse_leader(out, 7), None);
    }
}
