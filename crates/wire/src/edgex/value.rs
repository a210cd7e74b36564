//! A reading's `value` held to its `valueType`, as EdgeX's contracts hold it (go-mod-core-contracts
//! validates a simple reading's value by parsing it as its type): integers in their type's range,
//! floats finite unless written as NaN or Inf, booleans as Go's `strconv.ParseBool` takes them,
//! arrays bracketed with every element of the element type. A refused value is a 400 naming the
//! type and the value; nothing of its event is written.

/// Checks `value` against `value_type` (a simple type: not Binary or Object).
pub fn check_value(value_type: &str, value: &str) -> Result<(), String> {
    if let Some(element_type) = value_type.strip_suffix("Array") {
        return check_array(value_type, element_type, value);
    }
    if check_scalar(value_type, value) {
        Ok(())
    } else {
        Err(format!(
            "value {value:?} is not a {value_type}{}",
            range_note(value_type)
        ))
    }
}

/// `[a, b, c]`: every element (trimmed) a value of `element_type`; a StringArray's elements are
/// any text.
fn check_array(value_type: &str, element_type: &str, value: &str) -> Result<(), String> {
    let inner = value
        .trim()
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .ok_or_else(|| format!("value {value:?} of a {value_type} is not a bracketed list"))?;
    if element_type == "String" || inner.trim().is_empty() {
        return Ok(());
    }
    for element in inner.split(',') {
        let element = element.trim().trim_matches('"');
        if !check_scalar(element_type, element) {
            return Err(format!(
                "element {element:?} of the {value_type} {value:?} is not a {element_type}{}",
                range_note(element_type)
            ));
        }
    }
    Ok(())
}

fn check_scalar(value_type: &str, value: &str) -> bool {
    match value_type {
        "Bool" => matches!(
            value,
            "1" | "t"
                | "T"
                | "TRUE"
                | "true"
                | "True"
                | "0"
                | "f"
                | "F"
                | "FALSE"
                | "false"
                | "False"
        ),
        "String" => true,
        "Uint8" => unsigned::<u8>(value),
        "Uint16" => unsigned::<u16>(value),
        "Uint32" => unsigned::<u32>(value),
        "Uint64" => unsigned::<u64>(value),
        "Int8" => value.parse::<i8>().is_ok(),
        "Int16" => value.parse::<i16>().is_ok(),
        "Int32" => value.parse::<i32>().is_ok(),
        "Int64" => value.parse::<i64>().is_ok(),
        "Float32" => value
            .parse::<f32>()
            .is_ok_and(|f| f.is_finite() || names_a_special(value)),
        "Float64" => value
            .parse::<f64>()
            .is_ok_and(|f| f.is_finite() || names_a_special(value)),
        _ => false,
    }
}

/// Go's ParseUint takes no sign; Rust's parse takes a `+`.
fn unsigned<T: std::str::FromStr>(value: &str) -> bool {
    !value.starts_with('+') && value.parse::<T>().is_ok()
}

/// "NaN", "Inf", "+Infinity", ...: a float that is not finite on purpose, not one out of range
/// (`1e999` parses to infinity in Rust; Go's ParseFloat refuses it).
fn names_a_special(value: &str) -> bool {
    let word = value.trim_start_matches(['+', '-']).to_ascii_lowercase();
    matches!(word.as_str(), "nan" | "inf" | "infinity")
}

fn range_note(value_type: &str) -> &'static str {
    match value_type {
        "Bool" => " (true or false)",
        "Uint8" => " (0..=255)",
        "Uint16" => " (0..=65535)",
        "Uint32" => " (0..=4294967295)",
        "Uint64" => " (0..=18446744073709551615)",
        "Int8" => " (-128..=127)",
        "Int16" => " (-32768..=32767)",
        "Int32" => " (-2147483648..=2147483647)",
        "Int64" => " (a signed 64-bit integer)",
        "Float32" => " (a finite 32-bit float, or NaN/Inf)",
        "Float64" => " (a finite 64-bit float, or NaN/Inf)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::check_value;

    #[test]
    fn values_that_edgex_refuses_are_refused() {
        for (value_type, value) in [
            ("Float64", "abc"),
            ("Bool", "maybe"),
            ("Uint8", "300"),
            ("Uint8", "-1"),
            ("Uint8", "+1"),
            ("Int64", "9223372036854775808"),
            ("Float64", "1e999"),
            ("Float32", "3.5e38"),
            ("Int8Array", "[1, 2, 300]"),
            ("Float64Array", "1, 2"),
            ("BoolArray", "[true, perhaps]"),
        ] {
            let message = check_value(value_type, value)
                .expect_err(&format!("{value_type} {value:?} was accepted"));
            assert!(
                message.contains(value_type.trim_end_matches("Array")),
                "{message}"
            );
        }
    }

    #[test]
    fn values_that_edgex_takes_are_taken() {
        for (value_type, value) in [
            ("Float64", "39.5"),
            ("Float64", "-1.5e-7"),
            ("Float64", "NaN"),
            ("Float32", "+Inf"),
            ("Bool", "true"),
            ("Bool", "F"),
            ("Uint8", "255"),
            ("Int64", "-9223372036854775808"),
            ("Uint64", "18446744073709551615"),
            ("String", ""),
            ("Int16Array", "[1, -2, 3]"),
            ("Float64Array", "[]"),
            ("StringArray", "[a, b]"),
            ("BoolArray", "[true,false]"),
        ] {
            assert_eq!(
                check_value(value_type, value),
                Ok(()),
                "{value_type} {value:?}"
            );
        }
    }
}
