//! What a provider knows of its device's clock, and the arithmetic that turns its frequency
//! into a conversion.

use std::time::{SystemTime, UNIX_EPOCH};

use zverbs_mlx5dv::clock::ClockInfo;

/// What a provider knows of its device's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClockSnapshot {
    /// `hca_core_clock`, kHz.
    pub(crate) khz: u64,
    /// `completion_timestamp_mask`.
    pub(crate) mask: u64,
    /// The timecounter now.
    pub(crate) info: ClockInfo,
    /// How long `info` converts correctly, in ns (`overflow_period`).
    pub(crate) max_age_ns: u64,
}

/// The wall-clock time now in ns since the Unix epoch.
pub(crate) fn wall_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The mult/shift of a [`ClockInfo`] for a clock of `khz` kHz: `mult = 10^6 · 2^shift / khz`,
/// rounded, with the largest `shift` that keeps `mult` in 32 bits and `max_ticks · mult` from
/// overflowing (the error of the rounding: below 0.1 ppm for clocks of 10 MHz and more over an
/// hour of ticks).
pub(crate) fn mult_shift(khz: u64, max_ticks: u64) -> (u32, u32) {
    let mut shift = 32u32;
    loop {
        let khz = u128::from(khz.max(1));
        let mult = (((1_000_000u128 << shift) + khz / 2) / khz) as u64;
        if shift == 0
            || (mult <= u64::from(u32::MAX) && (max_ticks as u128 * mult as u128) < (1u128 << 64))
        {
            return (mult as u32, shift);
        }
        shift -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mult_shift_fits_and_converts() {
        // 156.25 MHz over an hour of ticks.
        let hour = 156_250_000 * 3600;
        let (mult, shift) = mult_shift(156_250, hour);
        assert!((u128::from(hour) * u128::from(mult)) < (1 << 64));
        // One second of ticks, to 0.1 ppm (100 ns).
        let ns = (156_250_000u64 * u64::from(mult)) >> shift;
        assert!(ns.abs_diff(1_000_000_000) <= 100, "{ns}");
        // 1 GHz: exactly one ns a tick.
        let (mult, shift) = mult_shift(1_000_000, hour);
        assert_eq!(u64::from(mult) >> shift, 1);
    }
}
