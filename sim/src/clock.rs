//! The device clock: a free-running counter of [`CLOCK_KHZ`] ticks, as a ConnectX's
//! `hca_core_clock`, that stamps the CQEs of CQs created with completion timestamps.
//!
//! It counts the host's monotonic clock scaled to its frequency (156.25 MHz: 5 ticks every
//! 32 ns, exactly) from the moment the device was created, masked to [`CLOCK_MASK`] (41 bits, as
//! the kernel's mlx5 timecounter). [`DeviceClock::clock_info`] is the page the kernel would
//! share for it (`struct ib_uverbs_clock_info`): the counter and the wall-clock time
//! (`CLOCK_REALTIME`) read together, with the mult/shift that turn ticks into nanoseconds.
//! Unlike the kernel's page it is computed when asked for, so it is never being updated
//! (`sign` 0) and always fresh.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use zverbs_mlx5dv::prm::clock::ib_uverbs_clock_info;

/// The clock's frequency in kHz (`hca_core_clock`): 156.25 MHz, as on ConnectX-4 to -6.
pub const CLOCK_KHZ: u64 = 156_250;

/// The counter's width (`completion_timestamp_mask`, the clock-info page's `mask`): 41 bits.
pub const CLOCK_MASK: u64 = (1 << 41) - 1;

/// The clock-info page's `shift`, and `mult` = 6.4 ns a tick scaled by 2^[`CLOCK_SHIFT`]
/// (6 710 886.4, rounded).
pub const CLOCK_SHIFT: u32 = 20;
/// See [`CLOCK_SHIFT`].
pub const CLOCK_MULT: u32 = 6_710_886;

/// The device's clock.
#[derive(Clone, Copy, Debug)]
pub struct DeviceClock {
    origin: Instant,
}

impl Default for DeviceClock {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceClock {
    /// A clock that reads 0 now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// The counter: ticks since the clock was made, masked to [`CLOCK_MASK`].
    pub fn ticks(&self) -> u64 {
        Self::ticks_at(self.origin.elapsed().as_nanos())
    }

    /// The counter `ns` nanoseconds after the origin: `ns · 5 / 32`, masked.
    fn ticks_at(ns: u128) -> u64 {
        ((ns * 5 / 32) as u64) & CLOCK_MASK
    }

    /// The real-time clock as a ConnectX's real-time timestamps carry it (a CQ created with
    /// `MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS`): `CLOCK_REALTIME` as seconds in the high 32
    /// bits and nanoseconds in the low 32, not a count of nanoseconds.
    pub fn real_time(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        real_time_of(now.as_secs(), now.subsec_nanos())
    }

    /// The clock-info page of this clock now: the counter and the wall-clock time read
    /// together, and how ticks become nanoseconds.
    pub fn clock_info(&self) -> ib_uverbs_clock_info {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let cycles = self.ticks();
        ib_uverbs_clock_info {
            sign: 0,
            resv: 0,
            nsec: real,
            cycles,
            frac: 0,
            mult: CLOCK_MULT,
            shift: CLOCK_SHIFT,
            mask: CLOCK_MASK,
            // Half the counter's range, in ns: a timestamp further than that from `cycles`
            // would be taken as one from the other side.
            overflow_period: ((CLOCK_MASK / 2) as u128 * 32 / 5) as u64,
        }
    }
}

/// A real-time timestamp of `secs` seconds and `nanos` nanoseconds: `secs << 32 | nanos`.
pub const fn real_time_of(secs: u64, nanos: u32) -> u64 {
    (secs << 32) | nanos as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use zverbs_mlx5dv::clock::{ClockInfo, TickRate};

    #[test]
    fn ticks_follow_the_frequency() {
        assert_eq!(DeviceClock::ticks_at(0), 0);
        assert_eq!(DeviceClock::ticks_at(32), 5);
        assert_eq!(DeviceClock::ticks_at(1_000_000_000), 156_250_000);
        // The counter wraps at 41 bits.
        let wrap_ns = ((CLOCK_MASK as u128 + 1) * 32).div_ceil(5);
        assert_eq!(DeviceClock::ticks_at(wrap_ns), 0);
        assert_eq!(DeviceClock::ticks_at(wrap_ns - 32), CLOCK_MASK - 4);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "reads CLOCK_REALTIME, which Miri's isolation withholds"
    )]
    fn mult_and_shift_make_nanoseconds_of_ticks() {
        let rate = TickRate::from_khz(CLOCK_KHZ).unwrap();
        let ci = DeviceClock::new().clock_info();
        let info = ClockInfo::from_page(&ci);
        // One second of ticks is one second, by either conversion (to 1 ns in 10^7).
        let second = info.ts_to_ns(info.last_cycles + 156_250_000) - info.nsec;
        assert!(second.abs_diff(1_000_000_000) < 100, "{second}");
        assert_eq!(rate.ticks_to_ns(156_250_000), 1_000_000_000);
    }

    #[test]
    fn the_counter_never_goes_back() {
        let c = DeviceClock::new();
        let mut last = c.ticks();
        for _ in 0..1000 {
            let t = c.ticks();
            assert!(t >= last);
            last = t;
        }
    }
}
