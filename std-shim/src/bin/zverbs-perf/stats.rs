//! Latency statistics (perftest's columns plus percentiles) and histograms as CSV or SVG.

use std::fmt::Write as _;

/// Summary of latency samples, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
    pub(crate) count: usize,
    pub(crate) min: u64,
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
    pub(crate) max: u64,
    pub(crate) avg: f64,
    pub(crate) stdev: f64,
}

/// The sample at quantile `q` of sorted samples (nearest rank).
pub(crate) fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts `samples` and summarises them.
pub(crate) fn summarize(samples: &mut [u64]) -> Summary {
    samples.sort_unstable();
    let n = samples.len().max(1) as f64;
    let avg = samples.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = samples
        .iter()
        .map(|&x| (x as f64 - avg).powi(2))
        .sum::<f64>()
        / n;
    Summary {
        count: samples.len(),
        min: samples.first().copied().unwrap_or(0),
        p50: quantile(samples, 0.5),
        p99: quantile(samples, 0.99),
        p999: quantile(samples, 0.999),
        max: samples.last().copied().unwrap_or(0),
        avg,
        stdev: var.sqrt(),
    }
}

/// perftest-style header and row (microseconds).
pub(crate) fn latency_table(bytes: usize, s: &Summary) -> String {
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
pub(crate) fn bandwidth_table(bytes: usize, iters: usize, seconds: f64) -> String {
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

/// A histogram of sorted samples: `buckets` equal-width bins from the minimum to the 99.9th
/// percentile, and one bin for everything above.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Histogram {
    /// Lower edge of the first bin, ns.
    pub(crate) start: u64,
    /// Bin width, ns.
    pub(crate) width: u64,
    /// Counts; the last bin holds the samples above the 99.9th percentile.
    pub(crate) counts: Vec<u64>,
}

impl Histogram {
    pub(crate) fn new(sorted: &[u64], buckets: usize) -> Self {
        let start = sorted.first().copied().unwrap_or(0);
        let top = quantile(sorted, 0.999).max(start + 1);
        let width = (top - start).div_ceil(buckets.max(1) as u64).max(1);
        let mut counts = vec![0u64; buckets.max(1) + 1];
        for &x in sorted {
            let i = ((x - start) / width) as usize;
            let last = counts.len() - 1;
            counts[i.min(last)] += 1;
        }
        Self {
            start,
            width,
            counts,
        }
    }

    /// `bin_start_ns,bin_end_ns,count`; the last bin's end is empty (open).
    pub(crate) fn to_csv(&self) -> String {
        let mut s = String::from("bin_start_ns,bin_end_ns,count\n");
        let last = self.counts.len() - 1;
        for (i, c) in self.counts.iter().enumerate() {
            let lo = self.start + i as u64 * self.width;
            if i == last {
                writeln!(s, "{lo},,{c}").ok();
            } else {
                writeln!(s, "{lo},{},{c}", lo + self.width).ok();
            }
        }
        s
    }

    /// A bar chart.
    pub(crate) fn to_svg(&self, title: &str) -> String {
        let (w, h, left, bottom, top) = (800.0, 400.0, 60.0, 40.0, 30.0);
        let n = self.counts.len() as f64;
        let max = self.counts.iter().copied().max().unwrap_or(1).max(1) as f64;
        let bw = (w - left - 10.0) / n;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{}\" y=\"18\" text-anchor=\"middle\">{}</text>\n",
            w / 2.0,
            xml_escape(title)
        );
        for (i, &c) in self.counts.iter().enumerate() {
            let bh = (h - top - bottom) * c as f64 / max;
            let x = left + i as f64 * bw;
            let y = h - bottom - bh;
            let fill = if i + 1 == self.counts.len() {
                "#c0504d"
            } else {
                "#4f81bd"
            };
            writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{fill}\"><title>{c}</title></rect>",
                (bw - 1.0).max(0.5)
            )
            .ok();
        }
        let axis_y = h - bottom;
        writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{axis_y}\" x2=\"{}\" y2=\"{axis_y}\" stroke=\"black\"/>",
            w - 10.0
        )
        .ok();
        for k in 0..=4 {
            let i = (self.counts.len() - 1) * k / 4;
            let ns = self.start + i as u64 * self.width;
            writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{:.2} us</text>",
                left + i as f64 * bw,
                axis_y + 16.0,
                ns as f64 / 1000.0
            )
            .ok();
        }
        writeln!(
            s,
            "<text x=\"{left}\" y=\"{}\">count (max {max}); last bar: above p99.9</text>",
            h - 6.0
        )
        .ok();
        s.push_str("</svg>\n");
        s
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v: Vec<u64> = (1..=1000).rev().collect();
        let s = summarize(&mut v);
        assert_eq!(
            (s.min, s.p50, s.p99, s.p999, s.max),
            (1, 500, 990, 999, 1000)
        );
        assert!((s.avg - 500.5).abs() < 1e-9);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[7], 0.999), 7);
    }

    #[test]
    fn tables_have_perftest_columns() {
        let mut v = vec![1000, 2000, 3000];
        let t = latency_table(64, &summarize(&mut v));
        assert!(
            t.contains("t_typical[us]") && t.contains("t_p99.9[us]"),
            "{t}"
        );
        assert!(t.contains("2.00"), "{t}");
        let b = bandwidth_table(65536, 1000, 1.0);
        assert!(b.contains("65.54"), "{b}"); // 65,536,000 bytes in a second
        assert!(b.contains("0.001000"), "{b}");
    }

    #[test]
    fn histogram_bins_and_outputs() {
        let v: Vec<u64> = (0..1000).map(|i| 1000 + i).collect();
        let h = Histogram::new(&v, 10);
        assert_eq!(h.start, 1000);
        assert_eq!(h.counts.iter().sum::<u64>(), 1000);
        assert_eq!(h.counts.len(), 11);
        let csv = h.to_csv();
        assert!(
            csv.starts_with("bin_start_ns,bin_end_ns,count\n1000,"),
            "{csv}"
        );
        assert_eq!(csv.lines().count(), 12);
        let svg = h.to_svg("write_lat <64 B>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("write_lat &lt;64 B&gt;"));
        assert_eq!(svg.matches("<rect x=").count(), 11);
    }
}
