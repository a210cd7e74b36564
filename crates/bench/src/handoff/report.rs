//! What `roamkv bench handoff` shows: a table on the terminal, results.json, and report.html with
//! the fault rounds' timeline (every handoff's time at the moment it ran, by the fault that struck
//! its move).

use std::collections::BTreeMap;

use roamkv_testbed::report::{
    Html, MachineHeader, bar_chart_svg, scatter_chart_svg, terminal_table,
};

use super::args::{HandoffBenchArgs, Phase};
use super::net::LinkShape;
use super::rounds::{Fault, RoundResult};
use super::transfer::TransferResults;
use crate::error::Result;

/// Nearest-rank percentile (`pct` of 100) of sorted values; 0 for none (a table cell).
fn percentile(sorted: &[f64], pct: f64) -> f64 {
    if sorted.is_empty() {
        0.0
    } else {
        roamkv_testbed::stats::percentile(sorted, pct)
    }
}

/// The fault rounds summed: the counts that must be 0, and what was counted beside them.
#[derive(Debug, Default, serde::Serialize)]
pub struct Totals {
    pub rounds: usize,
    pub handoffs: usize,
    pub acked: u64,
    pub refused: u64,
    pub unknown: u64,
    pub lost_edge: u64,
    pub lost_cloud: u64,
    pub phantom_edge: u64,
    pub phantom_cloud: u64,
    pub duplicates: u64,
    pub early_departs: u64,
    pub redeliveries: u64,
    pub answers: BTreeMap<u16, u64>,
    pub resume_ms_max: f64,
    pub resume_ms_p50: f64,
    pub resumes: usize,
}

impl Totals {
    fn of(rounds: &[RoundResult]) -> Totals {
        let mut t = Totals {
            rounds: rounds.len(),
            ..Totals::default()
        };
        let mut resumes = Vec::new();
        for r in rounds {
            t.handoffs += r.handoff_ms.len();
            t.acked += r.acked;
            t.refused += r.refused;
            t.unknown += r.unknown;
            t.lost_edge += r.edge.lost;
            t.lost_cloud += r.cloud.lost;
            t.phantom_edge += r.edge.phantom;
            t.phantom_cloud += r.cloud.phantom;
            t.duplicates += r.duplicates;
            t.early_departs += r.early_departs;
            t.redeliveries += r.redeliveries;
            for (s, n) in &r.answers {
                *t.answers.entry(*s).or_default() += n;
            }
            resumes.extend(r.faults.iter().filter_map(|f| f.resume_ms));
        }
        resumes.sort_by(f64::total_cmp);
        t.resumes = resumes.len();
        t.resume_ms_p50 = percentile(&resumes, 50.0);
        t.resume_ms_max = resumes.last().copied().unwrap_or(0.0);
        t
    }

    pub fn failures(&self) -> u64 {
        self.lost_edge
            + self.lost_cloud
            + self.phantom_edge
            + self.phantom_cloud
            + self.duplicates
            + self.early_departs
    }
}

/// Per fault: moves, of them struck mid-handoff, handoff times, resumes.
fn by_fault(rounds: &[RoundResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for fault in Fault::ALL {
        let mut times = Vec::new();
        let (mut moves, mut mid, mut resumes) = (0, 0, Vec::new());
        for r in rounds {
            for f in r.faults.iter().filter(|f| f.fault == fault) {
                moves += 1;
                mid += usize::from(f.pending_when_struck > 0);
                resumes.extend(f.resume_ms);
            }
            times.extend(r.handoff_ms_under(fault));
        }
        times.sort_by(f64::total_cmp);
        resumes.sort_by(f64::total_cmp);
        rows.push(vec![
            fault.name().to_string(),
            moves.to_string(),
            mid.to_string(),
            format!("{:.0}", percentile(&times, 50.0)),
            format!("{:.0}", percentile(&times, 99.0)),
            format!("{:.0}", times.last().copied().unwrap_or(0.0)),
            if resumes.is_empty() {
                "-".into()
            } else {
                format!(
                    "{:.0} / {:.0}",
                    percentile(&resumes, 50.0),
                    resumes.last().copied().unwrap_or(0.0)
                )
            },
        ]);
    }
    rows
}

const FAULT_COLUMNS: [&str; 7] = [
    "fault",
    "moves",
    "struck mid-handoff",
    "handoff p50 ms",
    "p99 ms",
    "max ms",
    "resume p50 / max ms",
];

fn totals_rows(t: &Totals) -> Vec<Vec<String>> {
    let row = |k: &str, v: String| vec![k.to_string(), v];
    vec![
        row(
            "rounds / handoffs",
            format!("{} / {}", t.rounds, t.handoffs),
        ),
        row(
            "readings acknowledged / refused / unknown",
            format!("{} / {} / {}", t.acked, t.refused, t.unknown),
        ),
        row(
            "lost (edge / cloud)",
            format!("{} / {}", t.lost_edge, t.lost_cloud),
        ),
        row(
            "phantom (edge / cloud)",
            format!("{} / {}", t.phantom_edge, t.phantom_cloud),
        ),
        row("visible duplicates", t.duplicates.to_string()),
        row(
            "departs before the receiver's commit",
            t.early_departs.to_string(),
        ),
        row(
            "redeliveries to the cloud (sends beyond a row's first)",
            t.redeliveries.to_string(),
        ),
        row(
            "requests by answer (0: no connection, 1: no answer)",
            format!("{:?}", t.answers),
        ),
    ]
}

/// Prints the tables and writes results.json and report.html; the count of failures.
pub fn write(
    args: &HandoffBenchArgs,
    header: &MachineHeader,
    shape: &LinkShape,
    transfer: &TransferResults,
    rounds: &[RoundResult],
) -> Result<u64> {
    let totals = Totals::of(rounds);
    let fault_rows = by_fault(rounds);
    if args.phases.contains(&Phase::Faults) {
        println!("{}", terminal_table(&FAULT_COLUMNS, &fault_rows));
        println!(
            "{}",
            terminal_table(&["fault rounds", "total"], &totals_rows(&totals))
        );
    }
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "seed": args.seed,
        "link": shape,
        "delay_ms_round_trip": args.delay_ms,
        "loss_permille_in_rounds": args.loss_permille,
        "readings": args.readings,
        "value_bytes": args.value_bytes,
        "transfer": transfer,
        "totals": totals,
        "rounds": rounds,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    html(args, header, shape, transfer, rounds, &fault_rows, &totals)
        .write(&args.out.join("report.html"))?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(totals.failures())
}

/// report.html: the links, the transfer phases, the fault rounds' tables and timeline.
fn html(
    args: &HandoffBenchArgs,
    header: &MachineHeader,
    shape: &LinkShape,
    transfer: &TransferResults,
    rounds: &[RoundResult],
    fault_rows: &[Vec<String>],
    totals: &Totals,
) -> Html {
    let mut html = Html::new("roamkv bench handoff: devices across real links", header);
    html.paragraph(&format!(
        "Links: {} Mbit/s (0: unshaped), +{} ms round trip through the relay; {} per mille lost each way at each node in the fault rounds; seed {}.",
        shape.rate_mbit, args.delay_ms, args.loss_permille, args.seed
    ));
    if !transfer.latency_ms.is_empty() {
        html.heading("Latency");
        html.paragraph(&format!(
            "{} handoffs of {} readings ({:.2} MB): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms.",
            transfer.latency_ms.len(),
            args.readings,
            transfer.latency_device_bytes as f64 / 1e6,
            transfer.p50_ms,
            transfer.p99_ms,
            transfer.max_ms
        ));
        let categories: Vec<String> = (0..transfer.latency_ms.len())
            .map(|i| format!("#{i}"))
            .collect();
        html.svg(&bar_chart_svg(
            "Handoff time of each device (ms)",
            "ms",
            &categories,
            &[("handoff".to_string(), transfer.latency_ms.clone())],
        ));
    }
    if transfer.bulk_readings > 0 {
        html.heading("Bulk");
        html.paragraph(&format!(
            "One device of {:.0} MB in {:.1} s: {:.2} MB/s, {:.0} % of the {:.2} MB/s one TCP stream carried through the same path; A's device wrote {:.3} % of the bytes moved; CPU A {:.1} s, B {:.1} s.",
            transfer.bulk_bytes as f64 / 1e6,
            transfer.bulk_seconds,
            transfer.bulk_mb_per_sec,
            transfer.bulk_link_share * 100.0,
            transfer.link_payload_bytes_per_sec / 1e6,
            transfer.bulk_sender_write_share * 100.0,
            transfer.bulk_sender_cpu_s,
            transfer.bulk_receiver_cpu_s
        ));
    }
    if !rounds.is_empty() {
        html.heading("Fault rounds");
        html.table(&FAULT_COLUMNS, fault_rows);
        html.table(&["fault rounds", "total"], &totals_rows(totals));
        html.svg(&timeline(rounds));
    }
    html
}

/// Every handoff at the time its round started, by the fault of its move.
fn timeline(rounds: &[RoundResult]) -> String {
    let series: Vec<(String, Vec<(f64, f64)>)> = Fault::ALL
        .iter()
        .map(|fault| {
            let points = rounds
                .iter()
                .flat_map(|r| r.handoff_ms_under(*fault).map(|ms| (r.started_s, ms)))
                .collect();
            (fault.name().to_string(), points)
        })
        .collect();
    scatter_chart_svg(
        "Each handoff's time, at its round's start, by the fault of its move",
        "s since the first round",
        "handoff ms",
        &series,
    )
}
