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
    fn json_is_written_where_asked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_json(dir.path(), "r", &serde_json::json!({"a": 1})).expect("write");
        let text = std::fs::read_to_string(path).expect("read");
        assert!(text.contains("\"a\": 1"), "{text}");
    }
}
