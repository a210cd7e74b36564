//! PostgreSQL for the commit lab: a private cluster (`roamkv_testbed::postgres`) whose data
//! directory sits on one lab file system and whose pg_wal sits on another (the log device). It is
//! stopped and its directories removed when the `Cluster` drops: on success, on error and on
//! Ctrl-C.
//!
//! Sessions are pgbench clients running `BEGIN; INSERT one row; COMMIT;`. Commit wait is read
//! from PostgreSQL itself, as paper 003 read its DBMS's catalog: a sampler polls
//! pg_stat_activity every 10 ms and counts client backends waiting on the WAL (wait events
//! WALWrite and WALSync), and pg_stat_wal (with track_wal_io_timing) gives the WAL write and sync
//! times and the number of syncs. pgbench's per-statement COMMIT latency is the client-side check.
use crate::LabError;
use roamkv_testbed::fixture::set_waited_child;
use roamkv_testbed::postgres;
use roamkv_testbed::prerequisite::require_tool;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Sampling period of pg_stat_activity.
const SAMPLE_PERIOD_SECONDS: &str = "0.01";

/// How the cluster syncs its WAL and groups commits (the knobs the issue asks to cover).
#[derive(Clone, Debug, serde::Serialize)]
pub struct WalSettings {
    /// wal_sync_method: fdatasync, open_datasync or fsync.
    pub sync_method: String,
    /// commit_delay in microseconds (0 = off): a committer sleeps so others can join its flush.
    pub commit_delay_us: u32,
    /// commit_siblings: commit_delay applies only with at least this many other open transactions.
    pub commit_siblings: u32,
}

impl Default for WalSettings {
    fn default() -> Self {
        WalSettings {
            sync_method: "fdatasync".into(),
            commit_delay_us: 0,
            commit_siblings: 5,
        }
    }
}

pub const WAL_SYNC_METHODS: [&str; 3] = ["fdatasync", "open_datasync", "fsync"];

/// A running private cluster (`roamkv_testbed::postgres`) set up for the commit lab: the WAL
/// settings of the run and the table the sessions insert into. Drop stops it and removes its
/// directories.
pub struct Cluster {
    server: postgres::Cluster,
    pub settings: WalSettings,
}

impl Cluster {
    /// initdb with the data directory in `data_parent` and pg_wal in `wal_parent`, then start.
    pub fn create(
        data_parent: &Path,
        wal_parent: &Path,
        settings: &WalSettings,
    ) -> Result<Cluster, LabError> {
        if !WAL_SYNC_METHODS.contains(&settings.sync_method.as_str()) {
            return Err(LabError::Unsupported(format!(
                "unknown wal_sync_method {:?}; valid: {}",
                settings.sync_method,
                WAL_SYNC_METHODS.join(", ")
            )));
        }
        require_tool("pgbench", "postgresql")?;
        let server = postgres::Cluster::create(data_parent, wal_parent, &config_text(settings))?;
        let cluster = Cluster {
            server,
            settings: settings.clone(),
        };
        cluster.psql(&["-c", "CREATE TABLE commit_rows (session int, payload text)"])?;
        Ok(cluster)
    }

    fn connection_args(&self) -> Vec<String> {
        self.server.connection_args()
    }

    /// Runs psql -At with these arguments against the cluster; returns its output.
    pub fn psql(&self, args: &[&str]) -> Result<String, LabError> {
        self.server.psql(args)
    }

    /// Empties the table, checkpoints (so no checkpoint falls in the run) and zeroes pg_stat_wal.
    pub fn prepare_run(&self) -> Result<(), LabError> {
        self.psql(&[
            "-c",
            "TRUNCATE commit_rows",
            "-c",
            "CHECKPOINT",
            "-c",
            "SELECT pg_stat_reset_shared('wal')",
        ])?;
        Ok(())
    }

    pub fn wal_stats(&self) -> Result<WalStats, LabError> {
        let text = self.psql(&[
            "-c",
            "SELECT wal_records, wal_bytes, wal_write, wal_sync, wal_write_time, wal_sync_time FROM pg_stat_wal",
        ])?;
        WalStats::parse(&text)
    }

    /// Runs `sessions` pgbench clients, each `transactions` times BEGIN; INSERT; COMMIT, with a
    /// wait-event sampler beside them. With `think_ms`, each client first sleeps that long
    /// (pgbench's `\sleep`, outside the transaction: work that is not the commit).
    pub fn run_sessions(
        &self,
        script_dir: &Path,
        sessions: u32,
        transactions: u64,
        row_bytes: usize,
        think_ms: u64,
    ) -> Result<PgRun, LabError> {
        let script = script_dir.join(format!("commit-{row_bytes}.sql"));
        let think = if think_ms > 0 {
            format!("\\sleep {think_ms} ms\n")
        } else {
            String::new()
        };
        // A dollar-quoted literal of row_bytes 'x': the row is exactly that many payload bytes.
        let text = format!(
            "{think}BEGIN;\nINSERT INTO commit_rows (session, payload) VALUES (:client_id, $${}$$);\nCOMMIT;\n",
            "x".repeat(row_bytes)
        );
        std::fs::write(&script, text).map_err(|e| LabError::io(&script, e))?;
        let sampler = Sampler::start(self)?;
        let mut args: Vec<String> = vec!["-n".into()];
        args.extend(self.connection_args());
        args.extend([
            "-c".to_string(),
            sessions.to_string(),
            "-j".into(),
            sessions.to_string(),
            "-t".into(),
            transactions.to_string(),
            "-r".into(),
            "-M".into(),
            "prepared".into(),
            "-f".into(),
            script.to_string_lossy().into_owned(),
            "postgres".into(),
        ]);
        let started = Instant::now();
        let child = Command::new("pgbench")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| LabError::io("pgbench", e))?;
        set_waited_child(child.id());
        let output = child.wait_with_output();
        set_waited_child(0);
        let wall_seconds = started.elapsed().as_secs_f64();
        let samples = sampler.stop();
        let output = output.map_err(|e| LabError::io("pgbench", e))?;
        if roamkv_testbed::fixture::interrupted() {
            return Err(LabError::Interrupted);
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(LabError::CommandFailed {
                command: format!("pgbench {}", args.join(" ")),
                status: output
                    .status
                    .code()
                    .map_or("signal".into(), |c| c.to_string()),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        let report = PgbenchReport::parse(&stdout)?;
        let expected = u64::from(sessions) * transactions;
        if report.transactions_processed != expected {
            return Err(LabError::Unsupported(format!(
                "pgbench processed {} of {expected} transactions",
                report.transactions_processed
            )));
        }
        Ok(PgRun {
            report,
            samples: samples?,
            wall_seconds,
        })
    }

    pub fn data_dir(&self) -> &Path {
        self.server.data_dir()
    }
    pub fn wal_dir(&self) -> &Path {
        self.server.wal_dir()
    }
    pub fn is_running(&self) -> bool {
        self.server.is_running()
    }
}

/// The commit lab's postgresql.conf lines: durable commits with the run's WAL settings, WAL I/O
/// timing on, and nothing else writing during a run.
fn config_text(settings: &WalSettings) -> String {
    format!(
        "fsync = on\n\
         synchronous_commit = on\n\
         wal_sync_method = {method}\n\
         commit_delay = {delay}\n\
         commit_siblings = {siblings}\n\
         track_wal_io_timing = on\n\
         # No checkpoint or autovacuum during a run: the run measures the log.\n\
         max_wal_size = '4GB'\n\
         checkpoint_timeout = '1h'\n\
         autovacuum = off\n",
        method = settings.sync_method,
        delay = settings.commit_delay_us,
        siblings = settings.commit_siblings,
    )
}

/// What one pgbench run and the sampler saw.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PgRun {
    pub report: PgbenchReport,
    pub samples: WaitSamples,
    pub wall_seconds: f64,
}

/// The numbers pgbench prints at the end of a run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct PgbenchReport {
    pub transactions_processed: u64,
    pub latency_ms_mean: f64,
    pub tps: f64,
    /// Per-statement mean latency (ms), in script order, from `-r`.
    pub statement_latency_ms: Vec<(String, f64)>,
}

impl PgbenchReport {
    /// Parses pgbench 15's summary (the lines after the run; progress lines are ignored).
    pub fn parse(text: &str) -> Result<PgbenchReport, LabError> {
        let bad = |detail: String| LabError::Parse {
            what: "pgbench output".into(),
            detail,
        };
        let mut report = PgbenchReport::default();
        let mut in_statements = false;
        let mut seen = (false, false, false);
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("number of transactions actually processed:") {
                let processed = rest.trim().split('/').next().unwrap_or("").trim();
                report.transactions_processed = processed
                    .parse()
                    .map_err(|_| bad(format!("transactions in {line:?}")))?;
                seen.0 = true;
            } else if let Some(rest) = line.strip_prefix("latency average =") {
                report.latency_ms_mean = parse_ms(rest).ok_or_else(|| bad(line.to_string()))?;
                seen.1 = true;
            } else if let Some(rest) = line.strip_prefix("tps =") {
                report.tps = rest
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| bad(line.to_string()))?;
                seen.2 = true;
            } else if line.starts_with("statement latencies in milliseconds") {
                in_statements = true;
            } else if in_statements && !line.is_empty() {
                // "4.490           0  COMMIT;" (15: latency, failures, statement)
                let mut parts = line.split_whitespace();
                let Some(latency) = parts.next().and_then(|v| v.parse::<f64>().ok()) else {
                    in_statements = false;
                    continue;
                };
                let rest: Vec<&str> = parts.collect();
                let statement = match rest.first() {
                    Some(f) if f.parse::<u64>().is_ok() => rest[1..].join(" "),
                    _ => rest.join(" "),
                };
                report.statement_latency_ms.push((statement, latency));
            }
        }
        if !(seen.0 && seen.1 && seen.2) {
            return Err(bad(
                "missing 'transactions actually processed', 'latency average' or 'tps'".into(),
            ));
        }
        Ok(report)
    }

    /// Mean latency of the COMMIT statement, if -r reported it.
    pub fn commit_latency_ms(&self) -> Option<f64> {
        self.statement_latency_ms
            .iter()
            .find(|(s, _)| s.trim_end_matches(';').eq_ignore_ascii_case("commit"))
            .map(|(_, ms)| *ms)
    }
}

fn parse_ms(text: &str) -> Option<f64> {
    text.trim().strip_suffix("ms")?.trim().parse().ok()
}

/// pg_stat_wal counters (times in milliseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct WalStats {
    pub wal_records: u64,
    pub wal_bytes: u64,
    pub wal_write: u64,
    pub wal_sync: u64,
    pub wal_write_time_ms: f64,
    pub wal_sync_time_ms: f64,
}

impl WalStats {
    /// Parses one `psql -At` row: "records|bytes|write|sync|write_time|sync_time".
    pub fn parse(text: &str) -> Result<WalStats, LabError> {
        let bad = || LabError::Parse {
            what: "pg_stat_wal row".into(),
            detail: text.trim().to_string(),
        };
        let fields: Vec<&str> = text.trim().split('|').collect();
        if fields.len() != 6 {
            return Err(bad());
        }
        let int = |i: usize| fields[i].trim().parse::<u64>().map_err(|_| bad());
        let float = |i: usize| fields[i].trim().parse::<f64>().map_err(|_| bad());
        Ok(WalStats {
            wal_records: int(0)?,
            wal_bytes: int(1)?,
            wal_write: int(2)?,
            wal_sync: int(3)?,
            wal_write_time_ms: float(4)?,
            wal_sync_time_ms: float(5)?,
        })
    }
}

/// Wait-event samples of the pgbench backends: how often one was waiting on the WAL, out of how
/// many backend observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct WaitSamples {
    pub samples: u64,
    pub backend_observations: u64,
    pub wal_waits: u64,
}

impl WaitSamples {
    /// Lines "waiting|connected" from the sampler; others are skipped.
    pub fn parse(text: &str) -> WaitSamples {
        let mut out = WaitSamples::default();
        for line in text.lines() {
            let Some((waiting, connected)) = line.trim().split_once('|') else {
                continue;
            };
            let (Ok(waiting), Ok(connected)) = (waiting.parse::<u64>(), connected.parse::<u64>())
            else {
                continue;
            };
            if connected == 0 {
                continue; // before the clients connected or after they left
            }
            out.samples += 1;
            out.backend_observations += connected;
            out.wal_waits += waiting.min(connected);
        }
        out
    }

    /// Share of backend time spent waiting on the WAL (NaN without observations).
    pub fn share(&self) -> f64 {
        if self.backend_observations == 0 {
            f64::NAN
        } else {
            self.wal_waits as f64 / self.backend_observations as f64
        }
    }
}

/// A psql process running the wait-event query every 10 ms (`\watch`), as Oracle's active
/// session history samples sessions: cheap, and read from the server's own view.
struct Sampler {
    child: Child,
}

impl Sampler {
    fn start(cluster: &Cluster) -> Result<Sampler, LabError> {
        use std::io::Write;
        let mut args = cluster.connection_args();
        args.extend(["-At", "-d", "postgres", "-f", "-"].map(String::from));
        let mut child = Command::new("psql")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| LabError::io("psql", e))?;
        let query = format!(
            "SELECT count(*) FILTER (WHERE wait_event IN ('WALWrite', 'WALSync')), count(*) \
             FROM pg_stat_activity WHERE backend_type = 'client backend' \
             AND application_name = 'pgbench' \\watch {SAMPLE_PERIOD_SECONDS}\n"
        );
        if let Some(stdin) = child.stdin.as_mut() {
            stdin
                .write_all(query.as_bytes())
                .map_err(|e| LabError::io("psql stdin", e))?;
        }
        Ok(Sampler { child })
    }

    fn stop(mut self) -> Result<WaitSamples, LabError> {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut text = String::new();
        if let Some(mut out) = self.child.stdout.take() {
            out.read_to_string(&mut text)
                .map_err(|e| LabError::io("psql sampler", e))?;
        }
        let _ = self.child.wait();
        Ok(WaitSamples::parse(&text))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PGBENCH_15: &str = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/pgt/s.sql
scaling factor: 1
query mode: prepared
number of clients: 2
number of threads: 2
maximum number of tries: 1
number of transactions per client: 200
number of transactions actually processed: 400/400
number of failed transactions: 0 (0.000%)
latency average = 4.998 ms
initial connection time = 10.562 ms
tps = 400.162466 (without initial connection time)
statement latencies in milliseconds and failures:
         0.216           0  BEGIN;
         0.190           0  INSERT INTO t VALUES (:client_id, $$x$$);
         4.490           0  COMMIT;
";

    #[test]
    fn parses_pgbench_15_output() {
        let r = PgbenchReport::parse(PGBENCH_15).expect("valid");
        assert_eq!(r.transactions_processed, 400);
        assert!((r.latency_ms_mean - 4.998).abs() < 1e-9);
        assert!((r.tps - 400.162466).abs() < 1e-9);
        assert_eq!(r.statement_latency_ms.len(), 3);
        assert_eq!(r.commit_latency_ms(), Some(4.490));
        assert_eq!(
            r.statement_latency_ms[1].0,
            "INSERT INTO t VALUES (:client_id, $$x$$);"
        );
    }

    #[test]
    fn pgbench_output_without_totals_is_an_error() {
        assert!(PgbenchReport::parse("").is_err());
        let truncated = PGBENCH_15.replace("tps = 400.162466", "tps = many");
        assert!(PgbenchReport::parse(&truncated).is_err());
    }

    #[test]
    fn parses_pg_stat_wal_rows() {
        let w = WalStats::parse("24056|5190743|731|12|3.5|120.25\n").expect("valid");
        assert_eq!((w.wal_records, w.wal_sync), (24056, 12));
        assert!((w.wal_sync_time_ms - 120.25).abs() < 1e-9);
        assert!(WalStats::parse("1|2|3").is_err());
        assert!(WalStats::parse("a|b|c|d|e|f").is_err());
    }

    #[test]
    fn wait_samples_count_only_connected_backends() {
        let s = WaitSamples::parse("0|0\n1|2\n2|2\ngarbage\n0|4\n5|4\n");
        assert_eq!(s.samples, 4);
        assert_eq!(s.backend_observations, 12);
        assert_eq!(s.wal_waits, 1 + 2 + 4);
        assert!((s.share() - 7.0 / 12.0).abs() < 1e-12);
        assert!(WaitSamples::parse("").share().is_nan());
    }
}
