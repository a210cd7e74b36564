//! The two text formats a scraper may ask for. prometheus-client writes OpenMetrics 1.0 (what
//! Prometheus asks for first); Prometheus's classic text format 0.0.4 is what `promtool check
//! metrics`, older scrapers and most tools without an Accept header read. They differ, for the
//! metric types this server has, in three ways: a counter's family is named with its `_total`
//! in the classic format (OpenMetrics names the family without it and its samples with it), an
//! info metric is a gauge named with its `_info`, and the classic format has no `# UNIT` lines
//! and no `# EOF`. Samples are the same lines in both.

use std::collections::BTreeMap;

/// A scrape's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Classic,
}

impl Format {
    /// The format the Accept header prefers (its q-values weighed, as Prometheus's client
    /// libraries do): OpenMetrics when it is asked for at least as much as the classic text,
    /// the classic text otherwise (no header, `*/*`, `text/plain`).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut openmetrics = 0.0_f32;
        let mut classic = 0.0_f32;
        for item in accept.unwrap_or("").split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" | "*/*" | "text/*" => classic = classic.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= classic {
            Format::OpenMetrics
        } else {
            Format::Classic
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The OpenMetrics text `openmetrics` in the classic format.
pub fn classic(openmetrics: &str) -> String {
    // Families whose classic name gains a suffix, and the classic type of each.
    let renamed: BTreeMap<&str, (&str, &str)> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .filter_map(|(name, kind)| match kind {
            "counter" => Some((name, ("_total", "counter"))),
            "info" => Some((name, ("_info", "gauge"))),
            _ => None,
        })
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            let (suffix, kind) = renamed.get(name)?;
            let rest = if *prefix == "# TYPE " { kind } else { rest };
            Some(format!("{prefix}{name}{suffix} {rest}"))
        });
        match rewritten {
            Some(line) => out.push_str(&line),
            // "unknown" is OpenMetrics' name for the classic "untyped".
            None => match line
                .strip_prefix("# TYPE ")
                .and_then(|r| r.strip_suffix(" unknown"))
            {
                Some(name) => out.push_str(&format!("# TYPE {name} untyped")),
                None => out.push_str(line),
            },
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_text() {
        // What Prometheus 2.x and 3.x send by default.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(None), Format::Classic);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Classic);
        assert_eq!(
            Format::negotiate(Some("text/plain;version=0.0.4")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=1,application/openmetrics-text;q=0.5")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn counters_and_info_are_renamed_units_and_eof_dropped() {
        let openmetrics = "# HELP roamkv_requests Requests.\n# TYPE roamkv_requests counter\nroamkv_requests_total{route=\"/\"} 3\n# HELP roamkv_build Build.\n# TYPE roamkv_build info\nroamkv_build_info{version=\"1\"} 1\n# HELP roamkv_lag_seconds Lag.\n# TYPE roamkv_lag_seconds gauge\n# UNIT roamkv_lag_seconds seconds\nroamkv_lag_seconds 0.5\n# TYPE x unknown\nx 1\n# EOF\n";
        assert_eq!(
            classic(openmetrics),
            "# HELP roamkv_requests_total Requests.\n# TYPE roamkv_requests_total counter\nroamkv_requests_total{route=\"/\"} 3\n# HELP roamkv_build_info Build.\n# TYPE roamkv_build_info gauge\nroamkv_build_info{version=\"1\"} 1\n# HELP roamkv_lag_seconds Lag.\n# TYPE roamkv_lag_seconds gauge\nroamkv_lag_seconds 0.5\n# TYPE x untyped\nx 1\n"
        );
    }
}
