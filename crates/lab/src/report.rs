//! Reports: a machine header (what ran where), JSON files, and a self-contained HTML page with
//! tables and inline SVG charts (drawn with plotters' SVG backend, no font files needed).
//! What each subcommand reports lives beside it: `fs_workloads` (`lab fs`), `trace_command`
//! (`lab trace`); `sqlite::report` and the trace renderers (`trace::render`) build on this module.
pub mod fs_workloads;
pub mod trace_command;

use crate::LabError;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(serde::Serialize, Clone, Debug)]
pub struct MachineHeader {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub memory_bytes: u64,
    pub git_sha: String,
    pub build_profile: String,
    pub date_utc: String,
}

impl MachineHeader {
    pub fn collect() -> MachineHeader {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        let git_sha = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        MachineHeader {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
            memory_bytes,
            git_sha,
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
            .to_string(),
            date_utc: now_utc(),
        }
    }

    pub fn rows(&self) -> Vec<Vec<String>> {
        vec![
            vec!["cpu".into(), self.cpu.clone()],
            vec!["cores".into(), self.cores.to_string()],
            vec!["kernel".into(), self.kernel.clone()],
            vec![
                "memory".into(),
                format!("{:.1} GiB", self.memory_bytes as f64 / (1u64 << 30) as f64),
            ],
            vec!["git".into(), self.git_sha.clone()],
            vec!["build".into(), self.build_profile.clone()],
            vec!["date (UTC)".into(), self.date_utc.clone()],
        ]
    }
}

/// "2026-11-22T09:30:35Z" from the system clock (civil-from-days, proleptic Gregorian).
pub fn now_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Writes DIR/<stem>.json (pretty) and returns its path.
pub fn write_json(dir: &Path, stem: &str, value: &serde_json::Value) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(dir).map_err(|e| LabError::io(dir, e))?;
    let path = dir.join(format!("{stem}.json"));
    let text = serde_json::to_string_pretty(value).map_err(|e| LabError::Parse {
        what: "json".into(),
        detail: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(|e| LabError::io(&path, e))?;
    Ok(path)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A self-contained HTML page built section by section.
pub struct Html {
    body: String,
    title: String,
}

impl Html {
    pub fn new(title: &str, header: &MachineHeader) -> Html {
        let mut html = Html {
            body: String::new(),
            title: title.to_string(),
        };
        let _ = write!(html.body, "<h1>{}</h1>", escape(title));
        html.table(&["machine", ""], &header.rows());
        html
    }
    pub fn heading(&mut self, text: &str) {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(text));
    }
    pub fn paragraph(&mut self, text: &str) {
        let _ = writeln!(self.body, "<p>{}</p>", escape(text));
    }
    pub fn preformatted(&mut self, text: &str) {
        let _ = writeln!(self.body, "<pre>{}</pre>", escape(text));
    }
    pub fn table(&mut self, columns: &[&str], rows: &[Vec<String>]) {
        self.body.push_str("<table><tr>");
        for c in columns {
            let _ = write!(self.body, "<th>{}</th>", escape(c));
        }
        self.body.push_str("</tr>\n");
        for row in rows {
            self.body.push_str("<tr>");
            for cell in row {
                let _ = write!(self.body, "<td>{}</td>", escape(cell));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }
    /// Inline SVG (trusted: produced by this module's chart functions).
    pub fn svg(&mut self, svg: &str) {
        let _ = writeln!(self.body, "<div class=\"chart\">{svg}</div>");
    }
    pub fn write(&self, path: &Path) -> Result<(), LabError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| LabError::io(dir, e))?;
        }
        let page = format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{}</title><style>\
             body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse;margin:1em 0}}\
             td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}} th{{background:#eee}}\
             pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}</style></head><body>\n{}</body></html>\n",
            escape(&self.title),
            self.body
        );
        std::fs::write(path, page).map_err(|e| LabError::io(path, e))
    }
}

const CHART_WIDTH: u32 = 900;
const CHART_HEIGHT: u32 = 420;

pub fn series_color(index: usize) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    PALETTE[index % PALETTE.len()]
}

fn svg_error(e: impl std::fmt::Display) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"600\" height=\"30\"><text x=\"5\" y=\"20\">chart failed: {}</text></svg>",
        escape(&e.to_string())
    )
}

/// Grouped bars: one group per category, one bar per series.
pub fn bar_chart_svg(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let mut out = String::new();
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root =
            SVGBackend::with_string(&mut out, (CHART_WIDTH, CHART_HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let y_max = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let groups = categories.len().max(1);
        let bars = series.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..groups as f64, 0f64..y_max)?;
        let category_labels = categories.to_vec();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(y_label)
            .x_labels(groups * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.26 {
                    category_labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()?;
        let bar_width = 0.8 / bars as f64;
        for (s, (name, values)) in series.iter().enumerate() {
            let color = series_color(s);
            chart
                .draw_series(
                    values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v.is_finite())
                        .map(|(g, v)| {
                            let x0 = g as f64 + 0.1 + s as f64 * bar_width;
                            Rectangle::new([(x0, 0.0), (x0 + bar_width * 0.95, *v)], color.filled())
                        }),
                )?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    })();
    match result {
        Ok(()) => out,
        Err(e) => svg_error(e),
    }
}

/// Lines with point markers, one per series.
pub fn line_chart_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    xy_chart_svg(title, x_label, y_label, series, true)
}

/// Points only (e.g. a block trace: time on x, LBA on y, one series per request kind).
pub fn scatter_chart_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    xy_chart_svg(title, x_label, y_label, series, false)
}

fn xy_chart_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    lines: bool,
) -> String {
    let mut out = String::new();
    let result = (|| -> Result<(), Box<dyn std::error::Error>> {
        let root =
            SVGBackend::with_string(&mut out, (CHART_WIDTH, CHART_HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let points = series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite());
        let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in points {
            x_min = x_min.min(x);
            x_max = x_max.max(x);
            y_min = y_min.min(y);
            y_max = y_max.max(y);
        }
        if x_min > x_max {
            (x_min, x_max, y_min, y_max) = (0.0, 1.0, 0.0, 1.0);
        }
        let x_pad = ((x_max - x_min) * 0.03).max(1e-9);
        let y_pad = ((y_max - y_min) * 0.05).max(1e-9);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(90)
            .build_cartesian_2d(
                (x_min - x_pad)..(x_max + x_pad),
                (y_min - y_pad).min(0.0_f64.max(y_min - y_pad))..(y_max + y_pad),
            )?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()?;
        for (s, (name, values)) in series.iter().enumerate() {
            let color = series_color(s);
            if lines {
                chart.draw_series(LineSeries::new(
                    values.iter().copied(),
                    color.stroke_width(2),
                ))?;
            }
            chart
                .draw_series(
                    values
                        .iter()
                        .map(|(x, y)| Circle::new((*x, *y), 3, color.filled())),
                )?
                .label(name.as_str())
                .legend(move |(x, y)| Circle::new((x + 5, y), 4, color.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    })();
    match result {
        Ok(()) => out,
        Err(e) => svg_error(e),
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
    fn charts_are_svg_with_their_labels() {
        let bar = bar_chart_svg(
            "t",
            "MB/s",
            &["ext4".into(), "xfs".into()],
            &[("seq".into(), vec![1.0, 2.0])],
        );
        assert!(
            bar.starts_with("<svg") && bar.contains("ext4") && bar.contains("seq"),
            "{bar}"
        );
        let line = line_chart_svg(
            "t",
            "KiB",
            "MB/s",
            &[("ext4".into(), vec![(1.0, 2.0), (4.0, 8.0)])],
        );
        assert!(line.contains("<svg") && line.contains("ext4"));
        let empty = scatter_chart_svg("t", "x", "y", &[]);
        assert!(empty.contains("<svg"));
    }

    #[test]
    fn html_escapes_text() {
        let header = MachineHeader::collect();
        let mut html = Html::new("a<b", &header);
        html.paragraph("x & y");
        assert!(html.body.contains("a&lt;b") && html.body.contains("x &amp; y"));
    }

    #[test]
    fn date_format() {
        let d = now_utc();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20") && d.ends_with('Z'));
    }
}
