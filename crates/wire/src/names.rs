//! Names on the wire (an event's device, profile and source names, a reading's resource name, a
//! device or resource named in a route's path) checked by the engine's one id rule,
//! `roamkv_engine::limits::id_rule`, in its words (`limits::id_problem`): what the engine would
//! refuse at `put` is refused here first, with the field's name, before anything is written.

use roamkv_engine::limits::{self, DEVICE_ID_BYTES_MAX, SENSOR_ID_BYTES_MAX};

use crate::error::WireError;

/// `name` against the id rule with a limit of `bytes_max`; the error names it as `what`
/// ("event deviceName is empty", "resourceName contains a NUL byte"). A name from outside may
/// not start with U+0001 either: such ids are the server's own (`check_not_internal`).
pub fn check_name(what: &str, name: &str, bytes_max: usize) -> Result<(), WireError> {
    match limits::id_problem(name, bytes_max) {
        None => check_not_internal(what, name),
        Some(problem) => Err(WireError::bad_input(format!("{what} {problem}"))),
    }
}

/// Refuses a name from outside that starts with U+0001, the prefix of the server's own devices
/// (`limits::INTERNAL_DEVICE_PREFIX`: the index of event ids), so no client writes into them.
pub fn check_not_internal(what: &str, name: &str) -> Result<(), WireError> {
    if name.starts_with(limits::INTERNAL_DEVICE_PREFIX) {
        return Err(WireError::bad_input(format!(
            "{what} starts with U+0001, which roamkv keeps for its own records"
        )));
    }
    Ok(())
}

/// A device named in a route's path: it becomes the engine's device id. The words are those the
/// routes answered with before the rule had one home ("device name: device id is empty").
pub fn check_device_name(name: &str) -> Result<(), WireError> {
    check_name("device name: device id", name, DEVICE_ID_BYTES_MAX)
}

/// A resource named in a route's path: it becomes the engine's sensor id.
pub fn check_resource_name(name: &str) -> Result<(), WireError> {
    check_name("resource name: sensor id", name, SENSOR_ID_BYTES_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_refused_for_what_the_engine_refuses_with_the_field_named() {
        assert_eq!(check_name("resourceName", "speed", 255), Ok(()));
        let message = |result: Result<(), WireError>| result.expect_err("refused").into_message();
        assert_eq!(
            message(check_name("event deviceName", "", 255)),
            "event deviceName is empty"
        );
        assert_eq!(
            message(check_name("profileName", &"p".repeat(256), 255)),
            "profileName is 256 bytes, the limit is 255"
        );
        assert_eq!(
            message(check_name("resourceName", "a\0b", 255)),
            "resourceName contains a NUL byte"
        );
        assert_eq!(
            message(check_device_name("")),
            "device name: device id is empty"
        );
        assert_eq!(
            message(check_resource_name(&"r".repeat(300))),
            "resource name: sensor id is 300 bytes, the limit is 255"
        );
        // The engine refuses the same names at `put`.
        for name in ["", "a\0b", &"d".repeat(300)] {
            let record = roamkv_engine::Record {
                device: name,
                sensor: "s",
                ts_ns: 0,
                value: b"",
            };
            assert!(roamkv_engine::validate_record(&record).is_err(), "{name:?}");
            assert!(check_device_name(name).is_err(), "{name:?}");
        }
    }
}
