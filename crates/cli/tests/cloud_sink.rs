//! The cloud sink inside a real `roamkv serve`, against a real PostgreSQL 15 (a private cluster),
//! with both sides killed: the server with SIGKILL at each of the sink's crash points (armed in
//! the child, `ROAMKV_CRASH_POINTS`), the database's postmaster while a batch transaction is in
//! flight, and the database away for 60 s while ingest goes on (with a departure under
//! `--on-depart cloud`). Checked against the writer's ledger of acknowledged readings: each is in
//! the table once, with the edge's value, and was **committed once** — a trigger counts, per
//! row, the insert attempts of committed transactions (a resent batch would count twice even
//! though the key keeps one row) — nothing is in the table that was never sent, and no writer
//! waited for the sink's hold on the log.

use std::path::Path;
use std::time::{Duration, Instant};

use roamkv_testbed::ledger::{Ledger, native_lines};
use roamkv_testbed::postgres::Cluster;
use roamkv_testbed::prerequisite;
use roamkv_testbed::serve::{ServeProcess, http_call};

/// `roamkv serve` with its cloud sink; killed if the test ends first.
struct Edge {
    server: ServeProcess,
    addr: String,
}

impl Edge {
    /// `roamkv serve` on a free loopback port with the sink pointed at `pg`, `crash` armed.
    fn start(data: &Path, pg: &Cluster, crash: Option<&str>, extra: &[&str]) -> Edge {
        let binary = Path::new(env!("CARGO_BIN_EXE_roamkv"));
        let server = ServeProcess::start(binary, data, |command| {
            command.arg("--sink").arg(pg.socket_url()).args(extra);
            command.env("RUST_LOG", "warn");
            if let Some(point) = crash {
                command.env(roamkv_engine::CRASH_POINTS_ENV, point);
            }
        });
        let addr = server.addr.clone();
        Edge { server, addr }
    }

    /// Waits until the server is gone (a crash point killed it).
    fn wait_killed(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.server.has_exited() {
            assert!(Instant::now() < deadline, "the crash point was not reached");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn get_json(&self, path: &str) -> serde_json::Value {
        let (status, body) = http(&self.addr, "GET", path, "");
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// Waits until the sink is tailing with nothing left behind.
    fn wait_caught_up(&self, within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let view = self.get_json("/api/roamkv/v1/sink");
            if view["sink"]["state"] == "tailing" && view["lag_bytes"] == 0 {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "the sink did not catch up: {view}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn metric(&self, name: &str) -> f64 {
        let (_, text) = http(&self.addr, "GET", "/metrics", "");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing"))
    }
}

fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    http_call(addr, method, path, body)
}

/// Posts `n` readings of `device` as one native batch, noting the answer in the ledger; true
/// if acknowledged.
fn write(ledger: &mut Ledger, edge: &Edge, device: &str, n: i64) -> bool {
    let range = ledger.next(device, n);
    let body = native_lines(device, "temp", range.clone());
    let (status, answer) = http(&edge.addr, "POST", "/api/roamkv/v1/readings", &body);
    assert!(
        matches!(status, 201 | 0),
        "POST readings: {status} {answer}"
    );
    ledger.note(device, range, status) == 201
}

/// A private PostgreSQL, or None where the machine cannot run one (and skipping is allowed).
fn cluster(test: &str, dir: &Path) -> Option<Cluster> {
    match Cluster::create(dir, dir, "fsync = off\n") {
        Ok(c) => Some(c),
        Err(e) => {
            prerequisite::unmet(test, &format!("a private PostgreSQL: {e}"));
            None
        }
    }
}

/// Checks the table against the ledger: every acknowledged reading once with its value, nothing
/// that was never sent, every row committed once.
fn check_cloud(pg: &Cluster, ledger: &Ledger) {
    let rows = pg
        .psql(&[
            "-c",
            "SELECT device, ts_ns, convert_from(value, 'UTF8') FROM roamkv_readings",
        ])
        .expect("psql");
    let mut found = Vec::new();
    for line in rows.lines().filter(|l| !l.is_empty()) {
        let mut fields = line.splitn(3, '|');
        let (Some(device), Some(ts), Some(value)) = (fields.next(), fields.next(), fields.next())
        else {
            panic!("row {line:?}");
        };
        found.push((
            device.to_string(),
            ts.parse().expect("ts"),
            value.to_string(),
        ));
    }
    let rows_found = found.len();
    if let Err(e) = ledger.check(found, None) {
        panic!("the cloud's table: {e}");
    }
    let resent = pg
        .psql(&[
            "-c",
            "SELECT count(*) FROM roamkv_readings r LEFT JOIN sends s USING (device, sensor, ts_ns) \
             WHERE s.n IS DISTINCT FROM 1",
        ])
        .expect("psql");
    assert_eq!(
        resent.trim(),
        "0",
        "rows committed more (or less) than once"
    );
    eprintln!(
        "cloud: {rows_found} rows, {} acknowledged",
        ledger.acknowledged_count()
    );
}

/// Starts an edge, waits until its sink made its table, installs the send counter.
fn first_edge(data: &Path, pg: &Cluster, crash: Option<&str>, extra: &[&str]) -> Edge {
    let edge = Edge::start(data, pg, crash, extra);
    edge.wait_caught_up(Duration::from_secs(30));
    pg.psql(&["-c", roamkv_testbed::postgres::COUNT_SENDS_SQL])
        .expect("count sends");
    edge
}

#[test]
fn a_server_killed_at_each_sink_crash_point_commits_every_reading_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(pg) = cluster("sink_crash_points", dir.path()) else {
        return;
    };
    let data = dir.path().join("edge");
    let mut ledger = Ledger::default();
    let mut edge = first_edge(&data, &pg, None, &[]);
    write(&mut ledger, &edge, "car-0", 100);
    edge.wait_caught_up(Duration::from_secs(30));
    drop(edge);
    for (round, point) in ["sink.before_commit", "sink.after_commit", "sink.after_hold"]
        .iter()
        .enumerate()
    {
        // Armed at its third reach: two batches commit first.
        let armed = format!("{point}=3");
        edge = Edge::start(&data, &pg, Some(&armed), &[]);
        let device = format!("car-{}", round + 1);
        for _ in 0..200 {
            if !write(&mut ledger, &edge, &device, 50) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        edge.wait_killed(Duration::from_secs(30));
        eprintln!("{point}: the server was killed there");
        edge = Edge::start(&data, &pg, None, &[]);
        write(&mut ledger, &edge, &device, 50);
        edge.wait_caught_up(Duration::from_secs(60));
        check_cloud(&pg, &ledger);
        drop(edge);
    }
}

#[test]
fn a_database_killed_with_a_batch_in_flight_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(mut pg) = cluster("sink_postmaster_kill", dir.path()) else {
        return;
    };
    let data = dir.path().join("edge");
    let edge = first_edge(&data, &pg, None, &[]);
    // Each insert statement holds its transaction open 0.2 s: a kill finds one in flight.
    pg.psql(&[
        "-c",
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$; \
         CREATE TRIGGER slow AFTER INSERT ON roamkv_readings \
         FOR EACH STATEMENT EXECUTE FUNCTION slow();",
    ])
    .expect("slow trigger");
    let mut ledger = Ledger::default();
    let in_flight = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'roamkv-sink' \
                     AND state = 'active' AND query LIKE 'INSERT INTO roamkv_readings%'";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        write(&mut ledger, &edge, "bus-1", 100);
        if pg.psql(&["-c", in_flight]).expect("psql").trim() == "1" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sink never had a batch in flight"
        );
    }
    pg.kill_postmaster().expect("kill the postmaster");
    eprintln!("killed the postmaster with an insert in flight");
    for _ in 0..10 {
        assert!(
            write(&mut ledger, &edge, "bus-1", 100),
            "ingest goes on without the database"
        );
    }
    pg.restart().expect("restart");
    edge.wait_caught_up(Duration::from_secs(60));
    check_cloud(&pg, &ledger);
    assert_eq!(edge.metric("roamkv_write_stalls_total"), 0.0);
}

#[test]
fn a_minute_without_the_database_is_drained_and_departures_wait_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(mut pg) = cluster("sink_outage", dir.path()) else {
        return;
    };
    let data = dir.path().join("edge");
    let edge = first_edge(&data, &pg, None, &["--on-depart", "cloud"]);
    let mut ledger = Ledger::default();
    write(&mut ledger, &edge, "van-1", 200);
    edge.wait_caught_up(Duration::from_secs(30));
    pg.kill_postmaster().expect("kill the postmaster");
    let outage = Instant::now();
    let mut writes = 0;
    let mut departed = false;
    while outage.elapsed() < Duration::from_secs(60) {
        let device = if departed { "van-3" } else { "van-2" };
        assert!(
            write(&mut ledger, &edge, device, 50),
            "ingest goes on without the database"
        );
        writes += 1;
        if !departed && outage.elapsed() > Duration::from_secs(5) {
            let (status, body) = http(&edge.addr, "DELETE", "/api/roamkv/v1/devices/van-2", "");
            assert_eq!(status, 202, "the departure waits for the cloud: {body}");
            departed = true;
            // Fenced: a write of the departing device is refused, and nothing else is.
            let (status, _) = http(
                &edge.addr,
                "POST",
                "/api/roamkv/v1/readings",
                "{\"device\":\"van-2\",\"sensor\":\"temp\",\"ts_ns\":1,\"value\":\"x\"}\n",
            );
            assert_eq!(status, 409);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let waiting = edge.get_json("/api/roamkv/v1/departures");
    assert_eq!(waiting["waiting"][0]["device"], "van-2", "{waiting}");
    let devices = edge.get_json("/api/roamkv/v1/devices");
    assert!(
        devices.to_string().contains("van-2"),
        "the edge keeps it until the cloud has it"
    );
    pg.restart().expect("restart");
    let back = Instant::now();
    let drained = edge.wait_caught_up(Duration::from_secs(60));
    eprintln!(
        "{writes} writes during a 60 s outage, drained {drained:?} after the database returned"
    );
    let deadline = back + Duration::from_secs(30);
    while !edge.get_json("/api/roamkv/v1/departures")["waiting"]
        .as_array()
        .is_some_and(|w| w.is_empty())
    {
        assert!(Instant::now() < deadline, "the departure never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let devices = edge.get_json("/api/roamkv/v1/devices");
    assert!(
        !devices.to_string().contains("van-2"),
        "departed once the cloud had it: {devices}"
    );
    check_cloud(&pg, &ledger);
    assert_eq!(
        edge.metric("roamkv_write_stalls_total"),
        0.0,
        "no writer waited for the hold"
    );
}
