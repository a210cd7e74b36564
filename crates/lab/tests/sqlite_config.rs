//! Journal-mode and synchronous setup (PRAGMAs read back), bad input, and the workload's effects.

use roamkv_lab::sqlite::config::{self, JournalMode, Op, SyncCall, Synchronous};
use roamkv_lab::sqlite::workload::{self, DbConfig, LatencyUs, StreamSpec};

#[test]
fn every_journal_mode_and_synchronous_level_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, &mode) in JournalMode::all().iter().enumerate() {
        for &sync in Synchronous::all() {
            let path = dir.path().join(format!("m{i}-{}.db", sync.name()));
            let config = DbConfig {
                journal_mode: mode,
                synchronous: sync,
                sync_call: SyncCall::Fdatasync,
            };
            let conn = workload::open(&path, config).expect("open");
            let (got_mode, got_sync) = workload::read_pragmas(&conn).expect("pragmas");
            assert_eq!(got_mode, mode.name(), "journal_mode read back");
            assert_eq!(got_sync, sync.pragma_number(), "synchronous read back");
        }
    }
}

#[test]
fn unknown_names_list_the_valid_ones() {
    let err = "bogus"
        .parse::<JournalMode>()
        .expect_err("bogus is no journal mode");
    let msg = err.to_string();
    for mode in JournalMode::all() {
        assert!(
            msg.contains(mode.name()),
            "{msg} should list {}",
            mode.name()
        );
    }
    assert!(msg.contains("bogus"));
    let err =
        config::parse_list("full,sometimes", Synchronous::all()).expect_err("sometimes is invalid");
    assert!(err.to_string().contains("off, normal, full"), "{err}");
    let err = "msync".parse::<SyncCall>().expect_err("msync");
    assert!(err.to_string().contains("fdatasync, fsync"), "{err}");
    let err = "upsert".parse::<Op>().expect_err("upsert");
    assert!(err.to_string().contains("insert, update, delete"), "{err}");
}

#[test]
fn lists_parse_case_insensitively_without_duplicates() {
    let modes = config::parse_list("WAL, delete,wal", JournalMode::all()).expect("valid list");
    assert_eq!(modes, vec![JournalMode::Wal, JournalMode::Delete]);
    assert_eq!(
        config::parse_list("all", Op::all()).expect("all"),
        Op::all().to_vec()
    );
}

#[test]
fn wal_mode_writes_a_wal_file_and_delete_mode_removes_its_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = StreamSpec {
        op: Op::Insert,
        transactions: 3,
        rows_per_tx: 2,
        record_bytes: 100,
        seed: 7,
    };
    let wal = dir.path().join("w.db");
    let conn = workload::open(
        &wal,
        DbConfig {
            journal_mode: JournalMode::Wal,
            synchronous: Synchronous::Full,
            sync_call: SyncCall::Fsync,
        },
    )
    .expect("open");
    workload::run_stream(&conn, &spec).expect("run");
    assert!(
        dir.path().join("w.db-wal").exists(),
        "WAL mode keeps a -wal file while open"
    );

    let del = dir.path().join("d.db");
    let conn = workload::open(
        &del,
        DbConfig {
            journal_mode: JournalMode::Delete,
            synchronous: Synchronous::Full,
            sync_call: SyncCall::Fsync,
        },
    )
    .expect("open");
    workload::run_stream(&conn, &spec).expect("run");
    assert!(
        !dir.path().join("d.db-journal").exists(),
        "DELETE mode unlinks its journal after commit"
    );
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 6);
}

#[test]
fn update_and_delete_touch_each_prefilled_row_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = DbConfig {
        journal_mode: JournalMode::Truncate,
        synchronous: Synchronous::Normal,
        sync_call: SyncCall::Fdatasync,
    };
    let conn = workload::open(&dir.path().join("u.db"), config).expect("open");
    let spec = StreamSpec {
        op: Op::Update,
        transactions: 10,
        rows_per_tx: 3,
        record_bytes: 50,
        seed: 3,
    };
    workload::fill(&conn, spec.rows_needed(), spec.record_bytes, spec.seed).expect("fill");
    let lat = workload::run_stream(&conn, &spec).expect("update");
    assert_eq!(lat.len(), 10);
    let short: i64 = conn
        .query_row(
            "SELECT count(*) FROM records WHERE length(value) != 50",
            [],
            |r| r.get(0),
        )
        .expect("q");
    assert_eq!(short, 0);
    let spec = StreamSpec {
        op: Op::Delete,
        ..spec
    };
    workload::run_stream(&conn, &spec).expect("delete");
    let left: i64 = conn
        .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
        .expect("count");
    assert_eq!(left, 0, "every pre-filled row deleted exactly once");
}

#[test]
fn bad_stream_specs_are_errors_not_panics() {
    let spec = StreamSpec {
        op: Op::Insert,
        transactions: 0,
        rows_per_tx: 1,
        record_bytes: 100,
        seed: 0,
    };
    assert!(spec.validate().is_err());
    let spec = StreamSpec {
        record_bytes: 0,
        transactions: 1,
        ..spec
    };
    assert!(spec.validate().is_err());
}

#[test]
fn latency_percentiles_are_nearest_rank() {
    let lat: Vec<std::time::Duration> = (1..=100).map(std::time::Duration::from_micros).collect();
    let s = LatencyUs::of(&lat);
    assert_eq!(s.p50, 50.0);
    assert_eq!(s.p95, 95.0);
    assert_eq!(s.p99, 99.0);
    assert_eq!(s.p99_9, 100.0);
    assert_eq!(s.max, 100.0);
    assert!((s.mean - 50.5).abs() < 1e-9);
}
