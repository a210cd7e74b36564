//! The fleet run's terminal tables, results.json and report.html: one row per fleet size (the
//! aggregate drain against N, what one more edge adds and costs the brokers), one row per edge.

use std::path::Path;

use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg, line_chart_svg};

use super::{FleetResults, FleetSize};
use crate::error::Result;

/// Prints the tables and writes `out/results.json` and `out/report.html`.
pub fn write(
    out: &Path,
    header: &MachineHeader,
    setup: serde_json::Value,
    results: &FleetResults,
) -> Result<()> {
    let sizes = sizes_table(&results.sizes);
    let edges = edges_table(&results.sizes);
    println!("{sizes}\n{edges}");
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "setup": setup,
        "results": results,
    });
    roamkv_testbed::report::write_json(out, "results", &json)?;
    let mut html = Html::new(
        "roamkv bench sink --kafka --edges: a fleet draining into one Kafka cluster",
        header,
    );
    html.paragraph(&format!(
        "Three Kafka 4.4 nodes (KRaft, replication 3), up in {:.1} s; each fleet size its own \
         topic and its own edges (roamkv serve, each its own data directory and network \
         namespace, a veth pair to a bridge the brokers and clients reach); \
         first one edge's backlog drained to warm the brokers up ({:.0} readings/s, not a size).",
        results.cluster_startup_s, results.warm_up_readings_per_sec
    ));
    html.preformatted(&sizes.to_string());
    html.preformatted(&edges.to_string());
    let categories: Vec<String> = results
        .sizes
        .iter()
        .map(|s| format!("{} edges", s.edges))
        .collect();
    let aggregate = results
        .sizes
        .iter()
        .map(|s| s.aggregate_readings_per_sec)
        .collect();
    let each = results
        .sizes
        .iter()
        .map(|s| s.aggregate_readings_per_sec / s.edges as f64)
        .collect();
    html.svg(&bar_chart_svg(
        "Drain into one cluster against the fleet's size",
        "readings/s",
        &categories,
        &[("the fleet".into(), aggregate), ("per edge".into(), each)],
    ));
    let series: Vec<_> = results
        .sizes
        .iter()
        .flat_map(|s| s.lag_series.iter().cloned())
        .collect();
    html.svg(&line_chart_svg(
        "Each edge's sink lag at the per-edge rate",
        "seconds since the phase began",
        "lag (s)",
        &series,
    ));
    html.write(&out.join("report.html"))?;
    println!("wrote {0}/results.json, {0}/report.html", out.display());
    Ok(())
}

/// One row per fleet size.
fn sizes_table(sizes: &[FleetSize]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "edges",
        "backlog (readings)",
        "drain, fleet (readings/s)",
        "drain per edge (readings/s)",
        "added by the last edges (readings/s per edge)",
        "brokers: cores, CPU ms per 1k readings",
        "edges' cores",
        "lag p99 worst / pooled (s) at readings/s each",
        "acknowledged / once / twice",
        "load before -> after",
    ]);
    let mut previous: Option<&FleetSize> = None;
    for s in sizes {
        let added = previous.map_or("-".to_string(), |p| {
            let per = (s.aggregate_readings_per_sec - p.aggregate_readings_per_sec)
                / (s.edges as f64 - p.edges as f64).max(1.0);
            format!("{per:+.0}")
        });
        table.add_row(vec![
            s.edges.to_string(),
            s.backlog_readings.to_string(),
            format!("{:.0}", s.aggregate_readings_per_sec),
            format!("{:.0}", s.aggregate_readings_per_sec / s.edges as f64),
            added,
            format!(
                "{:.2}, {:.1}",
                s.brokers_cores_drain, s.brokers_cpu_ms_per_1k_readings
            ),
            format!("{:.2}", s.edges_cores_drain),
            format!(
                "{:.2} / {:.2} at {:.0}",
                s.lag_p99_worst_s, s.lag_p99_pooled_s, s.rate_per_edge
            ),
            format!(
                "{} / {} / {}{}",
                s.acked_readings,
                s.topic.distinct_readings,
                s.topic.duplicated,
                if s.each_once() { "" } else { " FAILED" }
            ),
            format!("{} -> {}", s.load_before, s.load_after),
        ]);
        previous = Some(s);
    }
    table
}

/// One row per edge of every size.
fn edges_table(sizes: &[FleetSize]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.set_header(vec![
        "edges",
        "edge id",
        "backlog",
        "first commit (ms)",
        "drain (readings/s)",
        "lag p50 / p99 / max (s)",
        "acknowledged / in the topic once / twice",
    ]);
    for s in sizes {
        for e in &s.per_edge {
            table.add_row(vec![
                s.edges.to_string(),
                e.edge_id.clone(),
                e.backlog_readings.to_string(),
                format!("{:.0}", e.first_commit_after_ms),
                format!("{:.0}", e.drain_readings_per_sec),
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    e.lag_p50_s, e.lag_p99_s, e.lag_max_s
                ),
                format!(
                    "{} / {} / {}",
                    e.acked_readings, e.topic_readings, e.topic_duplicated
                ),
            ]);
        }
    }
    table
}
