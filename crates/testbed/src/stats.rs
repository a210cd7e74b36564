//! The summary statistics every report uses, written once.
//!
//! **Empty input has no value: every function here returns NaN for it.** NaN cannot pass for a
//! measurement (a 0.0 could: "0 ms" looks like a fast run), reports print a non-finite number as
//! "-", and serde_json writes it as `null`. A caller that must branch on "no data" checks
//! `is_nan()` or, better, the input's length before it asks.

/// The median of `values`, which it sorts in place: the middle value of an odd count, the mean of
/// the two middle values of an even count. NaN for no values.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Nearest-rank percentile of values sorted ascending: the smallest value with at least `pct`
/// percent of all values at or below it (`pct` in 0..=100; 0 gives the minimum). No
/// interpolation, so every answer is a value that was measured, as fio's percentiles are. NaN
/// for no values.
pub fn percentile(sorted: &[f64], pct: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    debug_assert!(
        sorted.windows(2).all(|w| w[0] <= w[1]),
        "percentile wants sorted input"
    );
    // Rounded before the ceiling: 99.9 % of 1000 is 999, not the 999.0000000000001 that binary
    // floating point makes of it (which would take the next rank).
    let exact = pct * sorted.len() as f64 / 100.0;
    let rank = ((exact * 1e9).round() / 1e9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The latency percentiles fio prints for completion latency (clat), plus the mean and the
/// extremes: what a reader of fio or Mobibench output looks for first.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

impl Percentiles {
    /// Of `values` in any order (sorted here). Every field is NaN, and `count` 0, for no values.
    pub fn of(values: &[f64]) -> Percentiles {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean = if sorted.is_empty() {
            f64::NAN
        } else {
            sorted.iter().sum::<f64>() / sorted.len() as f64
        };
        Percentiles {
            count: sorted.len(),
            mean,
            min: percentile(&sorted, 0.0),
            p50: percentile(&sorted, 50.0),
            p95: percentile(&sorted, 95.0),
            p99: percentile(&sorted, 99.0),
            p99_9: percentile(&sorted, 99.9),
            max: percentile(&sorted, 100.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
    }

    #[test]
    fn empty_input_has_no_value() {
        assert!(median(&mut []).is_nan());
        assert!(percentile(&[], 50.0).is_nan());
        let p = Percentiles::of(&[]);
        assert_eq!(p.count, 0);
        assert!(p.mean.is_nan() && p.p50.is_nan() && p.p99_9.is_nan() && p.max.is_nan());
    }

    #[test]
    fn nearest_rank_percentiles_are_measured_values() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 500.0);
        assert_eq!(percentile(&values, 99.0), 990.0);
        assert_eq!(percentile(&values, 99.9), 999.0);
        assert_eq!(percentile(&values, 100.0), 1000.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        // Ten values: p99.9 is the largest, p50 the fifth.
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 99.9), 10.0);
        assert_eq!(percentile(&ten, 50.0), 5.0);
    }

    #[test]
    fn percentiles_sort_their_input() {
        let p = Percentiles::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((p.count, p.min, p.p50, p.max), (5, 1.0, 3.0, 5.0));
        assert!((p.mean - 3.0).abs() < 1e-12);
    }
}
