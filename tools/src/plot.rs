//! Latency pictures: an SVG with the percentile distribution and a histogram, or the recorded
//! counts as CSV.
//!
//! The SVG has two panels:
//!
//! - **Latency by percentile**, as HdrHistogram's plots draw it: the x axis is the percentile on
//!   a log scale of 1/(1 − p), so 90 %, 99 %, 99.9 %, ... are equally spaced and the tail gets
//!   as much room as the body; the y axis is the latency in µs.
//! - **Histogram**: how many latencies fell in each bin, with a logarithmic count axis (a
//!   single slow message is as visible as ten thousand fast ones) over a logarithmic latency
//!   axis (every bin is the same fraction wider than the one before, so the body and a tail ten
//!   times slower get the same resolution).
//!
//! Both mark p50, p99 and p99.9.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::latency::Recorder;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 860.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 40.0;
/// The most bins of the histogram panel.
const BINS: usize = 160;

/// The percentiles marked, with their colours.
const MARKS: [(f64, &str, &str); 3] = [
    (0.5, "p50", "#2e7d32"),
    (0.99, "p99", "#ef6c00"),
    (0.999, "p99.9", "#c62828"),
];

/// `bin_start_ns,bin_end_ns,count`: one row per HdrHistogram bucket that holds a latency (a
/// bucket is 1 ns wide below 2.048 µs, 2 ns up to 4.096 µs, and so on; `bin_end_ns` is
/// exclusive).
pub fn csv(r: &Recorder) -> String {
    let h = r.histogram();
    let mut s = String::from("bin_start_ns,bin_end_ns,count\n");
    for v in h.iter_recorded() {
        let at = v.value_iterated_to();
        writeln!(
            s,
            "{},{},{}",
            h.lowest_equivalent(at),
            h.next_non_equivalent(at),
            v.count_at_value()
        )
        .ok();
    }
    s
}

/// The two panels as one SVG, under `title`.
pub fn svg(r: &Recorder, title: &str) -> String {
    let s = r.summary();
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"26\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">{}</text>\n\
         <text x=\"{}\" y=\"48\" text-anchor=\"middle\" fill=\"#444\">{} latencies: min {} · p50 {} · \
         p99 {} · p99.9 {} · max {} µs</text>\n",
        WIDTH / 2.0,
        escape(title),
        WIDTH / 2.0,
        s.count,
        us(s.min),
        us(s.p50),
        us(s.p99),
        us(s.p999),
        us(s.max),
    );
    if r.is_empty() {
        out.push_str("<text x=\"450\" y=\"200\" text-anchor=\"middle\">nothing recorded</text>\n");
    } else {
        percentile_panel(&mut out, r.histogram(), 80.0, 420.0);
        histogram_panel(&mut out, r.histogram(), 480.0, 820.0);
    }
    out.push_str("</svg>\n");
    out
}

/// A plot area: the rectangle inside the axes.
#[derive(Clone, Copy)]
struct Area {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Area {
    /// The area of a panel from `top` to `bottom` (title above, axis labels below).
    fn panel(top: f64, bottom: f64) -> Self {
        Self {
            x0: LEFT,
            x1: WIDTH - RIGHT,
            y0: top + 28.0,
            y1: bottom - 44.0,
        }
    }

    /// Pixel x of `f` (0 at the left edge, 1 at the right).
    fn x(&self, f: f64) -> f64 {
        self.x0 + f.clamp(0.0, 1.0) * (self.x1 - self.x0)
    }

    /// Pixel y of `f` (0 at the bottom, 1 at the top).
    fn y(&self, f: f64) -> f64 {
        self.y1 - f.clamp(0.0, 1.0) * (self.y1 - self.y0)
    }

    fn frame(&self, out: &mut String, title: &str, x_title: &str, y_title: &str) {
        let (x0, x1, y0, y1) = (self.x0, self.x1, self.y0, self.y1);
        let mid_y = (y0 + y1) / 2.0;
        writeln!(
            out,
            "<text x=\"{x0}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">{title}</text>\n\
             <rect x=\"{x0}\" y=\"{y0}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{x_title}</text>",
            y0 - 10.0,
            x1 - x0,
            y1 - y0,
            (x0 + x1) / 2.0,
            y1 + 38.0,
        )
        .ok();
        if !y_title.is_empty() {
            writeln!(
                out,
                "<text x=\"22\" y=\"{mid_y}\" text-anchor=\"middle\" \
                 transform=\"rotate(-90 22 {mid_y})\">{y_title}</text>"
            )
            .ok();
        }
    }

    fn x_tick(&self, out: &mut String, x: f64, label: &str) {
        writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#ddd\"/>\n\
             <line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"#333\"/>\n\
             <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            self.y0,
            self.y1,
            self.y1,
            self.y1 + 5.0,
            self.y1 + 19.0
        )
        .ok();
    }

    fn y_tick(&self, out: &mut String, y: f64, label: &str) {
        writeln!(
            out,
            "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\n\
             <line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#333\"/>\n\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            self.x0,
            self.x1,
            self.x0 - 5.0,
            self.x0,
            self.x0 - 8.0,
            y + 4.5
        )
        .ok();
    }

    /// The marked percentiles' values, right-aligned above the frame, each in its colour.
    fn legend(&self, out: &mut String, h: &Histogram<u64>) {
        let mut x = self.x1;
        for (q, name, colour) in MARKS.into_iter().rev() {
            let label = format!("{name} = {} µs", us(h.value_at_quantile(q)));
            writeln!(
                out,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{colour}\" \
                 font-weight=\"bold\">{label}</text>",
                self.y0 - 10.0
            )
            .ok();
            // About 7.5 px a character at this size, and a gap.
            x -= label.chars().count() as f64 * 7.5 + 24.0;
        }
    }

    /// A dashed vertical line at pixel `x` with `label` at its top, in `colour`; `row` staggers
    /// the labels of close marks. A white halo keeps the label readable over bars and curves.
    fn mark(&self, out: &mut String, x: f64, label: &str, colour: &str, row: usize) {
        let ly = self.y0 + 16.0 + 16.0 * row as f64;
        let (anchor, lx) = if x > (self.x0 + self.x1) / 2.0 {
            ("end", x - 4.0)
        } else {
            ("start", x + 4.0)
        };
        writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{colour}\" \
             stroke-width=\"1.5\" stroke-dasharray=\"5,4\"/>\n\
             <text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"{anchor}\" fill=\"{colour}\" \
             font-weight=\"bold\" stroke=\"white\" stroke-width=\"4\" paint-order=\"stroke\">{label}</text>",
            self.y0, self.y1
        )
        .ok();
    }
}

/// Where on the percentile axis `q` lies: log10(1 / (1 − q)), in decades (90 % is 1).
fn decades(q: f64) -> f64 {
    -(1.0 - q).max(1e-18).log10()
}

/// `90%`, `99.9%`, ... for `k` decades.
fn percent_label(k: u32) -> String {
    match k {
        0 => "0%".into(),
        1 => "90%".into(),
        2 => "99%".into(),
        k => format!("99.{}%", "9".repeat(k as usize - 2)),
    }
}

fn percentile_panel(out: &mut String, h: &Histogram<u64>, top: f64, bottom: f64) {
    let a = Area::panel(top, bottom);
    a.frame(
        out,
        "Latency by percentile",
        "percentile (log scale of 1/(1 − p): each step one more nine)",
        "",
    );
    let n = h.len();
    // The axis ends one decade past the last percentile that n latencies resolve (1 − 1/n),
    // so the largest latency gets a step of its own.
    let span = f64::from(((n as f64).log10().floor() as u32 + 1).max(2));
    for k in 0..=span as u32 {
        a.x_tick(out, a.x(f64::from(k) / span), &percent_label(k));
    }
    // Latency axis: linear from 0, unless the largest latency is more than 20 times the
    // median, when a linear axis would flatten the body into its bottom line: then logarithmic.
    let max_us = h.max() as f64 / 1000.0;
    let log_y = h.max() > 20 * h.value_at_quantile(0.5).max(1);
    let fy: Box<dyn Fn(f64) -> f64> = if log_y {
        let lo = (h.lowest_equivalent(h.min()).max(1) as f64 / 1000.0 / 1.15).ln();
        let hi = (max_us * 1.15).ln();
        for t in log_ticks(lo.exp() * 1000.0, hi.exp() * 1000.0) {
            a.y_tick(
                out,
                a.y(((t / 1000.0).ln() - lo) / (hi - lo)),
                &tick(t / 1000.0),
            );
        }
        Box::new(move |v: f64| (v.max(1e-3).ln() - lo) / (hi - lo))
    } else {
        let y_top = nice_ceil(max_us * 1.05);
        let step = nice_step(y_top / 6.0);
        let mut v = 0.0;
        while v <= y_top + step / 1e6 {
            a.y_tick(out, a.y(v / y_top), &tick(v));
            v += step;
        }
        Box::new(move |v: f64| v / y_top)
    };
    let y_title = if log_y {
        "latency (µs, log scale)"
    } else {
        "latency (µs)"
    };
    writeln!(
        out,
        "<text x=\"22\" y=\"{0}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {0})\">{y_title}</text>",
        (a.y0 + a.y1) / 2.0
    )
    .ok();
    // The distribution as steps: each recorded value from the quantile below it to its own.
    let mut points = String::new();
    let mut below = 0u64;
    for it in h.iter_recorded() {
        let y = a.y(fy(
            h.highest_equivalent(it.value_iterated_to()) as f64 / 1000.0
        ));
        let from = a.x(decades(below as f64 / n as f64) / span);
        below += it.count_at_value();
        let to = if below >= n {
            a.x1
        } else {
            a.x(decades(below as f64 / n as f64) / span)
        };
        write!(points, "{from:.1},{y:.1} {to:.1},{y:.1} ").ok();
    }
    writeln!(
        out,
        "<polyline points=\"{}\" fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"2\"/>",
        points.trim_end()
    )
    .ok();
    for (row, (q, name, colour)) in MARKS.into_iter().enumerate() {
        if decades(q) > span {
            continue;
        }
        let v = h.value_at_quantile(q);
        let x = a.x(decades(q) / span);
        a.mark(out, x, name, colour, row);
        writeln!(
            out,
            "<circle cx=\"{x:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{colour}\"/>",
            a.y(fy(v as f64 / 1000.0))
        )
        .ok();
    }
    a.legend(out, h);
}

fn histogram_panel(out: &mut String, h: &Histogram<u64>, top: f64, bottom: f64) {
    let a = Area::panel(top, bottom);
    a.frame(
        out,
        "Histogram",
        "latency (µs, log scale)",
        "count (log scale)",
    );
    // Latency axis: from the smallest to the largest latency, widened a little when they are
    // close; bins of equal ratio, none narrower than twice HdrHistogram's resolution there (or
    // neighbours would take turns being empty).
    let lo_ns = h.lowest_equivalent(h.min()).max(1) as f64;
    let hi_ns = h.next_non_equivalent(h.max()) as f64;
    let (lo, hi) = if hi_ns / lo_ns < 1.5 {
        (lo_ns / 1.2, hi_ns * 1.2)
    } else {
        (lo_ns / 1.03, hi_ns * 1.03)
    };
    let resolution = h.equivalent_range(lo_ns as u64).max(1) as f64;
    let fit = ((hi / lo).ln() / (1.0 + 2.0 * resolution / lo).ln()).floor();
    let bins = (fit as usize).clamp(1, BINS);
    let (l0, l1) = (lo.ln(), hi.ln());
    let fx = |ns: f64| (ns.max(lo).ln() - l0) / (l1 - l0);
    let mut counts = vec![0u64; bins];
    for it in h.iter_recorded() {
        let at = h.lowest_equivalent(it.value_iterated_to()).max(1) as f64;
        let i = ((fx(at) * bins as f64) as usize).min(bins - 1);
        counts[i] += it.count_at_value();
    }
    // Count axis: decades from just below 1 (so a bin of one has a visible bar).
    let max = counts.iter().copied().max().unwrap_or(1).max(1);
    let decades_up = (max as f64).log10().ceil().max(1.0);
    let floor = -0.3;
    let fy = |c: f64| (c.log10() - floor) / (decades_up - floor);
    for k in 0..=decades_up as u32 {
        a.y_tick(out, a.y(fy(10f64.powi(k as i32))), &count_label(k));
    }
    for ns in log_ticks(lo, hi) {
        a.x_tick(out, a.x(fx(ns)), &tick(ns / 1000.0));
    }
    let width = (a.x1 - a.x0) / bins as f64;
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let y = a.y(fy(c as f64));
        let from_ns = (l0 + (l1 - l0) * i as f64 / bins as f64).exp();
        let to_ns = (l0 + (l1 - l0) * (i + 1) as f64 / bins as f64).exp();
        writeln!(
            out,
            "<rect x=\"{:.2}\" y=\"{y:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"#4f81bd\" \
             stroke=\"#2c4f7c\" stroke-width=\"0.5\"><title>{} to {} µs: {c}</title></rect>",
            a.x0 + i as f64 * width,
            width,
            a.y1 - y,
            us_f(from_ns / 1000.0),
            us_f(to_ns / 1000.0),
        )
        .ok();
    }
    for (row, (q, name, colour)) in MARKS.into_iter().enumerate() {
        let v = h.value_at_quantile(q);
        a.mark(out, a.x(fx(v as f64)), name, colour, row);
    }
    a.legend(out, h);
}

/// `1`, `10`, `100`, `1k`, ... for 10^k.
fn count_label(k: u32) -> String {
    match k {
        0..=2 => 10u64.pow(k).to_string(),
        3..=5 => format!("{}k", 10u64.pow(k - 3)),
        6..=8 => format!("{}M", 10u64.pow(k - 6)),
        _ => format!("1e{k}"),
    }
}

/// Tick values (ns) for a log axis from `lo` to `hi`: 1, 2, 5 × 10^k, or every digit when
/// that gives fewer than four, or the two ends when even that gives fewer than two.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let within = |digits: &[f64]| -> Vec<f64> {
        let mut v = Vec::new();
        let mut decade = 10f64.powf(lo.log10().floor());
        while decade <= hi {
            for &d in digits {
                let t = d * decade;
                if t >= lo * 0.999 && t <= hi * 1.001 {
                    v.push(t);
                }
            }
            decade *= 10.0;
        }
        v
    };
    let v = within(&[1.0, 2.0, 5.0]);
    if v.len() >= 4 {
        return v;
    }
    let v = within(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    if v.len() >= 2 { v } else { vec![lo, hi] }
}

/// The smallest 1, 2 or 5 × 10^k at least `x` (and above 0).
fn nice_step(x: f64) -> f64 {
    let x = x.max(1e-3);
    let decade = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|d| d * decade)
        .find(|&s| s >= x * 0.999)
        .unwrap_or(10.0 * decade)
}

/// `x` rounded up to a multiple of a nice step (about a sixth of it).
fn nice_ceil(x: f64) -> f64 {
    let step = nice_step(x.max(1e-3) / 6.0);
    (x / step).ceil().max(1.0) * step
}

/// ns as µs with the digits that matter.
fn us(ns: u64) -> String {
    us_f(ns as f64 / 1000.0)
}

/// An axis label: a round number without trailing zeros.
fn tick(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.into() }
}

fn us_f(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(values: impl IntoIterator<Item = u64>) -> Recorder {
        values.into_iter().collect()
    }

    #[test]
    fn the_csv_has_every_recorded_bucket_once() {
        let r = recorded([1000, 1000, 1001, 5000]);
        let csv = csv(&r);
        // 5000 ns lies where buckets are 4 ns wide.
        assert_eq!(
            csv,
            "bin_start_ns,bin_end_ns,count\n1000,1001,2\n1001,1002,1\n5000,5004,1\n"
        );
    }

    #[test]
    fn the_percentile_axis_has_one_step_per_nine() {
        assert_eq!(percent_label(0), "0%");
        assert_eq!(percent_label(1), "90%");
        assert_eq!(percent_label(2), "99%");
        assert_eq!(percent_label(3), "99.9%");
        assert_eq!(percent_label(5), "99.999%");
        assert!((decades(0.999) - 3.0).abs() < 1e-9);
        assert_eq!(decades(0.0), 0.0);
        assert!(decades(1.0).is_finite());
    }

    #[test]
    fn axes_get_round_ticks() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(34.0), 50.0);
        assert_eq!(nice_ceil(7.3), 8.0);
        assert_eq!(log_ticks(1500.0, 60_000.0), [2e3, 5e3, 1e4, 2e4, 5e4]);
        assert_eq!(log_ticks(2100.0, 2900.0), [2100.0, 2900.0]);
        assert_eq!(log_ticks(1900.0, 4100.0), [2e3, 3e3, 4e3]);
        assert_eq!(count_label(0), "1");
        assert_eq!(count_label(4), "10k");
    }

    #[test]
    fn the_svg_has_both_panels_labelled_and_marked() {
        let mut values: Vec<u64> = (0..10_000).map(|i| 1000 + i % 1000).collect();
        values.extend([40_000, 90_000]);
        let svg = svg(&recorded(values), "write_lat <64 B>");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("write_lat &lt;64 B&gt;"));
        for text in [
            "Latency by percentile",
            "Histogram",
            "latency (µs, log scale)",
            "count (log scale)",
            ">90%<",
            ">99.99%<",
            ">99.999%<",
            ">1k<",
            "p50 = 1.50 µs",
            "p99 = 1.99 µs",
            "p99.9 = 2.00 µs",
            "max 90.0 µs",
        ] {
            assert!(svg.contains(text), "{text:?} missing:\n{svg}");
        }
        // The three marks in each panel.
        assert_eq!(svg.matches("stroke-dasharray").count(), 6);
        // The two largest latencies have bars of their own, far from the body.
        assert!(svg.contains(": 1</title></rect>"), "{svg}");
        assert!(svg.contains("<polyline"));
        for element in ["text", "rect", "line"] {
            let open = svg.matches(&format!("<{element} ")).count();
            let closed = svg.matches(&format!("</{element}>")).count() + svg.matches("/>").count();
            assert!(open > 0 && closed >= open, "<{element}>: {open} opened");
        }
        assert_eq!(
            svg.matches("<text ").count(),
            svg.matches("</text>").count()
        );
    }

    #[test]
    fn the_latency_axis_is_linear_unless_the_tail_is_long() {
        let tight = svg(&recorded((0..1000).map(|i| 2000 + i)), "t");
        assert!(tight.contains(">latency (µs)<"), "{tight}");
        let long = svg(&recorded((0..1000).map(|i| 2000 + i).chain([50_000])), "t");
        assert!(long.contains(">latency (µs, log scale)<"), "{long}");
    }

    #[test]
    fn an_empty_recorder_still_gives_a_picture() {
        let svg = svg(&Recorder::new(), "t");
        assert!(svg.contains("nothing recorded"));
        assert_eq!(csv(&Recorder::new()), "bin_start_ns,bin_end_ns,count\n");
    }
}
