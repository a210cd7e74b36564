//! The commit log: group commit, segment rotation, retirement and recycling, durability modes,
//! the index memory cap.

mod common;

use std::sync::Arc;

use common::*;
use roamkv_engine::{Durability, Engine, Options, Record};

#[test]
fn concurrent_writers_share_fdatasyncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Arc::new(open(dir.path(), &clock));
    let writers = 8;
    let per_writer = 200;
    std::thread::scope(|s| {
        for w in 0..writers {
            let engine = Arc::clone(&engine);
            s.spawn(move || {
                let device = format!("car-{w}");
                for ts in 0..per_writer {
                    engine
                        .put(&device, "speed", ts, b"0123456789")
                        .expect("put");
                }
            });
        }
    });
    let s = engine.stats();
    assert_eq!(s.user_records, writers * per_writer as u64);
    // Groups formed (fewer groups than puts), and one fdatasync covers every group written
    // before it (the next group is written while a sync runs): fewer syncs than groups.
    assert!(
        s.group_commits < s.user_records,
        "no group was ever formed: {s:?}"
    );
    assert!(s.fdatasyncs <= s.group_commits, "{s:?}");
    for w in 0..writers {
        let n = engine
            .scan(&format!("car-{w}"), None, i64::MIN, i64::MAX)
            .expect("scan")
            .len();
        assert_eq!(n, per_writer as usize);
    }
}

/// Writers park for their commits and are woken one by one (commit_log/waiters.rs): with many
/// writers under `Sync`, single batches and gathered ones (`put_batches`, one bad batch among
/// them) all commit, every acknowledged reading is there, and no parked writer ever found at
/// its periodic re-check work it had not been woken for.
#[test]
fn parked_writers_are_woken_for_their_commits_and_roles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = Arc::new(open(dir.path(), &clock)); // `Sync`
    let (writers, rounds, gathered) = (12, 60, 4);
    std::thread::scope(|s| {
        for w in 0..writers {
            let engine = Arc::clone(&engine);
            s.spawn(move || {
                let device = format!("car-{w}");
                for round in 0..rounds {
                    if w % 2 == 0 {
                        engine
                            .put(&device, "speed", round, b"0123456789")
                            .expect("put");
                        continue;
                    }
                    // Batches of one round: `gathered` good ones and one with an empty device id.
                    let records: Vec<[Record<'_>; 1]> = (0..gathered)
                        .map(|i| {
                            [Record {
                                device: &device,
                                sensor: "speed",
                                ts_ns: round * gathered + i,
                                value: b"0123456789",
                            }]
                        })
                        .collect();
                    let bad = [Record {
                        device: "",
                        sensor: "speed",
                        ts_ns: 0,
                        value: b"x",
                    }];
                    let mut batches: Vec<&[Record<'_>]> =
                        records.iter().map(|r| r.as_slice()).collect();
                    batches.insert(1, &bad);
                    let answers = engine.put_batches(&batches);
                    assert_eq!(answers.len(), batches.len());
                    for (i, answer) in answers.iter().enumerate() {
                        assert_eq!(answer.is_ok(), i != 1, "batch {i}: {answer:?}");
                    }
                }
            });
        }
    });
    let s = engine.stats();
    assert_eq!(s.commit_wakes_missed, 0, "{s:?}");
    for w in 0..writers {
        let n = engine
            .scan(&format!("car-{w}"), None, i64::MIN, i64::MAX)
            .expect("scan")
            .len();
        let want = if w % 2 == 0 {
            rounds
        } else {
            rounds * gathered
        };
        assert_eq!(n, want as usize, "car-{w}");
    }
}

#[test]
fn segments_rotate_retire_and_are_recycled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock); // 1 MiB segments
    let value = vec![1u8; 4000];
    // Generation after generation of devices write ~1 MiB each and leave: their segments
    // must come back without any rewrite.
    for generation in 0..8 {
        let device = format!("visitor-{generation}");
        for ts in 0..256 {
            engine.put(&device, "cam", ts, &value).expect("put");
        }
        engine.depart(&device).expect("depart");
        engine.maintain().expect("maintain");
        // Give the segment preparer a moment to recycle what was retired.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = engine.stats();
    assert!(
        s.live_segments <= 3,
        "departed devices' segments were not retired: {s:?}"
    );
    assert!(
        s.segments_recycled >= 2,
        "retired segments were not reused: {s:?}"
    );
    // Nothing was moved or rewritten: the lower tier got only each pass's catalog batch.
    assert_eq!(s.moved_bytes, 0);
    assert!(
        s.lower_bytes_written < 1024 * s.segments_aged.max(1),
        "{s:?}"
    );
    let on_disk = std::fs::read_dir(dir.path().join("log"))
        .expect("ls")
        .count();
    assert!(on_disk <= 6, "{on_disk} segment files left on disk");

    engine.put("last", "cam", 1, b"x").expect("put");
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.get("last", "cam", 1).expect("get"),
        Some(b"x".to_vec())
    );
    assert_eq!(engine.stats().upper.devices, 1);
}

#[test]
fn a_segment_is_not_retired_while_a_present_device_holds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    engine.put("stayer", "s", 0, b"first").expect("put");
    let value = vec![2u8; 4000];
    for ts in 0..600 {
        engine.put("visitor", "cam", ts, &value).expect("put");
    }
    engine.depart("visitor").expect("depart");
    engine.maintain().expect("maintain");
    assert!(engine.stats().live_segments >= 2);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.get("stayer", "s", 0).expect("get"),
        Some(b"first".to_vec())
    );
    assert!(engine.get("visitor", "cam", 5).expect("get").is_none());
    // Once the stayer settles, the old segments can go.
    clock.advance_ms(MANAGEMENT_MS);
    engine.maintain().expect("maintain");
    engine.put("x", "s", 0, b"y").expect("put"); // move the applied end on
    engine.maintain().expect("maintain");
    assert!(engine.stats().live_segments <= 2, "{:?}", engine.stats());
    assert_eq!(
        engine.get("stayer", "s", 0).expect("get"),
        Some(b"first".to_vec())
    );
}

/// What a killed process leaves behind: the data directory's files as the OS holds them, copied
/// while the engine is still open (no close, no final sync). The LOCK file is left out: it is
/// held by the running engine.
fn crash_image(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("ls") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            crash_image(&entry.path(), &target);
        } else if entry.file_name() != "LOCK" {
            match std::fs::copy(entry.path(), &target) {
                // A spare segment being prepared in the background may be renamed meanwhile;
                // it holds no data yet.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => {
                    other.expect("copy");
                }
            }
        }
    }
}

/// Each mode keeps its promise at the moment a put returns: Sync has fdatasync'd the put's own
/// group (one per put here: a single writer never shares a group); Periodic and None have handed
/// the write to the OS, so a process killed right after the put loses nothing (the crash image
/// below is taken without closing the engine); only Periodic's flusher syncs later, and None
/// never does.
#[test]
fn every_durability_mode_keeps_its_promise_when_a_put_returns() {
    const PUTS: i64 = 300;
    for durability in [
        Durability::Sync,
        Durability::Periodic { interval_ms: 5 },
        Durability::None,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let clock = clock();
        let opts = Options {
            durability,
            ..options(&clock)
        };
        let engine = Engine::open(&data, opts.clone()).expect("open");
        for ts in 0..PUTS {
            engine
                .put("car", "speed", ts, &value("car", "speed", ts, 300))
                .expect("put");
            if durability == Durability::Sync {
                let s = engine.stats();
                assert!(
                    s.fdatasyncs > ts as u64,
                    "{durability:?}: put {ts} returned before its fdatasync: {s:?}"
                );
            }
        }
        let image = dir.path().join("killed");
        crash_image(&data, &image);
        // The periodic flusher runs every 5 ms; on a loaded machine give it up to 5 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while durability != Durability::Sync
            && engine.stats().fdatasyncs == 0
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let s = engine.stats();
        match durability {
            Durability::Sync => assert_eq!(s.group_commits, PUTS as u64, "{s:?}"),
            Durability::Periodic { .. } => {
                assert!(s.fdatasyncs >= 1, "the periodic flusher never ran: {s:?}")
            }
            Durability::None => assert_eq!(s.fdatasyncs, 0, "{s:?}"),
        }
        let after_kill = Engine::open(&image, opts.clone()).expect("open the crash image");
        let recovered = after_kill
            .scan("car", None, i64::MIN, i64::MAX)
            .expect("scan");
        assert_eq!(
            recovered.len(),
            PUTS as usize,
            "{durability:?}: acknowledged puts missing after the process died"
        );
        drop(after_kill);
        engine.close().expect("close");
        let engine = Engine::open(&data, opts).expect("reopen");
        assert_eq!(
            engine
                .scan("car", None, i64::MIN, i64::MAX)
                .expect("scan")
                .len(),
            PUTS as usize,
            "{durability:?}: after a clean restart"
        );
    }
}

#[test]
fn the_index_memory_cap_migrates_the_oldest_devices_early() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let cap = 1 << 20;
    let engine = Engine::open(
        dir.path(),
        Options {
            index_bytes_max: cap,
            segment_bytes: 8 << 20,
            ..options(&clock)
        },
    )
    .expect("open");
    // ~24 bytes per record: 100 devices x 1000 readings is ~2.4 MiB of index, over the cap.
    for device in 0..100 {
        let name = format!("sensor-box-{device}");
        let batch: Vec<(i64, Vec<u8>)> = (0..1000).map(|ts| (ts, Vec::new())).collect();
        let records: Vec<Record<'_>> = batch
            .iter()
            .map(|(ts, v)| Record {
                device: &name,
                sensor: "t",
                ts_ns: *ts,
                value: v,
            })
            .collect();
        engine.put_batch(&records).expect("put");
        clock.advance_ms(1);
        assert!(
            engine.stats().index_bytes <= cap + 64 * 1024,
            "index grew past its cap: {:?}",
            engine.stats()
        );
    }
    let s = engine.stats();
    assert!(s.aged_records > 0 && s.lower.devices > 0, "{s:?}");
    assert!(
        s.upper.devices > 0,
        "the newest devices should still be in the upper tier"
    );
    let per_record = s.index_bytes as f64 / s.upper.records as f64;
    assert!(per_record < 40.0, "{per_record} index bytes per record");
    // The oldest devices went first, and everything is still readable.
    assert_eq!(
        engine
            .scan("sensor-box-0", None, i64::MIN, i64::MAX)
            .expect("scan")
            .len(),
        1000
    );
    assert_eq!(
        engine
            .scan("sensor-box-99", None, i64::MIN, i64::MAX)
            .expect("scan")
            .len(),
        1000
    );
}

/// A data directory made with one segment size opens with another (each segment records its
/// own size): `roamkv serve`'s default went from 64 MiB to 8 MiB segments, and a gateway
/// upgraded in place keeps its old segments beside the new ones.
#[test]
fn a_directory_reopens_with_another_segment_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let value = vec![7u8; 4000];
    let with_size = |mib: u64| Options {
        segment_bytes: mib << 20,
        ..options(&clock)
    };
    let engine = Engine::open(dir.path(), with_size(4)).expect("open at 4 MiB");
    for ts in 0..600 {
        engine.put("old", "cam", ts, &value).expect("put");
    }
    drop(engine);
    let engine = Engine::open(dir.path(), with_size(1)).expect("reopen at 1 MiB");
    // ~2.4 MB more: the old segment fills, and new ones of 1 MiB follow it.
    for ts in 0..600 {
        engine.put("new", "cam", ts, &value).expect("put");
    }
    let sizes: Vec<u64> = segment_files(dir.path())
        .iter()
        .map(|p| std::fs::metadata(p).expect("stat").len())
        .collect();
    assert!(
        sizes.contains(&(4 << 20)) && sizes.contains(&(1 << 20)),
        "segments of both sizes: {sizes:?}"
    );
    settle(&engine, &clock);
    drop(engine);
    let engine = Engine::open(dir.path(), with_size(1)).expect("reopen");
    for device in ["old", "new"] {
        let readings = engine.scan(device, None, 0, i64::MAX).expect("scan");
        assert_eq!(readings.len(), 600, "{device}");
        assert!(readings.iter().all(|r| r.value == value), "{device}");
    }
    drop(engine);
    let report = roamkv_engine::check(dir.path()).expect("check");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
