//! The index applied after the acknowledgement (`IndexApply::AfterAck`, index_apply.rs): writers
//! return before their records are indexed, by the syncer or by the `roamkv-index` thread, so
//! these tests slow every apply down (`FailPoints::slow_index_apply`) to make the index lag its
//! log for real, and check what must hold all the same:
//!
//! - read-your-writes: every read sees every write acknowledged before it began, to its own
//!   device (point reads, scans, the newest reading, trims), from the writer's thread and from
//!   another thread it told — checked against a model of what was acknowledged;
//! - a process killed with SIGKILL while its index lagged its log far behind reopens with
//!   every acknowledged reading.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{clock, options, value};
use roamkv_engine::{Durability, Engine, IndexApply, Options, Record};

const WRITERS: usize = 4;
const BATCHES_PER_WRITER: i64 = 150;
const READINGS_PER_BATCH: i64 = 4;

fn device(writer: usize, batch: i64) -> String {
    format!("w{writer}-dev{}", batch % 3)
}

fn batch_values(device: &str, batch: i64) -> Vec<(String, i64, Vec<u8>)> {
    (0..READINGS_PER_BATCH)
        .map(|i| {
            let sensor = format!("s{i}");
            let ts = 1_000 + batch;
            let v = value(device, &sensor, ts, 24);
            (sensor, ts, v)
        })
        .collect()
}

fn put(engine: &Engine, device: &str, batch: i64) {
    let values = batch_values(device, batch);
    let records: Vec<Record<'_>> = values
        .iter()
        .map(|(sensor, ts, v)| Record {
            device,
            sensor,
            ts_ns: *ts,
            value: v,
        })
        .collect();
    engine.put_batch(&records).expect("put_batch");
}

#[test]
fn reads_see_every_acknowledged_write_while_the_index_lags() {
    for durability in [Durability::None, Durability::Sync] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = clock();
        let opts = Options {
            durability,
            index_apply: IndexApply::AfterAck,
            ..options(&clock)
        };
        // Every group waits 300 µs before the index takes it: groups queue up behind it.
        opts.fail_points
            .slow_index_apply(Duration::from_micros(300));
        let engine = Engine::open(dir.path(), opts).expect("open");
        // (device, sensor, ts) -> value, as acknowledged; filled from every writer's model.
        let mut acknowledged: BTreeMap<(String, String, i64), Vec<u8>> = BTreeMap::new();
        // A writer tells the reader what it was acknowledged for and waits for the check (its
        // next trim could otherwise delete what the reader is about to look for).
        let (told, heard) = mpsc::channel::<(String, i64, mpsc::Sender<()>)>();
        std::thread::scope(|scope| {
            // Another thread reads what the writers tell it they were acknowledged for (a
            // server answers a GET on another thread than the POST's).
            let reader = scope.spawn(|| {
                let mut checked = 0u64;
                for (device, batch, done) in heard {
                    for (sensor, ts, v) in batch_values(&device, batch) {
                        let got = engine.get(&device, &sensor, ts).expect("get");
                        assert_eq!(got.as_deref(), Some(&v[..]), "{device}/{sensor}@{ts}");
                    }
                    checked += 1;
                    done.send(()).expect("the writer waits");
                }
                checked
            });
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let told = told.clone();
                    let engine = &engine;
                    scope.spawn(move || {
                        let mut model: BTreeMap<(String, String, i64), Vec<u8>> = BTreeMap::new();
                        for batch in 0..BATCHES_PER_WRITER {
                            let device = device(w, batch);
                            put(engine, &device, batch);
                            for (sensor, ts, v) in batch_values(&device, batch) {
                                model.insert((device.clone(), sensor, ts), v);
                            }
                            let (done, checked) = mpsc::channel();
                            told.send((device.clone(), batch, done))
                                .expect("reader is there");
                            checked.recv().expect("the reader checked");
                            check_device(engine, &device, &model);
                            if batch % 50 == 49 {
                                // A trim, acknowledged, hides what it trimmed from the next read.
                                let cutoff = 1_000 + batch - 10;
                                assert!(engine.trim_before(&device, cutoff).expect("trim"));
                                model.retain(|(d, _, ts), _| d != &device || *ts >= cutoff);
                                check_device(engine, &device, &model);
                            }
                        }
                        model
                    })
                })
                .collect();
            drop(told);
            for writer in writers {
                acknowledged.extend(writer.join().expect("writer"));
            }
            let checked = reader.join().expect("reader");
            assert_eq!(checked, (WRITERS as i64 * BATCHES_PER_WRITER) as u64);
        });
        // The index did lag, and reads did wait for it: otherwise this test proved nothing.
        let stats = engine.stats();
        assert!(
            stats.index_waits > 0,
            "{durability:?}: no read waited for the index"
        );
        assert_eq!(stats.index_lag_bytes, 0, "stats wait for the index");
        // The whole store is the model.
        let mut stored: BTreeMap<(String, String, i64), Vec<u8>> = BTreeMap::new();
        for info in engine.devices() {
            for r in engine
                .scan(&info.name, None, i64::MIN, i64::MAX)
                .expect("scan")
            {
                stored.insert((info.name.clone(), r.sensor, r.ts_ns), r.value);
            }
        }
        assert_eq!(stored, acknowledged, "{durability:?}");
        engine.close().expect("close");
    }
}

/// The device's readings right after its writer was acknowledged: every one the model holds,
/// and the newest of each sensor.
fn check_device(engine: &Engine, device: &str, model: &BTreeMap<(String, String, i64), Vec<u8>>) {
    let expected: Vec<(String, i64, Vec<u8>)> = model
        .iter()
        .filter(|((d, _, _), _)| d == device)
        .map(|((_, s, ts), v)| (s.clone(), *ts, v.clone()))
        .collect();
    let scanned: Vec<(String, i64, Vec<u8>)> = engine
        .scan(device, None, i64::MIN, i64::MAX)
        .expect("scan")
        .into_iter()
        .map(|r| (r.sensor, r.ts_ns, r.value))
        .collect();
    assert_eq!(scanned, expected, "scan of {device}");
    let newest: BTreeMap<String, i64> =
        expected.iter().map(|(s, ts, _)| (s.clone(), *ts)).collect();
    let latest: BTreeMap<String, i64> = engine
        .latest(device, None)
        .expect("latest")
        .into_iter()
        .map(|r| (r.sensor, r.ts_ns))
        .collect();
    assert_eq!(latest, newest, "latest of {device}");
}

/// Set in the child process of the kill test: the data directory it writes to.
const CHILD_DIR_ENV: &str = "ROAMKV_INDEX_THREAD_CHILD_DIR";

fn child_options(clock: &std::sync::Arc<roamkv_engine::ManualClock>) -> Options {
    Options {
        durability: Durability::Sync,
        index_apply: IndexApply::AfterAck,
        ..options(clock)
    }
}

/// The child: writers put batches as fast as they are acknowledged, printing each
/// acknowledgement, while the index applies nothing (every apply waits an hour first).
fn child(dir: &str) {
    let clock = clock();
    let opts = child_options(&clock);
    opts.fail_points.slow_index_apply(Duration::from_secs(3600));
    let engine = Engine::open(dir, opts).expect("open");
    let stdout = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (engine, stdout) = (&engine, &stdout);
            scope.spawn(move || {
                for batch in 0.. {
                    let device = device(w, batch);
                    put(engine, &device, batch);
                    let lag = engine.index_lag_bytes();
                    let mut out = stdout.lock().expect("stdout");
                    writeln!(out, "acked {w} {batch} {lag}").expect("stdout");
                    out.flush().expect("stdout");
                }
            });
        }
    });
}

#[test]
fn a_process_killed_while_its_index_lags_its_log_reopens_with_every_acknowledged_reading() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        child(&dir);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_process_killed_while_its_index_lags_its_log_reopens_with_every_acknowledged_reading",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let mut acked: Vec<(usize, i64)> = Vec::new();
    let mut lag_max = 0u64;
    let started = Instant::now();
    let lines = BufReader::new(child.stdout.take().expect("stdout"));
    for line in lines.lines() {
        let line = line.expect("child's stdout");
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let ["acked", w, batch, lag] = fields[..] {
            acked.push((w.parse().expect("writer"), batch.parse().expect("batch")));
            lag_max = lag_max.max(lag.parse().expect("lag"));
        }
        if acked.len() >= 400 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the child acknowledged only {} batches in 60 s",
            acked.len()
        );
    }
    // SIGKILL, while the writers are still writing and the index is still far behind.
    child.kill().expect("kill -9 the child");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the child was killed, not finished");
    assert!(
        acked.len() >= 400,
        "the child stopped early: {}",
        acked.len()
    );
    // The index had applied next to nothing: at least 100 batches' bytes were not in it.
    assert!(
        lag_max > 100 * READINGS_PER_BATCH as u64 * 24,
        "the index did not lag (at most {lag_max} bytes behind)"
    );

    let clock = clock();
    let engine = Engine::open(dir.path(), child_options(&clock)).expect("reopen");
    for (w, batch) in &acked {
        let device = device(*w, *batch);
        for (sensor, ts, v) in batch_values(&device, *batch) {
            assert_eq!(
                engine.get(&device, &sensor, ts).expect("get").as_deref(),
                Some(&v[..]),
                "acknowledged {device}/{sensor}@{ts} lost"
            );
        }
    }
    assert!(engine.stats().recovered_records >= acked.len() as u64 * READINGS_PER_BATCH as u64);
    engine.close().expect("close");
}
