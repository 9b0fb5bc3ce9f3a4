//! Tools side by side on the emulated device: each contender run once a round, in alternating
//! order, and each row's figures reduced to medians and ratios. The connectx stage's table
//! against perftest and `cargo xtask bench --ucx`'s against UCX are made with it.

use crate::report::{RatioStats, ratio_stats};
use crate::util::Result;

/// Runs contenders `0..n` (`run(i)` runs contender `i` once and gives its figure) for `rounds`
/// rounds: in order in even rounds, in reverse in odd ones (the contender that went last goes
/// first in the next round), so that a slow stretch of the shared machine hits all of them.
/// Each contender's figures, one per round.
pub(crate) fn alternating(
    rounds: usize,
    n: usize,
    mut run: impl FnMut(usize) -> Result<f64>,
) -> Result<Vec<Vec<f64>>> {
    let mut figures = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = if round % 2 == 0 { k } else { n - 1 - k };
            let f = run(i)?;
            figures[i].push(f);
        }
    }
    Ok(figures)
}

/// The median of a contender's figures (the upper one of an even count).
pub(crate) fn median(figures: &[f64]) -> f64 {
    let mut v = figures.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The statistics of the per-round ratios `ours[r] / theirs[r]`.
pub(crate) fn ratios(ours: &[f64], theirs: &[f64]) -> RatioStats {
    let pairs: Vec<(f64, f64)> = ours.iter().copied().zip(theirs.iter().copied()).collect();
    ratio_stats(&pairs)
}

/// A ratio cell: the median of the rounds' ratios and its bootstrap 95% interval.
pub(crate) fn ratio_cell(s: &RatioStats) -> String {
    format!("{:.3} ({:.3}-{:.3})", s.median, s.low, s.high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_the_order() {
        let mut order = Vec::new();
        let f = alternating(3, 3, |i| {
            order.push(i);
            Ok(i as f64)
        })
        .unwrap();
        assert_eq!(order, [0, 1, 2, 2, 1, 0, 0, 1, 2]);
        assert_eq!(f, [vec![0.0; 3], vec![1.0; 3], vec![2.0; 3]]);
    }

    #[test]
    fn medians_and_ratios_of_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        let s = ratios(&[2.0, 3.0, 4.0], &[2.0, 2.0, 2.0]);
        assert_eq!(s.median, 1.5);
        assert_eq!(ratio_cell(&s).split(' ').next(), Some("1.500"));
    }
}
