//! Kill -9 a real `roamkv load --ack` at random moments. After every kill, `roamkv check` must
//! pass and every record acknowledged in this *and every earlier* round must be there with its
//! exact value (the soak of `roamkv bench crash`, run short).

use std::path::Path;

use roamkv_bench::faults::crash::CrashSoak;
use roamkv_bench::faults::report::RoundRow;

const ROAMKV: &str = env!("CARGO_BIN_EXE_roamkv");
const KILLS: u64 = 24;

fn assert_round_clean(row: &RoundRow) {
    assert!(
        row.corrupt.is_empty(),
        "round {}: corrupt after the kill: {:?}",
        row.round,
        row.corrupt
    );
    assert_eq!(
        row.lost, 0,
        "round {}: acknowledged records lost, e.g. {:?}",
        row.round, row.lost_examples
    );
    assert_eq!(
        row.wrong, 0,
        "round {}: records that were never written: {:?}",
        row.round, row.wrong_examples
    );
}

#[test]
fn sigkill_never_loses_an_acknowledged_record_of_any_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // As `bench crash` runs: most kills land while acknowledgements flow, a few in recovery.
    let mut soak = CrashSoak::new(Path::new(ROAMKV), &data, 0x5eed, 40..400, 20_000)
        .killing_after_first_ack(0..200, 25);
    let mut checked = 0;
    let mut while_acking = 0;
    for _ in 0..KILLS {
        let row = soak.round().expect("round");
        assert_round_clean(&row);
        while_acking += u64::from(row.killed_after_first_ack);
        // Each round re-verifies everything acknowledged so far, not only its own acks.
        assert_eq!(row.acked_checked, soak.ledger().acked_total());
        checked += row.acked_checked;
    }
    eprintln!(
        "{KILLS} kills; {} acknowledged records; {checked} verifications",
        soak.ledger().acked_total()
    );
    assert!(
        soak.ledger().acked_total() > 0,
        "no round acknowledged anything: the test proved nothing"
    );
    assert!(
        while_acking >= KILLS / 2,
        "only {while_acking} of {KILLS} kills came while the loader acknowledged"
    );
}

/// The check above must be able to fail when an *earlier* round's data vanishes: delete a
/// device acknowledged in round 0 behind the soak's back, and round 1 must report it lost.
#[test]
fn a_vanished_earlier_round_is_reported_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // Long rounds: round 0 must acknowledge records of every device.
    let mut soak = CrashSoak::new(Path::new(ROAMKV), &data, 7, 900..1000, 20_000);
    let first = soak.round().expect("round 0");
    assert_round_clean(&first);
    assert!(
        first.acked >= 40,
        "round 0 acknowledged only {} records in ~1 s: cannot test",
        first.acked
    );
    {
        let options = roamkv_engine::Options {
            segment_bytes: roamkv_bench::faults::survival::SEGMENT_BYTES,
            background_maintenance: false,
            ..roamkv_engine::Options::default()
        };
        let engine = roamkv_engine::Engine::open(&data, options).expect("open");
        engine.depart("car-0").expect("depart");
        engine.close().expect("close");
    }
    let second = soak.round().expect("round 1");
    // Round 0's acked records of car-0 (numbers 0, 40, 80, ...) are gone; round 1's may be back.
    let gone_from_round_0 = first.acked.div_ceil(40);
    assert!(
        second.lost >= gone_from_round_0,
        "round 1 reported {} lost, expected at least {gone_from_round_0}",
        second.lost
    );
    assert!(
        second.lost_examples.contains(&0),
        "{:?}",
        second.lost_examples
    );
}

/// The command: a short soak prints its table, writes results.json with the promised fields and
/// exits 0 when nothing was lost; its data directory is removed after a passing run.
#[test]
fn bench_crash_writes_its_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let run = std::process::Command::new(ROAMKV)
        .args(["bench", "crash", "--rounds", "3", "--seed", "1", "--out"])
        .arg(&out)
        .output()
        .expect("roamkv bench crash");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("lost (must be 0)"), "{stdout}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let results: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(results["rounds"], 3);
    assert_eq!(results["lost"], 0);
    assert_eq!(results["corrupt"], 0);
    for field in ["acked_checked", "torn_tails_cut"] {
        assert!(results[field].is_u64(), "{field} missing: {text}");
    }
    assert!(out.join("report.html").exists());
    assert!(!out.join("data").exists());
}
