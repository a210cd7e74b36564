//! SVG charts drawn with plotters' SVG backend: grouped bars, lines, scatter plots. A chart that
//! cannot be drawn becomes a one-line SVG saying why, so a report is still written.
use super::html::escape;
use plotters::prelude::*;

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
}
