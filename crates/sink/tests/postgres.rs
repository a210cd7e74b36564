//! The cloud sink against a real PostgreSQL (Debian's, a private cluster started here): every
//! reading once, resumption after a restart of the edge, a database crash (SIGKILL of the
//! postmaster) ridden out, a restored data directory detected as a new generation, a gap
//! recovered by scanning, an unreachable database retried from the start, and a database that
//! refuses the sink (no such database) an error at start.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roamkv_engine::{Engine, Options, Record};
use roamkv_sink::{Sink, SinkConfig};
use roamkv_testbed::postgres::Cluster;
use roamkv_testbed::prerequisite;
use tokio::sync::watch;

/// A private cluster, or None when the machine cannot run one (and skipping is allowed).
fn cluster(test: &str, dir: &Path) -> Option<Cluster> {
    match Cluster::create(dir, dir, "fsync = off\n") {
        Ok(c) => Some(c),
        Err(e) => {
            prerequisite::unmet(test, &format!("a private PostgreSQL: {e}"));
            None
        }
    }
}

fn options() -> Options {
    Options {
        segment_bytes: 1 << 20,
        ..Options::default()
    }
}

fn write(engine: &Engine, device: &str, from: i64, n: i64) {
    let values: Vec<Vec<u8>> = (from..from + n)
        .map(|t| format!("v{t}").into_bytes())
        .collect();
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(500) {
        let records: Vec<Record<'_>> = chunk
            .iter()
            .map(|t| Record {
                device,
                sensor: "temp",
                ts_ns: *t,
                value: &values[(*t - from) as usize],
            })
            .collect();
        engine.put_batch(&records).expect("put");
    }
}

fn count(pg: &Cluster, filter: &str) -> u64 {
    pg.psql(&[
        "-c",
        &format!("SELECT count(*) FROM roamkv_readings {filter}"),
    ])
    .expect("psql")
    .trim()
    .parse()
    .expect("a count")
}

/// Waits until the table holds `want` rows of the filter and the sink has no lag.
async fn wait_for(pg: &Cluster, sink: &Sink, filter: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = sink.status();
        if count(pg, filter) == want && status.lag_bytes == 0 && status.state == "tailing" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sink did not catch up: {status:?}, rows {}",
            count(pg, filter)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(engine: &Arc<Engine>, pg: &Cluster, stop: &watch::Receiver<bool>) -> Sink {
    Sink::start(
        Arc::clone(engine),
        SinkConfig::new(&pg.socket_url(), "edge-a"),
        stop.clone(),
    )
    .await
    .expect("sink starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reading_once_across_an_edge_restart_and_a_database_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(mut pg) = cluster("sink_every_reading_once", dir.path()) else {
        return;
    };
    let data = dir.path().join("edge");
    let engine = Arc::new(Engine::open(&data, options()).expect("open"));
    write(&engine, "car-1", 0, 3000);
    let (stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &pg, &stop).await;
    wait_for(&pg, &sink, "", 3000).await;
    assert_eq!(sink.status().generation, 1);
    assert_eq!(
        sink.status().snapshot_rows_total,
        3000,
        "the first start exports by scanning"
    );

    // The database crashes while the edge writes; the sink resumes once it is back.
    pg.kill_postmaster().expect("kill");
    write(&engine, "car-1", 3000, 2000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(sink.status().state, "tailing");
    let restarted = Instant::now();
    pg.restart().expect("restart");
    wait_for(&pg, &sink, "", 5000).await;
    eprintln!(
        "sink caught up {:?} after the database restarted",
        restarted.elapsed()
    );
    assert!(sink.status().retries_total >= 1);

    // The edge restarts: the sink resumes from the cursor, nothing twice, nothing missing.
    stop_tx.send(true).expect("stop");
    sink.join().await;
    Arc::try_unwrap(engine)
        .ok()
        .expect("sole owner")
        .close()
        .expect("close");
    let engine = Arc::new(Engine::open(&data, options()).expect("reopen"));
    write(&engine, "car-2", 0, 1000);
    let (_stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &pg, &stop).await;
    wait_for(&pg, &sink, "", 6000).await;
    let status = sink.status();
    assert_eq!(
        (status.generation, status.snapshot_rows_total),
        (1, 0),
        "{status:?}"
    );
    assert_eq!(
        pg.psql(&["-c", "SELECT count(DISTINCT (device, sensor, ts_ns)) FROM roamkv_readings WHERE value = convert_to('v' || ts_ns, 'UTF8')"])
            .expect("psql")
            .trim(),
        "6000"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_data_directory_starts_a_new_generation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(pg) = cluster("sink_restored_generation", dir.path()) else {
        return;
    };
    let data = dir.path().join("edge");
    let copy = dir.path().join("copy");
    let engine = Arc::new(Engine::open(&data, options()).expect("open"));
    write(&engine, "car-1", 0, 100);
    Arc::try_unwrap(engine)
        .ok()
        .expect("owner")
        .close()
        .expect("close");
    copy_dir(&data, &copy);
    let engine = Arc::new(Engine::open(&data, options()).expect("open"));
    let (stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &pg, &stop).await;
    write(&engine, "car-1", 100, 400);
    wait_for(&pg, &sink, "", 500).await;
    stop_tx.send(true).expect("stop");
    sink.join().await;
    Arc::try_unwrap(engine)
        .ok()
        .expect("owner")
        .close()
        .expect("close");

    // The edge is restored from the older copy and writes other readings.
    std::fs::remove_dir_all(&data).expect("rm");
    std::fs::rename(&copy, &data).expect("restore");
    let engine = Arc::new(Engine::open(&data, options()).expect("open"));
    write(&engine, "car-9", 0, 50);
    let (_stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &pg, &stop).await;
    wait_for(&pg, &sink, "WHERE device = 'car-9'", 50).await;
    let status = sink.status();
    assert_eq!(
        (status.generation, status.generations_started),
        (2, 1),
        "{status:?}"
    );
    assert_eq!(
        count(&pg, ""),
        550,
        "history of both generations kept, each reading once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_is_recovered_by_scanning_the_devices_present() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(mut pg) = cluster("sink_gap", dir.path()) else {
        return;
    };
    let engine = Arc::new(
        Engine::open(
            dir.path().join("edge"),
            Options {
                feed_hold_bytes_max: Some(1 << 20),
                management_time_ms: 1_000,
                ..options()
            },
        )
        .expect("open"),
    );
    let (_stop_tx, stop) = watch::channel(false);
    let sink = start(&engine, &pg, &stop).await;
    wait_for(&pg, &sink, "", 0).await;
    pg.kill_postmaster().expect("kill");
    // Far past the cap while the database is down, over several management times.
    for round in 0..8 {
        write(&engine, "stays", round * 2000, 2000);
        write(&engine, &format!("gone-{round}"), 0, 10);
        engine.depart(&format!("gone-{round}")).expect("depart");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    assert!(
        engine.feed().status().holds_released >= 1,
        "{:?}",
        engine.feed().status()
    );
    pg.restart().expect("restart");
    wait_for(&pg, &sink, "WHERE device = 'stays'", 16_000).await;
    assert!(sink.status().gaps_total >= 1, "{:?}", sink.status());
    assert_eq!(engine.stats().no_space_errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_cannot_be_reached_at_start_is_retried_and_a_bad_url_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Arc::new(Engine::open(dir.path(), options()).expect("open"));
    let (_stop_tx, stop) = watch::channel(false);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    // Unreachable: normal at the edge. The sink starts disconnected and says why.
    let url = format!("postgres://edge:secret@127.0.0.1:{port}/fleet");
    let sink = Sink::start(
        Arc::clone(&engine),
        SinkConfig::new(&url, "edge-a"),
        stop.clone(),
    )
    .await
    .expect("starts disconnected");
    let status = sink.status();
    assert_eq!(status.state, "disconnected");
    let error = status.last_error.expect("the error is shown");
    assert!(error.contains("postgres://edge:***@127.0.0.1"), "{error}");
    assert!(!error.contains("secret"), "{error}");
    // Malformed: every retry would fail the same way.
    let error = Sink::start(
        engine,
        SinkConfig::new("postgres://edge@host:port/x", "edge-a"),
        stop,
    )
    .await
    .err()
    .expect("refused");
    assert!(error.contains("not valid"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_an_error_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(pg) = cluster("sink_refused_credentials", dir.path()) else {
        return;
    };
    let engine = Arc::new(Engine::open(dir.path().join("edge"), options()).expect("open"));
    let (_stop_tx, stop) = watch::channel(false);
    // A database that does not exist: refused by the server, the same at every retry.
    let url = pg
        .socket_url()
        .replace("dbname=postgres", "dbname=fleet_missing");
    let error = Sink::start(engine, SinkConfig::new(&url, "edge-a"), stop)
        .await
        .err()
        .expect("refused");
    assert!(
        error.contains("cannot use") && error.contains("fleet_missing"),
        "{error}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_speaks_tls_and_refuses_a_server_it_cannot_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = roamkv_testbed::certificates::certificates(dir.path(), "cloud");
    let placement = roamkv_testbed::postgres::Placement {
        listen: Some([127, 0, 0, 1].into()),
        tls: Some((cert, key)),
        ..Default::default()
    };
    let pg = match Cluster::create_placed(dir.path(), dir.path(), "fsync = off\n", placement) {
        Ok(c) => c,
        Err(e) => {
            prerequisite::unmet("sink_tls", &format!("a private PostgreSQL with TLS: {e}"));
            return;
        }
    };
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=require",
        pg.port()
    );
    let engine = Arc::new(Engine::open(dir.path().join("edge"), options()).expect("open"));
    write(&engine, "car-1", 0, 500);
    let (stop_tx, stop) = watch::channel(false);
    // The system's roots do not know this CA: refused at start, every retry would be too.
    let error = Sink::start(
        Arc::clone(&engine),
        SinkConfig::new(&url, "edge-a"),
        stop.clone(),
    )
    .await
    .err()
    .expect("an unverified server is refused");
    // Said as a user can act on it (explain.rs): the CA to trust, with the sink's setting.
    assert!(
        error.contains("cannot use")
            && error.contains("the database at 127.0.0.1:")
            && error.contains("signed by a CA this client does not trust")
            && error.contains("--sink-ca-file ca.crt")
            && error.contains("UnknownIssuer"),
        "{error}"
    );
    // With the CA it trusts the server; the connection is encrypted.
    let config = SinkConfig {
        ca_file: Some(ca),
        ..SinkConfig::new(&url, "edge-a")
    };
    let sink = Sink::start(Arc::clone(&engine), config, stop.clone())
        .await
        .expect("sink starts over TLS");
    wait_for(&pg, &sink, "", 500).await;
    let ssl = pg
        .psql(&[
            "-c",
            "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'roamkv-sink'",
        ])
        .expect("psql");
    assert_eq!(ssl.trim(), "t", "the sink's connection is TLS");
    let _ = stop_tx.send(true);
    sink.join().await;
}
