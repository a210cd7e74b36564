//! What `roamkv bench serve` shows: the terminal table, results.json, and report.html with a
//! chart per figure (rate, p99 at peak and at half the peak, CPU per reading) and the method.

use std::collections::BTreeMap;

use roamkv_testbed::report::{Html, MachineHeader, bar_chart_svg};

use crate::error::Result;
use crate::serve::peers;
use crate::serve::plan::{AckDurability, Plan, ServeBenchArgs};
use crate::serve::results::{DecodeCost, DeviceProbe, ServeRun, ServeSummary};

pub(super) fn terminal_table(summaries: &[ServeSummary]) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "readings/event",
        "system",
        "readings/s (median)",
        "repeats",
        "p50 ms",
        "p99 ms",
        "half-peak readings/s",
        "half p50 ms",
        "half p99 ms",
        "readings/commit",
        "half readings/commit",
        "CPU µs/reading",
        "checks",
    ]);
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    // The bus rows have no latency to an acknowledgement that means stored (bus.rs): NaN.
    let ms = |v: f64| opt(v.is_finite().then_some(v), 2);
    for s in summaries {
        table.add_row([
            s.readings_per_event.to_string(),
            s.target.clone(),
            format!("{:.0}", s.readings_per_sec),
            s.readings_per_sec_repeats
                .iter()
                .map(|r| format!("{r:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            ms(s.p50_ms),
            ms(s.p99_ms),
            opt(s.half_peak_achieved, 0),
            opt(s.half_peak_p50_ms, 2),
            opt(s.half_peak_p99_ms, 2),
            opt(s.readings_per_commit, 1),
            opt(s.half_peak_readings_per_commit, 1),
            format!("{:.1}", s.server_cpu_us_per_reading),
            if s.checks_ok {
                "ok".into()
            } else {
                "FAILED".into()
            },
        ]);
    }
    table.to_string()
}

pub(super) fn write_outputs(
    args: &ServeBenchArgs,
    plan: &Plan,
    header: &MachineHeader,
    (runs, summaries, costs, device): (&[ServeRun], &[ServeSummary], &[DecodeCost], &DeviceProbe),
    verdict: &[String],
) -> Result<()> {
    let notes = notes(plan);
    let json = serde_json::json!({
        "machine": header,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "config": {
            "systems": plan.targets.iter().map(|t| t.name()).collect::<Vec<_>>(),
            "skipped": plan.skipped.iter().map(|(t, why)| serde_json::json!({"system": t.name(), "why": why})).collect::<Vec<_>>(),
            "durability": plan.durability,
            "readings_per_event": plan.sizes,
            "clients": plan.clients,
            "measured_s": plan.measured.as_secs_f64(),
            "warmup_s": plan.warmup.as_secs_f64(),
            "repeats": plan.repeats,
            "work_dir": args.work_dir.display().to_string(),
            "half_peak": !args.skip_half_peak,
        },
        "verdict": verdict,
        "notes": notes,
        "summaries": summaries,
        "decode_cost": costs,
        "device": device,
        "runs": runs,
    });
    roamkv_testbed::report::write_json(&args.out, "results", &json)?;
    write_html(
        &args.out.join("report.html"),
        header,
        summaries,
        verdict,
        &notes,
    )?;
    println!(
        "wrote {0}/results.json, {0}/report.html",
        args.out.display()
    );
    Ok(())
}

fn notes(plan: &Plan) -> Vec<String> {
    vec![
        format!("Each run starts its system fresh on a new data directory, runs {} clients (one keep-alive HTTP/1.1 connection and one device each; in-process: one thread each) for {:.1} s of warm-up and {:.1} s measured, then stops the system and counts the readings it stored, which must equal the readings it acked.", plan.clients, plan.warmup.as_secs_f64(), plan.measured.as_secs_f64()),
        "Peak: closed loop (a client sends its next event when the last is answered); latency per request. Half-peak: open loop at half the median peak rate, events on a fixed schedule per client, latency from the scheduled send time (a server that falls behind shows it as latency).".into(),
        format!("roamkv: `roamkv serve --durability {d}` as a child process, EdgeX v3 AddEventRequests (JSON) on /api/v3/event/...; roamkv-binary: the same server and the same stored bytes as native binary batches; influxdb: InfluxDB 1.6 (Debian), line protocol on /write, wal-fsync-delay 0s (its WAL fsync'd on every write, as roamkv's sync acks after fdatasync; it runs at sync only); questdb: QuestDB {qv} (Maven Central's jar on the JDK), the same line protocol on its /write, each request one transaction, {qd}; engine: the in-process engine (Durability::{e:?}) writing the same keys and CBOR values from one thread per client.",
            d = match plan.durability { AckDurability::Sync => "sync", AckDurability::None => "none" },
            qv = peers::QUESTDB_VERSION,
            qd = match plan.durability { AckDurability::Sync => "cairo.commit.mode=sync (fsync at every commit)", AckDurability::None => "its default commit mode (nosync)" },
            e = plan.durability.engine()),
        "Every event of a client has a new origin (1 ms apart), so every reading is a new key in every system. InfluxDB and QuestDB get each reading as one point: device, resource, profile and source as tags; value, valueType, units, reading id and event id as fields — what roamkv stores in its CBOR value.".into(),
        "CPU µs/reading: CPU time of the system's process over the whole run (warm-up included) per acked reading; for the in-process engine it is this process's. The decode costs are the server's own functions timed in this process on one thread.".into(),
    ]
}

fn write_html(
    path: &std::path::Path,
    header: &MachineHeader,
    summaries: &[ServeSummary],
    verdict: &[String],
    notes: &[String],
) -> Result<()> {
    let mut html = Html::new(
        "roamkv bench serve: HTTP ingest vs InfluxDB 1.6, QuestDB 9.2 and the engine",
        header,
    );
    html.heading("Against the targets");
    for line in verdict {
        html.paragraph(line);
    }
    charts(&mut html, summaries);
    html.heading("Medians");
    medians_table(&mut html, summaries);
    html.heading("Method");
    for note in notes {
        html.paragraph(note);
    }
    Ok(html.write(path)?)
}

/// Bar charts by readings per event, one bar per system: rate, p99 at peak and at half, CPU.
fn charts(html: &mut Html, summaries: &[ServeSummary]) {
    let mut sizes: Vec<usize> = summaries.iter().map(|s| s.readings_per_event).collect();
    sizes.dedup();
    let mut targets: Vec<String> = Vec::new();
    for s in summaries {
        if !targets.contains(&s.target) {
            targets.push(s.target.clone());
        }
    }
    let categories: Vec<String> = sizes
        .iter()
        .map(|n| format!("{n} readings/event"))
        .collect();
    let series = |f: &dyn Fn(&ServeSummary) -> Option<f64>| -> Vec<(String, Vec<f64>)> {
        let by: BTreeMap<(String, usize), &ServeSummary> = summaries
            .iter()
            .map(|s| ((s.target.clone(), s.readings_per_event), s))
            .collect();
        targets
            .iter()
            .map(|t| {
                let values = sizes
                    .iter()
                    .map(|n| {
                        by.get(&(t.clone(), *n))
                            .and_then(|s| f(s))
                            .unwrap_or(f64::NAN)
                    })
                    .collect();
                (t.clone(), values)
            })
            .collect()
    };
    html.svg(&bar_chart_svg(
        "Peak ingest (median of repeats)",
        "readings/s",
        &categories,
        &series(&|s| Some(s.readings_per_sec)),
    ));
    html.svg(&bar_chart_svg(
        "p99 latency at the peak (closed loop)",
        "ms",
        &categories,
        &series(&|s| Some(s.p99_ms)),
    ));
    html.svg(&bar_chart_svg(
        "p99 latency at half the peak rate (open loop)",
        "ms",
        &categories,
        &series(&|s| s.half_peak_p99_ms),
    ));
    html.svg(&bar_chart_svg(
        "CPU of the system per reading",
        "µs",
        &categories,
        &series(&|s| Some(s.server_cpu_us_per_reading)),
    ));
}

fn medians_table(html: &mut Html, summaries: &[ServeSummary]) {
    let columns = [
        "readings/event",
        "system",
        "readings/s",
        "repeats",
        "p50 ms",
        "p99 ms",
        "half-peak readings/s",
        "half p99 ms",
        "readings/commit",
        "half readings/commit",
        "CPU µs/reading",
        "checks",
    ];
    let rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            vec![
                s.readings_per_event.to_string(),
                s.target.clone(),
                format!("{:.0}", s.readings_per_sec),
                s.readings_per_sec_repeats
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                format!("{:.2}", s.p50_ms),
                format!("{:.2}", s.p99_ms),
                s.half_peak_achieved
                    .map_or("-".into(), |v| format!("{v:.0}")),
                s.half_peak_p99_ms.map_or("-".into(), |v| format!("{v:.2}")),
                s.readings_per_commit
                    .map_or("-".into(), |v| format!("{v:.1}")),
                s.half_peak_readings_per_commit
                    .map_or("-".into(), |v| format!("{v:.1}")),
                format!("{:.1}", s.server_cpu_us_per_reading),
                if s.checks_ok {
                    "ok".into()
                } else {
                    "FAILED".into()
                },
            ]
        })
        .collect();
    html.table(&columns, &rows);
}
