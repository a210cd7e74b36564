//! The verdict on space: from the time series, the bytes on disk at most, seconds over roamkv's
//! bounds, and the trend over the second half of the measured phase. A run whose space is not
//! flat fails; this is the point of the command, so it is a pure function, tested alone.

use super::results::{Point, SteadyRun};

/// A run whose bytes on disk grow faster than this share of their mean per minute, over the
/// second half of the measured phase, fails: its space is not flat. The noise of a flat run is
/// well below it (a 300 s roamkv run: 0.2-0.8 %/min, from windows dropping in bursts); the
/// leak issue 29 found grew 8 %/min.
pub const SPACE_TREND_PERCENT_PER_MIN_MAX: f64 = 1.0;

/// Whether the lower tier was over the engine's bound on window files in this second: more
/// than `WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX` of its live bytes, with more than
/// `WINDOW_DEAD_BYTES_MIN` dead (limits.rs; the bench counts the settled space in too).
fn lower_over_bound(p: &Point) -> bool {
    use roamkv_engine::limits::{WINDOW_DEAD_BYTES_MIN, WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX};
    let files = p.lower_live_bytes + p.lower_dead_bytes;
    files as u128 * 100
        > p.lower_live_bytes as u128 * WINDOW_SPACE_AMPLIFICATION_PERCENT_MAX as u128
        && p.lower_dead_bytes > WINDOW_DEAD_BYTES_MIN
}

/// Space figures from the time series: maximum, the roamkv bounds, the trend, the verdict.
pub(super) fn summarize_points(run: &mut SteadyRun, points: &[Point]) {
    run.space_bytes_max = points.iter().map(|p| p.space_bytes).max().unwrap_or(0);
    run.live_user_bytes_end = points.last().map_or(0, |p| p.live_user_bytes);
    if let Some(budget) = points
        .iter()
        .map(|p| p.log_bytes_max)
        .max()
        .filter(|b| *b > 0)
    {
        run.log_budget_bytes = Some(budget);
        run.space_bound_violations = Some(
            points
                .iter()
                .filter(|p| p.space_bytes as f64 > 1.3 * p.live_user_bytes as f64 + budget as f64)
                .count() as u64,
        );
        run.lower_bound_violations =
            Some(points.iter().filter(|p| lower_over_bound(p)).count() as u64);
        run.lower_dead_bytes_max = points.iter().map(|p| p.lower_dead_bytes).max();
    }
    let measured: Vec<&Point> = points.iter().filter(|p| p.phase == "measure").collect();
    let half = &measured[measured.len() / 2..];
    run.space_trend_bytes_per_min =
        slope(half.iter().map(|p| (p.t_s, p.space_bytes as f64))) * 60.0;
    let mean = half.iter().map(|p| p.space_bytes as f64).sum::<f64>() / half.len().max(1) as f64;
    run.space_trend_percent_per_min = 100.0 * run.space_trend_bytes_per_min / mean.max(1.0);
    run.space_failure = space_failure(run);
}

/// The run's space verdict: None when flat and within its bounds.
fn space_failure(run: &SteadyRun) -> Option<String> {
    let mut why = Vec::new();
    if run.space_trend_percent_per_min > SPACE_TREND_PERCENT_PER_MIN_MAX {
        why.push(format!(
            "space keeps growing: {:+.1} MB/min ({:+.2} %/min of its mean over the second half of the measured phase; the limit is {SPACE_TREND_PERCENT_PER_MIN_MAX} %/min)",
            run.space_trend_bytes_per_min / 1e6,
            run.space_trend_percent_per_min
        ));
    }
    if let Some(n) = run.space_bound_violations.filter(|n| *n > 0) {
        why.push(format!(
            "{n} s over the space bound (1.3 x live + log budget)"
        ));
    }
    if let Some(n) = run.lower_bound_violations.filter(|n| *n > 0) {
        why.push(format!(
            "{n} s with the lower tier over its bound (1.5 x its live bytes past 64 MiB dead)"
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Least-squares slope of y over x.
fn slope(points: impl Iterator<Item = (f64, f64)>) -> f64 {
    let points: Vec<(f64, f64)> = points.collect();
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_flat_series_is_zero_and_of_a_ramp_its_rate() {
        assert_eq!(slope([(0.0, 5.0), (1.0, 5.0), (2.0, 5.0)].into_iter()), 0.0);
        let ramp = (0..10).map(|t| (t as f64, 3.0 * t as f64 + 1.0));
        assert!((slope(ramp) - 3.0).abs() < 1e-9);
        assert_eq!(slope(std::iter::once((1.0, 1.0))), 0.0);
    }

    #[test]
    fn the_space_bound_counts_seconds_over_it() {
        let point = |space, live| Point {
            engine: "roamkv".into(),
            phase: "measure".into(),
            space_bytes: space,
            live_user_bytes: live,
            log_bytes_max: 100,
            ..Point::default()
        };
        let mut run = SteadyRun::default();
        summarize_points(&mut run, &[point(100, 10), point(200, 10), point(113, 10)]);
        assert_eq!(run.log_budget_bytes, Some(100));
        assert_eq!(run.space_bound_violations, Some(1));
        assert_eq!(run.space_bytes_max, 200);
        assert!(run.space_failure.is_some());
    }

    #[test]
    fn a_run_whose_space_keeps_growing_fails_and_a_flat_one_does_not() {
        let point = |t: u64, space: u64, lower_dead: u64| Point {
            engine: "roamkv".into(),
            phase: "measure".into(),
            t_s: t as f64,
            space_bytes: space,
            live_user_bytes: 1 << 30,
            log_bytes_max: 1 << 30,
            lower_live_bytes: 100 << 20,
            lower_dead_bytes: lower_dead,
            ..Point::default()
        };
        let flat: Vec<Point> = (0..300)
            .map(|t| point(t, (2 << 30) + (t % 7) * (10 << 20), 0))
            .collect();
        let mut run = SteadyRun::default();
        summarize_points(&mut run, &flat);
        assert_eq!(run.space_failure, None, "{run:?}");
        // 0.5 GB a minute on 2 GB: the leak of issue 29.
        let growing: Vec<Point> = (0..300)
            .map(|t| point(t, (2 << 30) + t * (8 << 20), 0))
            .collect();
        summarize_points(&mut run, &growing);
        assert!(run.space_trend_percent_per_min > SPACE_TREND_PERCENT_PER_MIN_MAX);
        assert!(
            run.space_failure
                .as_deref()
                .is_some_and(|w| w.contains("keeps growing"))
        );
        // Flat, but the lower tier 2x its live bytes with 100 MiB dead for 5 s.
        let lower: Vec<Point> = (0..300)
            .map(|t| point(t, 2 << 30, if t < 5 { 100 << 20 } else { 0 }))
            .collect();
        summarize_points(&mut run, &lower);
        assert_eq!(run.lower_bound_violations, Some(5));
        assert!(
            run.space_failure
                .as_deref()
                .is_some_and(|w| w.contains("lower tier"))
        );
    }
}
