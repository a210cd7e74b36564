//! Long-lived devices do not fragment the lower tier: a read of one device touches at most
//! `WINDOWS_PER_DEVICE_MAX` windows, and window files stay within
//! `WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX` of their live bytes (past `WINDOW_DEAD_BYTES_MIN`
//! of dead bytes), however long the stream runs. Both limits are checked after every
//! management time, with every reading read back.

mod common;

use common::*;
use roamkv_engine::limits::{
    WINDOW_DEAD_BYTES_MIN, WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX, WINDOWS_PER_DEVICE_MAX,
};
use roamkv_engine::{Durability, Engine, Options, Record};

fn lower_runs(engine: &Engine, device: &str) -> usize {
    engine
        .devices()
        .into_iter()
        .find(|d| d.name == device)
        .map_or(0, |d| d.lower_runs)
}

fn count(engine: &Engine, device: &str) -> usize {
    let readings = engine.scan(device, None, i64::MIN, i64::MAX).expect("scan");
    for r in &readings {
        assert_eq!(r.value, value(device, &r.sensor, r.ts_ns, 100), "{r:?}");
    }
    readings.len()
}

#[test]
fn a_device_that_stays_for_months_is_read_from_a_bounded_number_of_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let engine = open(dir.path(), &clock);
    let periods = 3 * WINDOWS_PER_DEVICE_MAX as i64;
    for period in 0..periods {
        for ts in period * 10..period * 10 + 10 {
            engine
                .put("truck", "km", ts, &value("truck", "km", ts, 100))
                .expect("put");
        }
        settle(&engine, &clock);
        let runs = lower_runs(&engine, "truck");
        assert!(
            runs <= WINDOWS_PER_DEVICE_MAX + 1,
            "period {period}: truck reads {runs} runs (windows + the settled store)"
        );
        assert_eq!(count(&engine, "truck"), (period as usize + 1) * 10);
    }
    let s = engine.stats();
    assert!(s.consolidations >= 2, "{s:?}");
    assert_eq!(s.windows_per_device_max, WINDOWS_PER_DEVICE_MAX as u64);
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_eq!(count(&engine, "truck"), periods as usize * 10);
    assert!(lower_runs(&engine, "truck") <= WINDOWS_PER_DEVICE_MAX + 1);
}

/// Window files past the space bound (and the dead floor) are emptied of the few devices that
/// still read them, and drop.
fn within_space_bound(file_bytes: u64, live_bytes: u64) -> bool {
    file_bytes * 100 <= live_bytes * WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX
        || file_bytes.saturating_sub(live_bytes) <= WINDOW_DEAD_BYTES_MIN
}

#[test]
fn windows_mostly_dead_are_emptied_so_space_stays_within_its_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock();
    let options = Options {
        durability: Durability::None,
        segment_bytes: 4 << 20,
        ..options(&clock)
    };
    let engine = Engine::open(dir.path(), options.clone()).expect("open");
    // Each period: a keeper that stays for good writes a little between what passing buses
    // write (8 MiB); the buses leave once their readings are in windows. Each window is then
    // nearly all dead, kept alive by its keeper's few readings.
    let value_bytes = 100;
    let bus_readings_per_keeper_reading = 400;
    let periods = 2 * WINDOW_DEAD_BYTES_MIN / (8 << 20) + 2;
    for period in 0..periods as i64 {
        let keeper = format!("keeper-{period}");
        let buses: Vec<String> = (0..20).map(|b| format!("bus-{period}-{b}")).collect();
        let mut ts = 0;
        while ts * value_bytes as i64 * bus_readings_per_keeper_reading < 8 << 20 {
            let values: Vec<(usize, Vec<u8>)> = (0..bus_readings_per_keeper_reading as usize)
                .map(|i| {
                    let bus = i % buses.len();
                    (bus, value(&buses[bus], "gps", ts * 1000 + i as i64, 100))
                })
                .collect();
            let records: Vec<Record> = values
                .iter()
                .enumerate()
                .map(|(i, (bus, v))| Record {
                    device: &buses[*bus],
                    sensor: "gps",
                    ts_ns: ts * 1000 + i as i64,
                    value: v,
                })
                .collect();
            engine.put_batch(&records).expect("buses");
            engine
                .put(&keeper, "temp", ts, &value(&keeper, "temp", ts, 100))
                .expect("keeper");
            ts += 1;
        }
        settle(&engine, &clock);
        for bus in &buses {
            engine.depart(bus).expect("depart");
        }
        // The departures' segment leaves the log and the windows' bookkeeping sees them.
        settle(&engine, &clock);
        let s = engine.stats();
        assert!(
            within_space_bound(s.window_file_bytes, s.window_live_bytes),
            "period {period}: window files {} B for {} live B ({} %, bound {} % past {} dead B)",
            s.window_file_bytes,
            s.window_live_bytes,
            s.window_space_amplification_percent,
            WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX,
            WINDOW_DEAD_BYTES_MIN
        );
        assert_eq!(count(&engine, &keeper), ts as usize);
    }
    let s = engine.stats();
    // Keepers have a few windows each, far below the runs bound: consolidations here are the
    // space bound's.
    assert!(s.consolidations >= 1, "{s:?}");
    assert!(s.windows_dropped >= 1, "{s:?}");
    drop(engine);
    let engine = Engine::open(dir.path(), options).expect("reopen");
    for period in 0..periods as i64 {
        let keeper = format!("keeper-{period}");
        assert!(count(&engine, &keeper) > 0, "{keeper}");
        assert_eq!(count(&engine, &format!("bus-{period}-0")), 0);
    }
}
