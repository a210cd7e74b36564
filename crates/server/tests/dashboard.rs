//! The Grafana dashboard in packaging/grafana/roamkv.json charts only what the server exports:
//! every metric name in every panel's expression (and in the server picker's query) is a sample
//! name of a family that `/metrics` declares. A metric renamed without its dashboard, or a panel
//! written against a metric that does not exist, fails here.

mod common;

use std::collections::BTreeSet;

use common::Server;
use serde_json::Value;

/// The sample names `/metrics` may carry, from its `# TYPE` lines: a counter's `_total`, a
/// histogram's `_bucket`, `_sum` and `_count`, a gauge's own name.
fn exported(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(family), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{family}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{family}{suffix}"));
                }
            }
            _ => {
                names.insert(family.to_string());
            }
        }
    }
    names
}

/// The metric names an expression uses: words that start with `roamkv_` or `process_`.
fn used(expression: &str) -> Vec<String> {
    expression
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("roamkv_") || word.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_expression_names_an_exported_metric() {
    let server = Server::start(|_| {}).await;
    // As Prometheus scrapes it: OpenMetrics, which exported() reads.
    let answer = server
        .client
        .get(format!("{}/metrics", server.base))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .expect("scrape");
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.expect("body");
    let exported = exported(&text);
    assert!(exported.len() > 40, "{exported:?}");

    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/grafana/roamkv.json"
    );
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read the dashboard"))
            .expect("the dashboard is JSON");
    let mut expressions: Vec<String> = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(
            !targets.is_empty(),
            "panel {} charts nothing",
            panel["title"]
        );
        expressions.extend(
            targets
                .iter()
                .map(|t| t["expr"].as_str().expect("expr").to_string()),
        );
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"].as_str() {
            expressions.push(query.to_string());
        }
    }
    let mut unknown = Vec::new();
    let mut charted = BTreeSet::new();
    for expression in &expressions {
        for name in used(expression) {
            if !exported.contains(&name) {
                unknown.push(format!("{name} (in {expression})"));
            }
            charted.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "the dashboard uses metrics /metrics does not have: {unknown:#?}"
    );
    for needed in [
        "roamkv_ingested_readings_total",
        "roamkv_http_request_duration_seconds_bucket",
        "roamkv_devices",
        "roamkv_log_budget_bytes",
        "roamkv_write_stalls_total",
        "roamkv_sink_lag_seconds",
        "roamkv_handoffs_done_total",
    ] {
        assert!(
            charted.contains(needed),
            "the dashboard does not chart {needed}"
        );
    }
    server.stop().await;
}
