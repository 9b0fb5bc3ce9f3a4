//! Latency recording: one HdrHistogram per run, sized once, recorded into without allocating;
//! perftest's columns plus percentiles from it.
//!
//! A [`Recorder`] keeps counts, not samples: its memory does not grow with the iterations, and
//! its quantiles are exact to 3 significant digits (a value is reported as the highest value
//! that is equivalent to it at that precision: 1 ns below 2.048 µs, 2 ns up to 4.096 µs, ...),
//! at 1 ns resolution, from 0 to [`Recorder::HIGHEST`].

use hdrhistogram::Histogram;

/// Latencies of one run, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Recorder {
    hist: Histogram<u64>,
}

impl Recorder {
    /// The largest latency told apart from larger ones: one hour, in ns. Larger values are
    /// counted as this one.
    pub const HIGHEST: u64 = 3_600 * 1_000_000_000;
    /// Significant decimal digits kept for every value.
    pub const SIGFIG: u8 = 3;

    /// An empty recorder: its counts (about 250 KiB) are allocated here, once.
    ///
    /// # Panics
    ///
    /// Never: the bounds are constants that HdrHistogram accepts (a test checks them).
    pub fn new() -> Self {
        let hist = Histogram::new_with_bounds(1, Self::HIGHEST, Self::SIGFIG)
            .expect("constant bounds that HdrHistogram accepts");
        Self { hist }
    }

    /// Records one latency. Never allocates: the counts are sized for every value up to
    /// [`Recorder::HIGHEST`], and a larger value is counted as that one.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.min(Self::HIGHEST));
    }

    /// The histogram, for plots.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The summary of what was recorded (zeros when nothing was).
    pub fn summary(&self) -> Summary {
        let h = &self.hist;
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            count: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            avg: h.mean(),
            stdev: h.stdev(),
        }
    }
}

impl FromIterator<u64> for Recorder {
    /// A recorder holding every latency of `iter`.
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut r = Self::new();
        for ns in iter {
            r.record(ns);
        }
        r
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

/// Summary of recorded latencies, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// How many.
    pub count: u64,
    /// The smallest.
    pub min: u64,
    /// The median (perftest's `t_typical`).
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The 99.9th percentile.
    pub p999: u64,
    /// The largest.
    pub max: u64,
    /// The mean.
    pub avg: f64,
    /// The standard deviation.
    pub stdev: f64,
}

/// perftest-style latency header and row, in microseconds.
pub fn latency_table(bytes: usize, s: &Summary) -> String {
    let us = |ns: u64| ns as f64 / 1000.0;
    format!(
        " {:<8} {:<11} {:>11} {:>16} {:>11} {:>12} {:>11} {:>11} {:>12}\n {:<8} {:<11} {:>11.2} {:>16.2} {:>11.2} {:>12.2} {:>11.2} {:>11.2} {:>12.2}\n",
        "#bytes",
        "#iterations",
        "t_min[us]",
        "t_typical[us]",
        "t_p99[us]",
        "t_p99.9[us]",
        "t_max[us]",
        "t_avg[us]",
        "t_stdev[us]",
        bytes,
        s.count,
        us(s.min),
        us(s.p50),
        us(s.p99),
        us(s.p999),
        us(s.max),
        s.avg / 1000.0,
        s.stdev / 1000.0
    )
}

/// perftest-style bandwidth header and row.
pub fn bandwidth_table(bytes: usize, iters: usize, seconds: f64) -> String {
    let total = bytes as f64 * iters as f64;
    let mbps = total / seconds / 1e6;
    let mpps = iters as f64 / seconds / 1e6;
    format!(
        " {:<8} {:<11} {:>19} {:>15} {:>14}\n {:<8} {:<11} {:>19.2} {:>15.2} {:>14.6}\n",
        "#bytes",
        "#iterations",
        "BW average[MB/sec]",
        "BW[Gbit/sec]",
        "MsgRate[Mpps]",
        bytes,
        iters,
        mbps,
        mbps * 8.0 / 1000.0,
        mpps
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(values: impl IntoIterator<Item = u64>) -> Recorder {
        values.into_iter().collect()
    }

    #[test]
    fn percentiles_are_exact_below_2048_ns() {
        let s = recorded((1..=1000).rev()).summary();
        assert_eq!(
            (s.count, s.min, s.p50, s.p99, s.p999, s.max),
            (1000, 1, 500, 990, 999, 1000)
        );
        assert!((s.avg - 500.5).abs() < 1e-9, "{s:?}");
        assert_eq!(recorded([7]).summary().p999, 7);
        assert_eq!(Recorder::new().summary(), Summary::default());
    }

    #[test]
    fn percentiles_keep_three_significant_digits_and_huge_values_saturate() {
        // 1.2345 ms is kept as 1.234 ms or 1.235 ms: within 0.1 %.
        let s = recorded([1_234_500]).summary();
        assert!(s.p50.abs_diff(1_234_500) <= 1_235, "{s:?}");
        let s = recorded([u64::MAX, 0]).summary();
        assert_eq!(s.min, 0);
        assert!(
            s.max >= Recorder::HIGHEST && s.max <= Recorder::HIGHEST + Recorder::HIGHEST / 1000,
            "{s:?}"
        );
    }

    #[test]
    fn tables_have_perftest_columns() {
        let t = latency_table(64, &recorded([1000, 2000, 3000]).summary());
        assert!(
            t.contains("t_typical[us]") && t.contains("t_p99.9[us]"),
            "{t}"
        );
        assert!(t.contains("2.00"), "{t}");
        let b = bandwidth_table(65536, 1000, 1.0);
        assert!(b.contains("65.54"), "{b}"); // 65,536,000 bytes in a second
        assert!(b.contains("0.001000"), "{b}");
    }
}
