//! The status page at `/`: devices per tier, ingest rate and space over the last minutes, and
//! recent departures. One self-contained HTML page (inline SVG, no scripts) that refreshes
//! itself, so it works in any browser and in headless Chromium.

use std::collections::VecDeque;
use std::fmt::Write as _;

use roamkv_engine::{DeviceInfo, DeviceTier, Stats};

use crate::observability::cloud_view::CloudView;

/// One sample per second for five minutes.
pub const HISTORY_SAMPLES_MAX: usize = 300;
/// Departures kept for the page.
pub const DEPARTURES_MAX: usize = 20;

#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at_ms: u64,
    pub readings_total: u64,
    pub data_dir_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Departure {
    pub at_ms: u64,
    pub device: String,
    /// What asked for it: "DELETE device", "age", "native".
    pub how: &'static str,
}

/// What the page shows over time; bounded (HISTORY_SAMPLES_MAX, DEPARTURES_MAX).
#[derive(Debug, Default)]
pub struct History {
    pub samples: VecDeque<Sample>,
    pub departures: VecDeque<Departure>,
}

impl History {
    pub fn push_sample(&mut self, sample: Sample) {
        if self.samples.len() == HISTORY_SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    pub fn push_departure(&mut self, departure: Departure) {
        if self.departures.len() == DEPARTURES_MAX {
            self.departures.pop_front();
        }
        self.departures.push_back(departure);
    }

    /// Readings per second between consecutive samples: (seconds before now, rate).
    fn ingest_rates(&self) -> Vec<(f64, f64)> {
        let Some(last) = self.samples.back() else {
            return Vec::new();
        };
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .filter(|(a, b)| b.at_ms > a.at_ms)
            .map(|(a, b)| {
                let seconds = (b.at_ms - a.at_ms) as f64 / 1000.0;
                (
                    (last.at_ms as f64 - b.at_ms as f64) / 1000.0,
                    b.readings_total.saturating_sub(a.readings_total) as f64 / seconds,
                )
            })
            .collect()
    }

    fn space(&self) -> Vec<(f64, f64)> {
        let Some(last) = self.samples.back() else {
            return Vec::new();
        };
        self.samples
            .iter()
            .map(|s| {
                (
                    (last.at_ms as f64 - s.at_ms as f64) / 1000.0,
                    s.data_dir_bytes as f64 / (1024.0 * 1024.0),
                )
            })
            .collect()
    }
}

/// Text made safe for element content and quoted attributes (`& < > " '`), by the same
/// well-kept crate the report kit uses: one escaper, not a hand-written one per crate.
fn escape(text: &str) -> String {
    html_escape::encode_quoted_attribute(text).into_owned()
}

/// A line chart of (seconds ago, value) points, newest on the right.
fn line_chart(title: &str, unit: &str, points: &[(f64, f64)]) -> String {
    const WIDTH: f64 = 520.0;
    const HEIGHT: f64 = 160.0;
    const LEFT: f64 = 60.0;
    const BOTTOM: f64 = 24.0;
    let span_s = points.iter().map(|p| p.0).fold(60.0_f64, f64::max).ceil();
    let max = points.iter().map(|p| p.1).fold(0.0_f64, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let x = |ago: f64| LEFT + (WIDTH - LEFT - 10.0) * (1.0 - ago / span_s);
    let y = |v: f64| (HEIGHT - BOTTOM) - (HEIGHT - BOTTOM - 10.0) * (v / top);
    let path: Vec<String> = points
        .iter()
        .map(|&(ago, v)| format!("{:.1},{:.1}", x(ago), y(v)))
        .collect();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<figure><figcaption>{title}</figcaption><svg width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{title}">
<rect x="{LEFT}" y="10" width="{w:.0}" height="{h:.0}" fill="#f7f9fb" stroke="#ccd"/>
<text x="{tx}" y="20" font-size="11" text-anchor="end">{top:.1} {unit}</text>
<text x="{tx}" y="{by:.0}" font-size="11" text-anchor="end">0</text>
<text x="{LEFT}" y="{ly:.0}" font-size="11">-{span_s:.0} s</text>
<text x="{rx:.0}" y="{ly:.0}" font-size="11" text-anchor="end">now</text>
<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{points}"/>
</svg></figure>"##,
        w = WIDTH - LEFT - 10.0,
        h = HEIGHT - BOTTOM - 10.0,
        tx = LEFT - 4.0,
        by = HEIGHT - BOTTOM,
        ly = HEIGHT - 6.0,
        rx = WIDTH - 10.0,
        points = path.join(" "),
    );
    svg
}

pub struct PageInput<'a> {
    pub stats: &'a Stats,
    pub cloud: &'a CloudView,
    pub devices: &'a [DeviceInfo],
    pub history: &'a History,
    pub now_ms: u64,
    pub management_time_ms: u64,
    /// The log's segment size: write amplification is shown once this much was written.
    pub segment_bytes: u64,
    pub version: &'a str,
}

/// Devices listed on the page at most (the counts cover all of them).
const DEVICES_LISTED_MAX: usize = 50;

pub fn render(input: &PageInput<'_>) -> String {
    let mut html = String::new();
    render_head_and_tiles(&mut html, input);
    render_devices(&mut html, input.devices, input.now_ms);
    render_departures(&mut html, input.history, input.now_ms);
    render_waiting(&mut html, input.cloud, input.now_ms);
    html.push_str("</table></body></html>\n");
    html
}

/// The page's head and style, the tiles (devices per tier, readings, write amplification) and
/// the two charts.
fn render_head_and_tiles(html: &mut String, input: &PageInput<'_>) {
    let PageInput {
        stats,
        devices,
        history,
        management_time_ms,
        version,
        ..
    } = input;
    let count = |tier: DeviceTier| devices.iter().filter(|d| d.tier == tier).count();
    let _ = write!(
        html,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5"><title>roamkv serve</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}}
h1{{font-size:22px;margin:0 0 4px}} .sub{{color:#57606a;margin-bottom:16px}}
.tiles{{display:flex;gap:12px;margin-bottom:16px}}
.tile{{border:1px solid #d0d7de;border-radius:6px;padding:10px 16px;min-width:120px}}
.tile b{{display:block;font-size:24px}}
.charts{{display:flex;gap:16px;flex-wrap:wrap}} figure{{margin:0}} figcaption{{font-weight:600;margin-bottom:4px}}
table{{border-collapse:collapse;margin-top:8px}} td,th{{border-bottom:1px solid #d0d7de;padding:3px 10px;text-align:left;font-size:13px}}
</style></head><body>
<h1>roamkv serve</h1><div class="sub">version {version} · management time {mt} s · {durability_note}</div>
<div class="tiles">
<div class="tile" id="upper">upper tier<b>{upper}</b>devices</div>
<div class="tile" id="windows">lower-tier runs<b>{windows}</b>windows</div>
<div class="tile" id="lower">lower tier<b>{lower}</b>devices</div>
<div class="tile">readings ingested<b>{readings}</b>since start</div>
{wa_tile}
{cloud_tile}{handoff_tile}</div>
<div class="charts">{rate_chart}{space_chart}</div>
"#,
        version = escape(version),
        mt = management_time_ms / 1000,
        durability_note = format_args!("{} live log segments", stats.live_segments),
        upper = count(DeviceTier::Upper),
        windows = stats.windows,
        lower = count(DeviceTier::Lower),
        readings = history.samples.back().map_or(0, |s| s.readings_total),
        wa_tile = write_amplification_tile(stats, input.segment_bytes),
        cloud_tile = cloud_tile(input.cloud),
        handoff_tile = handoff_tile(input.cloud),
        rate_chart = line_chart("Ingest (readings/s)", "/s", &history.ingest_rates()),
        space_chart = line_chart("Data directory (MiB)", "MiB", &history.space()),
    );
}

/// Write amplification counts the log's preallocation, which comes a segment at a time: before
/// a segment's worth of readings is in, the ratio says how big a segment is, not how the engine
/// writes (a few readings once showed 34257.91), so it waits until then.
fn write_amplification_tile(stats: &Stats, segment_bytes: u64) -> String {
    if stats.user_bytes < segment_bytes {
        return format!(
            r#"<div class="tile" id="wa">write amplification<b>&mdash;</b>shown once {} MiB of readings are in</div>
"#,
            segment_bytes >> 20
        );
    }
    format!(
        r#"<div class="tile" id="wa">write amplification<b>{:.2}</b>engine bytes / user byte (incl. log preallocation)</div>
"#,
        stats.write_amplification()
    )
}

/// The cloud sink's tile: its state, its lag, the log it holds against the cap (none without a
/// sink).
fn cloud_tile(cloud: &CloudView) -> String {
    let Some(sink) = &cloud.sink else {
        return String::new();
    };
    format!(
        r#"<div class="tile" id="cloud">cloud sink<b>{state}</b>lag {lag:.1} s · {readings} readings · hold {hold} of {cap} MiB{error}</div>
"#,
        state = escape(&sink.state),
        lag = sink.lag_seconds,
        readings = cloud.lag_readings,
        hold = cloud.hold_bytes >> 20,
        cap = cloud.hold_bytes_max >> 20,
        error = sink
            .last_error
            .as_ref()
            .filter(|_| sink.state != "tailing")
            .map(|e| format!("<br>{}", escape(e)))
            .unwrap_or_default(),
    )
}

/// The handoffs' tile: in flight each way, done, bytes moved.
fn handoff_tile(cloud: &CloudView) -> String {
    let h = &cloud.handoffs;
    format!(
        r#"<div class="tile" id="handoffs">handoffs<b>{out} out · {inbound} in</b>in flight; {done} done, {received} received, {aborted} called off, {mb:.1} MB sent</div>
"#,
        out = h.out_in_flight,
        inbound = h.in_in_flight,
        done = h.done,
        received = h.received,
        aborted = h.aborted,
        mb = h.bytes_sent as f64 / 1e6,
    )
}

/// Departures waiting for the cloud sink (`--on-depart cloud`), oldest first.
fn render_waiting(html: &mut String, cloud: &CloudView, now_ms: u64) {
    if cloud.departures_waiting.is_empty() {
        return;
    }
    html.push_str("</table><h2>Departures waiting for the cloud</h2><table><tr><th>device</th><th>asked by</th><th>waiting</th></tr>");
    for w in &cloud.departures_waiting {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{} s</td></tr>",
            escape(&w.device),
            escape(&w.how),
            now_ms.saturating_sub(w.requested_at_ms) / 1000,
        );
    }
}

/// The newest devices, with tier and age (at most DEVICES_LISTED_MAX).
fn render_devices(html: &mut String, devices: &[DeviceInfo], now_ms: u64) {
    html.push_str("<h2>Devices</h2><table><tr><th>device</th><th>tier</th><th>age</th><th>readings in the log</th><th>lower-tier runs</th></tr>");
    let mut newest: Vec<&DeviceInfo> = devices.iter().collect();
    newest.sort_by_key(|d| std::cmp::Reverse(d.registered_at_ms));
    for d in newest.iter().take(DEVICES_LISTED_MAX) {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{} s</td><td>{}</td><td>{}</td></tr>",
            escape(&d.name),
            d.tier.name(),
            now_ms.saturating_sub(d.registered_at_ms) / 1000,
            d.log_readings,
            d.lower_runs,
        );
    }
    if devices.len() > DEVICES_LISTED_MAX {
        let _ = write!(
            html,
            "<tr><td colspan=5>… and {} more</td></tr>",
            devices.len() - DEVICES_LISTED_MAX
        );
    }
}

/// The last departures, newest first.
fn render_departures(html: &mut String, history: &History, now_ms: u64) {
    html.push_str("</table><h2>Recent departures</h2><table><tr><th>device</th><th>how</th><th>when</th></tr>");
    for d in history.departures.iter().rev() {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{} s ago</td></tr>",
            escape(&d.device),
            d.how,
            now_ms.saturating_sub(d.at_ms) / 1000
        );
    }
    if history.departures.is_empty() {
        html.push_str("<tr><td colspan=3>none yet</td></tr>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_escapes_names_and_bounds_history() {
        let mut history = History::default();
        for i in 0..(HISTORY_SAMPLES_MAX as u64 + 10) {
            history.push_sample(Sample {
                at_ms: i * 1000,
                readings_total: i * 50,
                data_dir_bytes: 1 << 20,
            });
        }
        assert_eq!(history.samples.len(), HISTORY_SAMPLES_MAX);
        assert!(
            history
                .ingest_rates()
                .iter()
                .all(|(_, r)| (*r - 50.0).abs() < 1e-9)
        );
        history.push_departure(Departure {
            at_ms: 0,
            device: "<script>".into(),
            how: "age",
        });
        let devices = vec![DeviceInfo {
            name: "car&1".into(),
            tier: DeviceTier::Upper,
            registered_at_ms: 0,
            log_readings: 3,
            lower_runs: 0,
        }];
        let cloud = CloudView {
            sink: None,
            lag_bytes: None,
            lag_readings: 0,
            hold_bytes: 0,
            hold_bytes_max: 0,
            holds_released: 0,
            on_depart: "drop",
            handoffs: Default::default(),
            departures_waiting: vec![crate::departures::departing::Waiting {
                device: "bus<2>".into(),
                how: "native".into(),
                cutoff_ns: None,
                requested_at_ms: 1000,
            }],
        };
        let html = render(&PageInput {
            stats: &Stats::default(),
            cloud: &cloud,
            devices: &devices,
            history: &history,
            now_ms: 5000,
            management_time_ms: 60_000,
            segment_bytes: 8 << 20,
            version: "0.1.0",
        });
        assert!(html.contains("car&amp;1"));
        assert!(
            html.contains("bus&lt;2&gt;"),
            "a waiting departure is listed"
        );
        assert!(html.contains("&lt;script&gt;"));
        assert!(!html.contains("<script>"));
    }

    #[test]
    fn write_amplification_waits_for_a_segment_of_readings() {
        let few = Stats {
            user_bytes: 1_000,
            log_preallocated_bytes: 16 << 20,
            ..Stats::default()
        };
        let tile = write_amplification_tile(&few, 8 << 20);
        assert!(tile.contains("&mdash;") && tile.contains("8 MiB"), "{tile}");
        let many = Stats {
            user_bytes: 10 << 20,
            log_bytes_written: 11 << 20,
            ..Stats::default()
        };
        assert!(write_amplification_tile(&many, 8 << 20).contains("<b>1.10</b>"));
    }
}
