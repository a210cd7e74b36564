//! `roamkv load`'s input lines on arbitrary bytes: parsing must never panic, and a reading that
//! parses must come back unchanged through the output form (`get`/`scan`) and parse again.
#![no_main]

#[path = "../../src/json.rs"]
#[allow(dead_code)]
mod json;

use json::{InputLine, OutputLine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(line) = serde_json::from_str::<InputLine>(text) else {
        return;
    };
    let (Ok(value), Ok(ts_ns)) = (line.value_bytes(), line.ts_ns()) else {
        return;
    };
    let out = OutputLine::new(&line.device, &line.sensor, ts_ns, &value);
    let printed = serde_json::to_string(&out).expect("an output line serializes");
    let again: InputLine = serde_json::from_str(&printed).expect("an output line parses as input");
    assert_eq!(
        (again.device.as_str(), again.sensor.as_str(), again.ts_ns()),
        (line.device.as_str(), line.sensor.as_str(), Ok(ts_ns))
    );
    assert_eq!(again.value_bytes().expect("value of a printed line"), value);
});
