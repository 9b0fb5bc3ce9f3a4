//! What the benchmarks and the comparisons share: the statistics of paired rounds (a ratio's
//! median and its bootstrap interval), and the blocks of `docs/performance.md` they rewrite,
//! stamped with the machine they were measured on.

use std::path::Path;
use std::process::Command;

use crate::util::{Result, bail};

/// The page the figures are written into.
pub const DOC: &str = "docs/performance.md";

/// What the rounds say about the ratio zverbs / C.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatioStats {
    /// Rounds.
    pub rounds: usize,
    /// The median of the rounds' ratios.
    pub median: f64,
    /// A 95% confidence interval of that median (bootstrap, 2000 resamples).
    pub low: f64,
    /// Its upper end.
    pub high: f64,
    /// Total zverbs time over total C time.
    pub of_totals: f64,
}

/// The median of `v` (the mean of the middle two for an even count; `NaN` for none), sorting
/// it in place.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The statistics of the rounds' ratios (deterministic: the resampling uses a fixed seed).
pub fn ratio_stats(rounds: &[(f64, f64)]) -> RatioStats {
    let ratios: Vec<f64> = rounds.iter().map(|(o, c)| o / c).collect();
    let middle = median(&mut ratios.clone());
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut medians = Vec::with_capacity(2000);
    let mut sample = vec![0.0; ratios.len()];
    for _ in 0..2000 {
        for x in sample.iter_mut() {
            *x = ratios[(next() % ratios.len().max(1) as u64) as usize];
        }
        medians.push(median(&mut sample));
    }
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| {
        medians
            .get(((medians.len() as f64 * q) as usize).min(medians.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    let (o, c): (f64, f64) = rounds
        .iter()
        .fold((0.0, 0.0), |(a, b), (o, c)| (a + o, b + c));
    RatioStats {
        rounds: rounds.len(),
        median: middle,
        low: at(0.025),
        high: at(0.975),
        of_totals: o / c,
    }
}

/// Met when the whole interval is at or under the goal, missed when it is all above it.
pub fn verdict(s: &RatioStats, goal: f64) -> &'static str {
    if s.high <= goal {
        "met"
    } else if s.low > goal {
        "missed"
    } else {
        "not decided at this precision (the interval contains the goal)"
    }
}

/// One line naming the CPU and the compilers.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let first_line = |prog: &str, arg: &str| {
        Command::new(prog)
            .arg(arg)
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(str::to_string)
            })
            .unwrap_or_else(|| format!("{prog} (unknown version)"))
    };
    // The machine's load when the figures were taken: times from a shared machine mean
    // little without it.
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .map(|l| {
            let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
            format!(" Load average {l} on {cpus} CPUs at the end of the run.")
        })
        .unwrap_or_default();
    format!(
        "Measured on {cpu}, {} and {}.{load}\n",
        first_line("rustc", "--version"),
        first_line("cc", "--version")
    )
}

/// The one-minute load average (`/proc/loadavg`), if it can be read.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether a timed run at one-minute load averages `start` and `end` had the machine to
/// itself: the benchmark keeps one CPU busy, so a load above 1.5 (on any number of CPUs: a
/// second busy thread shares caches, memory bandwidth and, in a VM, the host) means something
/// else ran beside it. Times taken that way move by tens of percent from run to run (a
/// ratio can double or halve), while the instruction counts do not move at all.
pub fn quiet(start: f64, end: f64) -> bool {
    start.max(end) <= QUIET_LOAD
}

/// The highest one-minute load average at which a timed run counts as quiet ([`quiet`]).
pub const QUIET_LOAD: f64 = 1.5;

/// Replaces the text between `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` in
/// `path` with `body`.
pub fn replace_block(path: &Path, name: &str, body: &str) -> Result {
    let text = std::fs::read_to_string(path)?;
    let Some(new) = with_block(&text, name, body) else {
        bail!(
            "{} has no `<!-- bench:{name}:begin -->` ... `end` markers",
            path.display()
        );
    };
    std::fs::write(path, new)?;
    Ok(())
}

/// `text` with the block `name` replaced by `body`, or `None` without its markers.
pub fn with_block(text: &str, name: &str, body: &str) -> Option<String> {
    let begin = format!("<!-- bench:{name}:begin -->\n");
    let end = format!("<!-- bench:{name}:end -->");
    let b = text.find(&begin)? + begin.len();
    let e = b + text[b..].find(&end)?;
    Some(format!("{}{}{}", &text[..b], body, &text[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_run_is_quiet_only_when_nothing_ran_beside_it() {
        // The benchmark alone keeps the load near 1.
        assert!(quiet(0.9, 1.2));
        assert!(quiet(1.5, 1.5));
        // A build beside it (the runs behind the old 1.57x batch8 row: 3.7 at the end).
        assert!(!quiet(0.9, 3.3));
        assert!(!quiet(3.7, 1.0));
    }

    #[test]
    fn blocks_are_replaced_between_markers() {
        let doc = "a\n<!-- bench:times:begin -->\nold\n<!-- bench:times:end -->\nb\n";
        assert_eq!(
            with_block(doc, "times", "new\n").as_deref(),
            Some("a\n<!-- bench:times:begin -->\nnew\n<!-- bench:times:end -->\nb\n")
        );
        assert_eq!(with_block(doc, "instructions", "x"), None);
    }

    #[test]
    fn the_statistics_of_paired_rounds() {
        let rounds: Vec<(f64, f64)> = (0..101).map(|i| (100.0 + f64::from(i), 100.0)).collect();
        let s = ratio_stats(&rounds);
        assert_eq!(s.rounds, 101);
        assert!((s.median - 1.5).abs() < 1e-9, "{s:?}");
        assert!(
            s.low <= s.median && s.median <= s.high && s.low > 1.3 && s.high < 1.7,
            "{s:?}"
        );
        assert!((s.of_totals - 1.5).abs() < 1e-9);
        assert_eq!(verdict(&s, 2.0), "met");
        assert_eq!(verdict(&s, 1.0), "missed");
        assert!(verdict(&s, 1.5).starts_with("not decided"));
    }
}
