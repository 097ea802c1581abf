//! Lateness and duration summaries: nearest-rank percentiles over millisecond samples.

use serde::Serialize;

/// p50 / p99 / max of a set of samples, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

impl Summary {
    /// Summarizes `samples` (ms); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            count: sorted.len(),
            p50_ms: percentile(&sorted, 50.0),
            p99_ms: percentile(&sorted, 99.0),
            max_ms: sorted[sorted.len() - 1],
        })
    }

    /// `p50 / p99 / max` for a table cell.
    pub fn cell(summary: Option<&Self>) -> String {
        summary.map_or("-".into(), |s| {
            format!("{:.1} / {:.1} / {:.1}", s.p50_ms, s.p99_ms, s.max_ms)
        })
    }
}

/// The median of `values` (the mean of the middle two for an even count); `None` when
/// there are none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        len if len % 2 == 1 => Some(values[mid]),
        _ => Some((values[mid - 1] + values[mid]) / 2.0),
    }
}

/// Nearest-rank percentile of ascending `sorted` (non-empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The longest interval between consecutive instants (ms), after sorting.
pub fn longest_gap(instants_ms: &[f64]) -> Option<f64> {
    let mut sorted = instants_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .max_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!(
            (s.count, s.p50_ms, s.p99_ms, s.max_ms),
            (100, 50.0, 99.0, 100.0)
        );
        let one = Summary::of(&[7.0]).unwrap();
        assert_eq!((one.p50_ms, one.p99_ms, one.max_ms), (7.0, 7.0, 7.0));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn longest_gap_ignores_order() {
        assert_eq!(longest_gap(&[5.0, 1.0, 2.0, 9.5]), Some(4.5));
        assert_eq!(longest_gap(&[1.0]), None);
    }
}
