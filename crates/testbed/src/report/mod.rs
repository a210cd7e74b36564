//! Reports: a machine header (what ran where), JSON files, and a self-contained HTML page
//! (`html`) with tables and inline SVG charts (`svg`, drawn with plotters' SVG backend, no font
//! files needed). What each command reports lives beside the command; this is the kit.
pub mod header;
pub mod html;
pub mod svg;

pub use header::{MachineHeader, now_utc};
pub use html::{Html, escape};
pub use svg::{bar_chart_svg, line_chart_svg, scatter_chart_svg, series_color};

use crate::error::Error;
use std::path::{Path, PathBuf};

/// Writes DIR/<stem>.json (pretty) and returns its path.
pub fn write_json(dir: &Path, stem: &str, value: &serde_json::Value) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join(format!("{stem}.json"));
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::Parse {
        what: "json".into(),
        detail: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// A table for the terminal (UTF-8 box lines), as every command prints its results.
pub fn terminal_table(columns: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_header(columns.to_vec());
    for row in rows {
        table.add_row(row.clone());
    }
    table.to_string()
}

/// A measured number for a table: three significant digits or so ("1234", "56.7", "8.90"), and
/// "-" for no value (NaN, as `stats` returns for no input).
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        "-".to_string()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A line above the progress bar, or on stderr when the bar is hidden (not a terminal).
pub fn say(bar: &indicatif::ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_about_three_digits_and_nan_is_a_dash() {
        assert_eq!(number(1234.4), "1234");
        assert_eq!(number(56.78), "56.8");
        assert_eq!(number(8.9), "8.90");
        assert_eq!(number(f64::NAN), "-");
    }

    #[test]
    fn a_terminal_table_holds_its_header_and_cells() {
        let text = terminal_table(&["fs", "ops/s"], &[vec!["ext4".into(), "12".into()]]);
        assert!(text.contains("ops/s") && text.contains("ext4") && text.contains("12"));
    }

    #[test]
    fn json_is_written_where_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_json(dir.path(), "r", &serde_json::json!({"a": 1})).expect("write");
        let text = std::fs::read_to_string(path).expect("read");
        assert!(text.contains("\"a\": 1"), "{text}");
    }
}
