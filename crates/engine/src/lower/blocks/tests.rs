//! BlockTier against a model: a map of reading keys to values per space, as the tier without
//! blocks held them. Random runs (windows new, settled overlapping what is there), range deletes
//! that cut blocks at either end, and every read (get, scan from any key, last_in) compared
//! with the model, on a real RocksDB tier.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::BlockTier;
use crate::lower::keys::{Place, successor};
use crate::lower::rocks::RocksLower;
use crate::lower::{CatalogOp, Layout, LowerTier, Space};
use crate::model::ids::{LowerId, WindowId};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const SENSORS: [&str; 3] = ["a", "speed", "t"];

fn key(place: Place, device: u64, sensor: &str, ts: i64) -> Vec<u8> {
    place.key(LowerId(device), sensor, ts)
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..3) {
        0 => format!("{:.2}", rng.random_range(0.0..30.0)).into_bytes(),
        1 => rng.random_range(0..1000u32).to_string().into_bytes(),
        _ => (0..rng.random_range(0..12)).map(|_| rng.random()).collect(),
    }
}

/// A sorted run of readings of a few devices over a time range.
fn run(rng: &mut StdRng, place: Place) -> Model {
    let mut out = Model::new();
    let from = rng.random_range(0..3000i64);
    for _ in 0..rng.random_range(1..1500) {
        let device = rng.random_range(1..4u64);
        let sensor = SENSORS[rng.random_range(0..SENSORS.len())];
        let ts = from + rng.random_range(0..2000) * 3;
        out.insert(key(place, device, sensor, ts), value(rng));
    }
    out
}

fn ingest(tier: &BlockTier, space: Space, run: &Model) {
    let prepared = tier
        .prepare_run(space, run.clone().into_iter().collect())
        .expect("prepare");
    tier.ingest(prepared).expect("ingest");
}

fn random_key(rng: &mut StdRng, place: Place) -> Vec<u8> {
    let device = rng.random_range(0..5u64);
    match rng.random_range(0..4) {
        0 => place.device_prefix(LowerId(device)),
        _ => key(
            place,
            device,
            SENSORS[rng.random_range(0..SENSORS.len())],
            rng.random_range(-10..8000),
        ),
    }
}

fn check_reads(tier: &BlockTier, space: Space, place: Place, model: &Model, rng: &mut StdRng) {
    for _ in 0..60 {
        let a = random_key(rng, place);
        let b = random_key(rng, place);
        let (start, end) = if a <= b { (a, b) } else { (b, a) };
        let mut got = Vec::new();
        let limit = rng.random_range(1..400);
        tier.scan(space, &start, &end, &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            got.len() < limit
        })
        .expect("scan");
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .range(start.clone()..end.clone())
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "scan [{start:?}, {end:?}) limit {limit}");
        let last = tier.last_in(space, &start, &end).expect("last_in");
        let want = model
            .range(start.clone()..end.clone())
            .next_back()
            .map(|(k, v)| (k.clone(), v.clone()));
        assert_eq!(last, want, "last_in [{start:?}, {end:?})");
        if start.len() > 16 {
            assert_eq!(
                tier.get(space, &start).expect("get"),
                model.get(&start).cloned(),
                "get {start:?}"
            );
        }
    }
    for (k, v) in model.iter().step_by(97) {
        assert_eq!(tier.get(space, k).expect("get").as_ref(), Some(v));
    }
}

#[test]
fn blocks_read_as_the_readings_they_hold_through_overwrites_and_cut_deletes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner = RocksLower::open(dir.path(), 16 << 20, false, Layout::Blocks).expect("open");
    let tier = BlockTier::new(Box::new(inner));
    let mut rng = StdRng::seed_from_u64(54);
    let mut settled = Model::new();
    let mut windows = Model::new();
    for round in 0..25u64 {
        let place = Place::Window(WindowId(round + 1));
        let window = run(&mut rng, place);
        ingest(&tier, Space::Windows, &window);
        windows.extend(window);
        // Settled runs overlap what is there: the newer reading wins.
        let fresh = run(&mut rng, Place::Settled);
        ingest(&tier, Space::Settled, &fresh);
        settled.extend(fresh);
        if round % 3 == 2 {
            // A trim of one sensor and a cut in the middle of a device: both ends inside blocks.
            let device = rng.random_range(1..4u64);
            let sensor = SENSORS[rng.random_range(0..SENSORS.len())];
            let cut = rng.random_range(0..6000);
            let trim = (
                key(Place::Settled, device, sensor, i64::MIN),
                key(Place::Settled, device, sensor, cut),
            );
            let middle = (
                key(Place::Settled, device, "a", rng.random_range(0..3000)),
                key(Place::Settled, device, "t", rng.random_range(0..6000)),
            );
            let ops: Vec<CatalogOp> = [trim, middle]
                .into_iter()
                .map(|(s, e)| CatalogOp::DeleteRange(Space::Settled, s, e))
                .collect();
            tier.write_catalog(&ops).expect("deletes");
            for op in &ops {
                if let CatalogOp::DeleteRange(_, s, e) = op {
                    let doomed: Vec<Vec<u8>> = settled
                        .range(s.clone()..e.clone())
                        .map(|(k, _)| k.clone())
                        .collect();
                    doomed.iter().for_each(|k| {
                        settled.remove(k);
                    });
                }
            }
        }
        if round % 5 == 4 {
            // A departure: the whole device.
            let device = rng.random_range(1..4u64);
            let (s, e) = Place::Settled.range(LowerId(device), None);
            tier.write_catalog(&[CatalogOp::DeleteRange(Space::Settled, s.clone(), e.clone())])
                .expect("depart");
            let doomed: Vec<Vec<u8>> = settled.range(s..e).map(|(k, _)| k.clone()).collect();
            doomed.iter().for_each(|k| {
                settled.remove(k);
            });
        }
        check_reads(&tier, Space::Settled, Place::Settled, &settled, &mut rng);
        check_reads(&tier, Space::Windows, place, &windows, &mut rng);
    }
    let everything: Vec<u8> = successor(&[0xfe; 8]);
    let mut n = 0;
    tier.scan(Space::Settled, b"", &everything, &mut |_, _| {
        n += 1;
        true
    })
    .expect("scan all");
    assert_eq!(n, settled.len());
    tier.verify().expect("every block decodes");
}

/// A format 2 LevelDB tier (a key per reading, under the old tags) upgraded to blocks reads the
/// same; an upgrade run again from the start (as after a crash before its commit) does too, and
/// leaves the old spaces empty.
#[cfg(feature = "leveldb")]
#[test]
fn a_leveldb_tier_of_format_2_is_upgraded_to_blocks() {
    use crate::dir::{DataDir, LowerTierKind};
    use crate::lower::level::LevelLower;

    let dir = tempfile::tempdir().expect("tempdir");
    let mut data_dir = DataDir::open(dir.path(), Some(LowerTierKind::LevelDb)).expect("dir");
    let lower_dir = data_dir.lower_dir();
    let mut rng = StdRng::seed_from_u64(2);
    let mut windows = Model::new();
    let settled = run(&mut rng, Place::Settled);
    {
        let old = LevelLower::open(&lower_dir, 8 << 20, Layout::Readings).expect("format 2");
        for win in 1..4 {
            let window = run(&mut rng, Place::Window(WindowId(win)));
            let p = old
                .prepare_run(Space::Windows, window.clone().into_iter().collect())
                .expect("prepare");
            old.ingest(p).expect("ingest");
            windows.extend(window);
        }
        let p = old
            .prepare_run(Space::Settled, settled.clone().into_iter().collect())
            .expect("prepare");
        old.ingest(p).expect("ingest");
    }
    for attempt in 0..2 {
        data_dir.format = crate::dir::format::DIR_FORMAT_READINGS;
        let inner = LevelLower::open(&lower_dir, 8 << 20, Layout::Blocks).expect("open");
        let tier = BlockTier::new(Box::new(inner));
        if attempt == 1 {
            // An upgrade cut short before its commit left blocks and the old spaces whole:
            // here, the old spaces are filled again from the model.
            for (space, model) in [
                (Space::LegacyWindows, &windows),
                (Space::LegacySettled, &settled),
            ] {
                let p = tier
                    .prepare_run(space, model.clone().into_iter().collect())
                    .expect("prepare");
                tier.ingest(p).expect("ingest");
            }
        }
        super::upgrade::to_blocks(&tier, &mut data_dir).expect("upgrade");
        assert_eq!(data_dir.format, crate::dir::FORMAT_VERSION);
        for (space, model) in [(Space::Windows, &windows), (Space::Settled, &settled)] {
            let mut got = Model::new();
            tier.scan(space, b"", &[0xff; 9], &mut |k, v| {
                got.insert(k.to_vec(), v.to_vec());
                true
            })
            .expect("scan");
            assert_eq!(&got, model, "{space:?} after upgrade {attempt}");
        }
        for space in [Space::LegacyWindows, Space::LegacySettled] {
            assert_eq!(tier.last_in(space, b"", &[0xff; 9]).expect("last"), None);
        }
    }
}
