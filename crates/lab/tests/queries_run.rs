//! The query runner on a plain directory (no root needed): every query type returns the rows it
//! is meant to, timings are recorded, and the sensor stores agree.

use roamkv_lab::queries::sensor::{self, SensorSpec, SensorStore};
use roamkv_lab::queries::{self, Cache, QueriesArgs, sqlquery};

fn small_config(rows: usize) -> queries::QueriesConfig {
    let args = QueriesArgs {
        quick: true,
        fs: Some("ext4".into()),
        rows: Some(rows),
        repetitions: Some(3),
        cold_repetitions: Some(2),
        cache: "warm,cold".into(),
        no_sensor: true,
        sensor_devices: None,
        sensor_readings: None,
        seed: 11,
        out: "unused".into(),
    };
    args.resolve().expect("valid arguments")
}

#[test]
fn every_query_type_returns_its_expected_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows = 5_000;
    let config = small_config(rows);
    let tables = queries::generate_tables(&config).expect("tables");
    let db = queries::load_database(dir.path(), &tables).expect("load");
    let no_op = || Ok(());
    let quiet = |_: &str| {};
    for cache in [Cache::Warm, Cache::Cold] {
        let set = queries::QuerySet {
            db: &db,
            fs_name: "plain",
            cache,
            repetitions: 3,
            rows,
            seed: 11,
        };
        let runs = queries::run_query_set(&set, &no_op, &quiet).expect("queries");
        let names: Vec<&str> = runs.iter().map(|r| r.query.as_str()).collect();
        assert_eq!(
            names,
            [
                "point",
                "set",
                "range-100",
                "range-1000",
                "range-all",
                "multi",
                "join"
            ]
        );
        for r in &runs {
            assert_eq!(r.timing_us.repetitions, 3);
            assert!(r.timing_us.mean > 0.0 && r.timing_us.p95 >= r.timing_us.median);
            let expected = match r.query.as_str() {
                "point" => Some(1.0),
                "join" | "range-100" => Some(100.0),
                "range-1000" => Some(1000.0),
                "range-all" => Some(rows as f64),
                _ => None,
            };
            match expected {
                Some(e) => assert_eq!(r.result_rows_mean, e, "{}", r.query),
                // ~200 rows for set, ~100 for multi: a window, not an exact count.
                None => assert!(
                    r.result_rows_mean > 0.0 && r.result_rows_mean < 1_000.0,
                    "{}: {}",
                    r.query,
                    r.result_rows_mean
                ),
            }
        }
    }
}

#[test]
fn query_list_scales_ranges_to_the_table() {
    let names: Vec<String> = sqlquery::query_kinds(1_000_000)
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(
        names,
        [
            "point",
            "set",
            "range-100",
            "range-1000",
            "range-10000",
            "range-100000",
            "range-all",
            "multi",
            "join"
        ]
    );
}

#[test]
fn bad_cache_and_fs_names_list_the_valid_ones() {
    let err = Cache::parse_list("tepid").expect_err("tepid").to_string();
    assert!(err.contains("cold, warm"), "{err}");
    let mut args = QueriesArgs {
        quick: true,
        fs: Some("fat".into()),
        rows: None,
        repetitions: None,
        cold_repetitions: None,
        cache: "warm".into(),
        no_sensor: true,
        sensor_devices: None,
        sensor_readings: None,
        seed: 1,
        out: "x".into(),
    };
    let err = args.resolve().expect_err("fat is not a lab fs").to_string();
    assert!(err.contains("xfs") && err.contains("ext4"), "{err}");
    args.fs = None;
    args.rows = Some(10);
    assert!(args.resolve().is_err(), "10 rows is below the minimum");
}

#[test]
fn ratios_compare_means_between_file_systems() {
    let mk = |fs: &str, q: &str, indexed: bool, mean: f64| queries::QueryRun {
        fs: fs.into(),
        cache: Cache::Warm,
        query: q.into(),
        indexed,
        range_rows: None,
        timing_us: sqlquery::TimingUs {
            repetitions: 1,
            mean,
            median: mean,
            p95: mean,
            min: mean,
            max: mean,
        },
        result_rows_mean: 1.0,
    };
    let runs = vec![
        mk("xfs", "point", true, 10.0),
        mk("ext4", "point", true, 12.0),
        mk("xfs", "set", false, 100.0),
        mk("ext4", "set", false, 90.0),
    ];
    let r = queries::ratios(&runs, &["xfs".into(), "ext4".into()]);
    let get = |q: &str| r.iter().find(|x| x.query == q).map(|x| x.ratio).expect(q);
    assert!((get("point") - 1.2).abs() < 1e-9);
    assert!((get("set") - 0.9).abs() < 1e-9);
    assert!((get("indexed (geo-mean)") - 1.2).abs() < 1e-9);
}

#[test]
fn sqlite_sensor_store_answers_the_five_questions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SensorSpec {
        devices: 20,
        sensors_per_device: 4,
        readings_per_sensor: 200,
        value_bytes: 16,
        seed: 4,
    };
    let store = sensor::SqliteSensor::load(dir.path(), &spec).expect("load");
    for name in sensor::QUERY_NAMES {
        for q in sensor::params(&spec, name, 5) {
            let rows = store.answer(&q).expect("answer");
            match name {
                "point" => assert_eq!(rows, 1),
                "range" => assert_eq!(rows, 100),
                "join" => assert_eq!(rows, 100, "10 watched devices x 10 readings"),
                // 16,000 readings, first byte = k: about 62; with second byte < 64 about 16.
                "set" => assert!((20..150).contains(&rows), "set {rows}"),
                _ => assert!(rows < 60, "multi {rows}"),
            }
        }
    }
    let runs = sensor::measure(&store, "plain", &spec, 4, 0.0).expect("measure");
    assert_eq!(runs.len(), 5);
    sensor::check_agreement(&runs).expect("one store agrees with itself");
}
