//! Every format read back (Parquet and Arrow by the arrow-rs readers, CSV by the csv crate, JSON
//! lines by serde_json) and compared value by value with the engine's own scan: native text,
//! native binary, and EdgeX readings of numeric, text and binary types. pyarrow reads them in
//! the Python package's tests (python/tests).

use std::io::Cursor;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType, UInt64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use roamkv_engine::{Engine, Options, Reading};
use roamkv_export::{Export, ExportError, Format, Request, Selection};
use roamkv_wire::edgex::StoredReading;

const T0: i64 = 1_700_000_000_000_000_000;

fn stored(value_type: &str, value: Option<&str>, binary: Option<&[u8]>) -> Vec<u8> {
    let reading = StoredReading {
        event_id: "e1".into(),
        event_origin: T0,
        profile_name: "profile".into(),
        source_name: "source".into(),
        id: "r1".into(),
        origin: T0,
        value_type: value_type.into(),
        units: Some("C".into()),
        value: value.map(str::to_owned),
        binary_value: binary.map(|b| serde_bytes::ByteBuf::from(b.to_vec())),
        media_type: binary.map(|_| "application/octet-stream".into()),
        object_value: None,
        tags: None,
        event_tags: None,
    };
    let mut bytes = Vec::new();
    ciborium::into_writer(&reading, &mut bytes).expect("encode");
    bytes
}

/// (device, sensor, value, expected value_type, text, int, uint, float)
type Row = (
    Vec<u8>,
    Option<&'static str>,
    Option<String>,
    Option<i64>,
    Option<u64>,
    Option<f64>,
);

fn fill(engine: &Engine) -> Vec<(String, String, i64, Row)> {
    let mut expected = Vec::new();
    let mut put = |device: &str, sensor: &str, i: i64, row: Row| {
        engine.put(device, sensor, T0 + i, &row.0).expect("put");
        expected.push((device.to_string(), sensor.to_string(), T0 + i, row));
    };
    for i in 0..300 {
        put(
            "car-1",
            "speed",
            i,
            (
                format!("{i}.5").into_bytes(),
                None,
                Some(format!("{i}.5")),
                None,
                None,
                None,
            ),
        );
        put(
            "car-1",
            "blob",
            i,
            (vec![0xff, 0, i as u8], None, None, None, None, None),
        );
        let v = (i * 3 - 100).to_string();
        put(
            "edgex-dev",
            "int",
            i,
            (
                stored("Int32", Some(&v), None),
                Some("Int32"),
                Some(v.clone()),
                Some(i * 3 - 100),
                None,
                None,
            ),
        );
        let v = (i as u64 * 7).to_string();
        put(
            "edgex-dev",
            "uint",
            i,
            (
                stored("Uint64", Some(&v), None),
                Some("Uint64"),
                Some(v.clone()),
                None,
                Some(i as u64 * 7),
                None,
            ),
        );
        let v = format!("{}.25", i);
        put(
            "edgex-dev",
            "temp",
            i,
            (
                stored("Float64", Some(&v), None),
                Some("Float64"),
                Some(v.clone()),
                None,
                None,
                Some(i as f64 + 0.25),
            ),
        );
        put(
            "edgex-dev",
            "name",
            i,
            (
                stored("String", Some("a \"quoted\", text"), None),
                Some("String"),
                Some("a \"quoted\", text".into()),
                None,
                None,
                None,
            ),
        );
        put(
            "edgex-dev",
            "image",
            i,
            (
                stored("Binary", None, Some(&[1, 2, 3])),
                Some("Binary"),
                None,
                None,
                None,
                None,
            ),
        );
    }
    expected.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
    expected
}

fn open(dir: &std::path::Path) -> Engine {
    let options = Options {
        background_maintenance: false,
        ..Options::default()
    };
    Engine::open(dir, options).expect("open")
}

fn export(engine: &Engine, format: Format, selection: Selection) -> Vec<u8> {
    let request = Request {
        selection,
        sensor: None,
        from_ns: i64::MIN,
        to_ns: i64::MAX,
        format,
    };
    let plan = Export::plan(engine, request).expect("plan");
    let (summary, out) = plan.write(engine, Vec::new()).expect("write");
    assert!(summary.exact);
    out
}

fn check_batches(batches: &[RecordBatch], expected: &[(String, String, i64, Row)]) {
    let mut at = 0;
    for batch in batches {
        let c = |name: &str| batch.column_by_name(name).expect(name).clone();
        let (device, sensor, ts, value) = (c("device"), c("sensor"), c("ts"), c("value"));
        let (value_type, text) = (c("value_type"), c("value_text"));
        let (int, uint, float) = (c("value_int"), c("value_uint"), c("value_float"));
        for i in 0..batch.num_rows() {
            let (d, s, t, row) = &expected[at];
            let opt_str = |a: &dyn Array| {
                let a = a.as_string::<i32>();
                (!a.is_null(i)).then(|| a.value(i).to_string())
            };
            assert_eq!(device.as_string::<i32>().value(i), d);
            assert_eq!(sensor.as_string::<i32>().value(i), s);
            assert_eq!(ts.as_primitive::<TimestampNanosecondType>().value(i), *t);
            assert_eq!(value.as_binary::<i32>().value(i), row.0.as_slice());
            assert_eq!(
                opt_str(value_type.as_ref()).as_deref(),
                row.1,
                "{d}/{s}/{t}"
            );
            let native_binary = row.1.is_none() && std::str::from_utf8(&row.0).is_err();
            if !native_binary {
                assert_eq!(opt_str(text.as_ref()), row.2, "{d}/{s}/{t}");
            }
            let int = int.as_primitive::<Int64Type>();
            assert_eq!((!int.is_null(i)).then(|| int.value(i)), row.3);
            let uint = uint.as_primitive::<UInt64Type>();
            assert_eq!((!uint.is_null(i)).then(|| uint.value(i)), row.4);
            let float = float.as_primitive::<Float64Type>();
            assert_eq!((!float.is_null(i)).then(|| float.value(i)), row.5);
            at += 1;
        }
    }
    assert_eq!(at, expected.len());
}

#[test]
fn parquet_and_arrow_read_back_value_by_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path());
    let expected = fill(&engine);
    let parquet = export(&engine, Format::Parquet, Selection::All);
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(parquet))
        .expect("parquet")
        .build()
        .expect("reader");
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
    check_batches(&batches, &expected);
    let arrow = export(&engine, Format::Arrow, Selection::All);
    let reader = arrow_ipc::reader::StreamReader::try_new(Cursor::new(arrow), None).expect("ipc");
    let batches: Vec<RecordBatch> = reader.map(|b| b.expect("batch")).collect();
    check_batches(&batches, &expected);
}

#[test]
fn csv_and_json_lines_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path());
    let expected = fill(&engine);
    let csv = export(&engine, Format::Csv, Selection::All);
    let mut reader = csv::Reader::from_reader(csv.as_slice());
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), expected.len());
    for (row, (d, s, t, e)) in rows.iter().zip(&expected) {
        assert_eq!(
            (&row[0], &row[1], row[3].parse::<i64>().expect("ts_ns")),
            (d.as_str(), s.as_str(), *t)
        );
        assert_eq!(&row[4], e.1.unwrap_or(""));
        match &e.2 {
            Some(text) if e.1.is_some() || std::str::from_utf8(&e.0).is_ok() => {
                assert_eq!(&row[5], text)
            }
            _ => {
                use base64::Engine as _;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&row[6])
                    .expect("b64");
                assert_eq!(bytes, e.0);
            }
        }
    }
    // JSON lines: the scan's form, which `roamkv load` reads back.
    let jsonl = export(
        &engine,
        Format::Jsonl,
        Selection::Devices(vec!["car-1".into()]),
    );
    let scanned: Vec<Reading> = engine
        .scan("car-1", None, i64::MIN, i64::MAX)
        .expect("scan");
    let lines: Vec<serde_json::Value> = std::str::from_utf8(&jsonl)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines.len(), scanned.len());
    for (line, r) in lines.iter().zip(scanned) {
        assert_eq!(*line, roamkv_wire::edgex::readable::reading_json(r));
    }
}

#[test]
fn bad_requests_are_refused_before_a_byte_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path());
    fill(&engine);
    let request = |selection, from_ns, to_ns| Request {
        selection,
        sensor: None,
        from_ns,
        to_ns,
        format: Format::Csv,
    };
    let unknown = Selection::Devices(vec!["car-1".into(), "nope".into()]);
    assert!(matches!(
        Export::plan(&engine, request(unknown, 0, 1)),
        Err(ExportError::UnknownDevice(name)) if name == "nope"
    ));
    assert!(matches!(
        Export::plan(&engine, request(Selection::All, 5, 5)),
        Err(ExportError::BadRequest(_))
    ));
    assert!(matches!(
        Format::parse("xml"),
        Err(ExportError::BadRequest(_))
    ));
}
