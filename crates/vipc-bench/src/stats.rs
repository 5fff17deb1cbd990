//! Statistics over samples: quantiles, and the median of several rounds.

/// The `q`-quantile (0..=1) of samples sorted ascending, by the nearest-rank
/// method: the smallest sample with at least `q` of the samples at or below it.
/// 0 for no samples.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let q = q.clamp(0.0, 1.0);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median: the middle sample, or the mean of the two middle ones. 0 for no samples.
pub fn median(samples: &[f64]) -> f64 {
    let mut v = samples.to_vec();
    sort(&mut v);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Sorts ascending; NaN (never produced by the bench) sorts last.
pub fn sort(v: &mut [f64]) {
    v.sort_by(|a, b| a.total_cmp(b));
}

/// Median and 99th percentile of one set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Median.
    pub median: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Number of samples.
    pub n: usize,
}

/// Summarises samples.
pub fn summarize(samples: &[f64]) -> Summary {
    let mut v = samples.to_vec();
    sort(&mut v);
    Summary { median: median(&v), p99: quantile(&v, 0.99), n: v.len() }
}

/// The samples of one measurement, kept round by round: the figure is the
/// median of the rounds' medians (and of their p99s), so that one round
/// disturbed by another job on the machine does not move it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rounds {
    rounds: Vec<Vec<f64>>,
}

impl Rounds {
    /// No rounds yet.
    pub fn new() -> Rounds {
        Rounds::default()
    }

    /// Adds one round's samples (ignored if empty).
    pub fn push(&mut self, samples: Vec<f64>) {
        if !samples.is_empty() {
            self.rounds.push(samples);
        }
    }

    /// Number of rounds recorded.
    pub fn len(&self) -> usize {
        self.rounds.len()
    }

    /// True if no round has been recorded.
    pub fn is_empty(&self) -> bool {
        self.rounds.is_empty()
    }

    /// The median of the rounds' medians.
    pub fn median(&self) -> f64 {
        median(&self.rounds.iter().map(|r| median(r)).collect::<Vec<_>>())
    }

    /// The median of the rounds' 99th percentiles.
    pub fn p99(&self) -> f64 {
        median(&self.rounds.iter().map(|r| summarize(r).p99).collect::<Vec<_>>())
    }

    /// Every sample of every round, sorted (for distribution plots).
    pub fn all_sorted(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self.rounds.iter().flatten().copied().collect();
        sort(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[7.0]), 7.0);
    }

    #[test]
    fn quantile_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.99), 990.0);
        // Few samples: p99 is the largest.
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.99), 3.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn summary_of_skewed_samples() {
        let mut v = vec![10.0; 98];
        v.push(500.0);
        v.push(1000.0);
        let s = summarize(&v);
        assert_eq!((s.median, s.p99, s.n), (10.0, 500.0, 100));
    }

    #[test]
    fn rounds_take_the_median_of_medians() {
        let mut r = Rounds::new();
        r.push(vec![10.0, 11.0, 12.0]);
        r.push(vec![100.0, 100.0, 100.0]); // a disturbed round
        r.push(vec![9.0, 10.0, 11.0]);
        r.push(vec![]); // ignored
        assert_eq!(r.len(), 3);
        assert_eq!(r.median(), 11.0);
        assert_eq!(r.p99(), 12.0);
        assert_eq!(r.all_sorted().len(), 9);
        assert_eq!(r.all_sorted()[0], 9.0);
    }
}
