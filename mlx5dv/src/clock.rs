//! The device clock: CQE timestamps to nanoseconds, without a system call.
//!
//! A CQE timestamp counts ticks of the device's free-running clock (`hca_core_clock` kHz,
//! masked to the counter's width). Two conversions:
//!
//! - [`TickRate`]: ticks to nanoseconds of the device clock, from its frequency alone: for
//!   durations (the difference of two timestamps);
//! - [`ClockInfo`]: ticks to wall-clock nanoseconds (`CLOCK_REALTIME`), from a snapshot of the
//!   kernel's timecounter (`mlx5dv_get_clock_info`, `mlx5dv_ts_to_ns`): the page libmlx5 maps
//!   ([`prm::clock`](crate::prm::clock)), read with its sequence word by [`ClockInfo::read`].
//!
//! A device in real-time mode (`MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS`, CQs created with the
//! wall-clock flag) writes `CLOCK_REALTIME` into the CQE as **seconds in the high 32 bits and
//! nanoseconds in the low 32** (the kernel's `mlx5_real_time_cyc2time`, DPDK's
//! `mlx5_txpp_convert_rx_ts`), not as a count of nanoseconds: [`ClockInfo::REAL_TIME`]
//! converts that (`hi × 10^9 + lo`). libmlx5's `ibv_wc_read_completion_wallclock_ns` on such a
//! CQ returns the CQE's value as it is (`mlx5_cq_read_wc_completion_ts`, rdma-core 44 and
//! later), so a reader of completions through libibverbs converts it with
//! [`real_time_to_ns`] too.

use crate::prm::clock::{
    MLX5_IB_CLOCK_INFO_KERNEL_UPDATING, ib_uverbs_clock_info, mlx5dv_clock_info,
};

/// Ticks to nanoseconds for a clock of a known frequency: `ns = ticks · mult >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickRate {
    khz: u64,
    /// Nanoseconds per tick scaled by 2^32 (`1e6 << 32 / khz`, rounded up so that whole
    /// nanoseconds are not lost to the truncation), so a conversion is one wide multiplication
    /// and a shift.
    mult: u64,
}

impl TickRate {
    /// The rate of a clock of `khz` kHz (`hca_core_clock` of `ibv_query_device_ex`), or `None`
    /// for 0 (a device without a clock).
    pub const fn from_khz(khz: u64) -> Option<Self> {
        if khz == 0 {
            return None;
        }
        let mult = (1_000_000u128 << 32).div_ceil(khz as u128) as u64;
        Some(Self { khz, mult })
    }

    /// The frequency in kHz.
    #[inline]
    pub const fn khz(&self) -> u64 {
        self.khz
    }

    /// `ticks` of the clock in nanoseconds (to within 1 ns per 2^32 ticks).
    #[inline]
    pub const fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.mult as u128) >> 32) as u64
    }
}

/// A snapshot of the kernel's timecounter over the device clock: the values of
/// `struct mlx5dv_clock_info`, and `mlx5dv_ts_to_ns` as a method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockInfo {
    /// Wall-clock nanoseconds at `last_cycles`.
    pub nsec: u64,
    /// The device counter at the snapshot.
    pub last_cycles: u64,
    /// Fractional nanoseconds at `last_cycles`, scaled by `2^shift`.
    pub frac: u64,
    /// Nanoseconds per tick scaled by `2^shift`.
    pub mult: u32,
    /// The scale of `mult` and `frac`.
    pub shift: u32,
    /// The counter's width (`2^n - 1`).
    pub mask: u64,
}

/// Why the clock-info page could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClockInfoError {
    /// The page was being updated on every attempt (`EBUSY` of `mlx5dv_get_clock_info`).
    #[error("the clock-info page was being updated on every read")]
    Busy,
}

impl ClockInfo {
    /// The timestamps of a device in real-time mode, `seconds << 32 | nanoseconds`:
    /// [`ClockInfo::ts_to_ns`] converts them with [`real_time_to_ns`]. Told apart from a
    /// snapshot by `mult` 0 with a full mask (no timecounter has a `mult` of 0).
    pub const REAL_TIME: Self = Self {
        nsec: 0,
        last_cycles: 0,
        frac: 0,
        mult: 0,
        shift: 0,
        mask: u64::MAX,
    };

    /// Whether this is [`ClockInfo::REAL_TIME`].
    #[inline]
    pub const fn is_real_time(&self) -> bool {
        self.mult == 0 && self.mask == u64::MAX
    }

    /// Attempts [`ClockInfo::read`] makes before it reports [`ClockInfoError::Busy`] (as
    /// libmlx5).
    pub const READ_ATTEMPTS: u32 = 10;

    /// Reads the clock-info page `page` as `mlx5dv_get_clock_info` does: the fields between
    /// two equal loads of `sign` without [`MLX5_IB_CLOCK_INFO_KERNEL_UPDATING`].
    ///
    /// # Safety
    ///
    /// `page` points to a readable, aligned `struct ib_uverbs_clock_info` for the duration of
    /// the call (the page libmlx5 mapped, or the software device's), which only its owner
    /// writes, under the sequence word.
    ///
    /// # Errors
    ///
    /// [`ClockInfoError::Busy`] when every attempt saw an update in progress.
    pub unsafe fn read(page: *const ib_uverbs_clock_info) -> Result<Self, ClockInfoError> {
        use zverbs_core::sync::atomic::{Ordering, fence};
        // SAFETY: (caller) `page` is readable and aligned for the whole call; its fields
        // (`sign` among them) are plain integers, and a copy torn by a concurrent update is
        // discarded by the second load of the word. Volatile loads: another party (the
        // kernel, the device thread) writes the page.
        unsafe {
            let sign = || core::ptr::addr_of!((*page).sign).read_volatile();
            let mut busy = 0;
            loop {
                let before = sign();
                if before & MLX5_IB_CLOCK_INFO_KERNEL_UPDATING != 0 {
                    busy += 1;
                    if busy >= Self::READ_ATTEMPTS {
                        return Err(ClockInfoError::Busy);
                    }
                    core::hint::spin_loop();
                    continue;
                }
                // Acquire: the fields are read after the first load of the word.
                fence(Ordering::Acquire);
                let ci = page.read_volatile();
                // The fields are read before the second load of the word.
                fence(Ordering::Acquire);
                if sign() == before {
                    return Ok(Self::from_page(&ci));
                }
            }
        }
    }

    /// The values of a copy of the page.
    pub const fn from_page(ci: &ib_uverbs_clock_info) -> Self {
        Self {
            nsec: ci.nsec,
            last_cycles: ci.cycles,
            frac: ci.frac,
            mult: ci.mult,
            shift: ci.shift,
            mask: ci.mask,
        }
    }

    /// The values of `struct mlx5dv_clock_info`.
    pub const fn from_dv(ci: &mlx5dv_clock_info) -> Self {
        Self {
            nsec: ci.nsec,
            last_cycles: ci.last_cycles,
            frac: ci.frac,
            mult: ci.mult,
            shift: ci.shift,
            mask: ci.mask,
        }
    }

    /// `device_timestamp` in wall-clock nanoseconds (`mlx5dv_ts_to_ns`). A timestamp more than
    /// half the counter's range after `last_cycles` is taken as one before it. For
    /// [`ClockInfo::REAL_TIME`], [`real_time_to_ns`].
    #[inline]
    pub const fn ts_to_ns(&self, device_timestamp: u64) -> u64 {
        if self.is_real_time() {
            return real_time_to_ns(device_timestamp);
        }
        let delta = device_timestamp.wrapping_sub(self.last_cycles) & self.mask;
        let mult = self.mult as u64;
        if delta > self.mask / 2 {
            let back = self.last_cycles.wrapping_sub(device_timestamp) & self.mask;
            self.nsec
                .wrapping_sub(back.wrapping_mul(mult).wrapping_sub(self.frac) >> self.shift)
        } else {
            self.nsec
                .wrapping_add(delta.wrapping_mul(mult).wrapping_add(self.frac) >> self.shift)
        }
    }
}

/// A real-time CQE timestamp (`seconds << 32 | nanoseconds`, what a ConnectX in real-time
/// mode writes, and what libmlx5's `ibv_wc_read_completion_wallclock_ns` returns unconverted)
/// in nanoseconds since the epoch: `hi × 10^9 + lo`.
#[inline]
pub const fn real_time_to_ns(ts: u64) -> u64 {
    (ts >> 32)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 156.25 MHz clock (6.4 ns a tick) as mult/shift: 6.4 · 2^10 = 6553.6, so 6554 >> 10.
    const INFO: ClockInfo = ClockInfo {
        nsec: 1_000_000_000,
        last_cycles: 1000,
        frac: 0,
        mult: 6554,
        shift: 10,
        mask: (1 << 41) - 1,
    };

    #[test]
    fn known_values_forward_and_back() {
        // 1000 ticks later: 1000 · 6554 >> 10 = 6400 (6 400 000 / 1024 = 6400.39 → 6400).
        assert_eq!(INFO.ts_to_ns(2000), 1_000_006_400);
        assert_eq!(INFO.ts_to_ns(1000), 1_000_000_000);
        // 100 ticks earlier: 100 · 6554 = 655 400 >> 10 = 640.
        assert_eq!(INFO.ts_to_ns(900), 999_999_360);
        // The fraction carried: 1 tick with frac 2^10 - 1 rounds up to 7.
        let f = ClockInfo { frac: 1023, ..INFO };
        assert_eq!(f.ts_to_ns(1001), 1_000_000_007);
        assert_eq!(f.ts_to_ns(999), 999_999_995);
    }

    #[test]
    fn the_masked_counter_wraps() {
        // The snapshot just before the 41-bit counter wraps; a timestamp just after it.
        let mask = (1u64 << 41) - 1;
        let at = ClockInfo {
            last_cycles: mask - 9,
            ..INFO
        };
        // 10 ticks on: counter value 0 (wrapped) is 10 ticks after mask - 9.
        assert_eq!(at.ts_to_ns(0), 1_000_000_000 + ((10 * 6554) >> 10));
        // High bits above the mask are ignored, as the device's counter has none.
        assert_eq!(at.ts_to_ns(1 << 41), at.ts_to_ns(0));
        // And a snapshot just after the wrap reads a timestamp from before it as older.
        let after = ClockInfo {
            last_cycles: 5,
            ..INFO
        };
        assert_eq!(
            after.ts_to_ns(mask - 4),
            1_000_000_000 - ((10 * 6554) >> 10)
        );
    }

    #[test]
    fn real_time_timestamps_are_seconds_and_nanoseconds() {
        // (seconds, nanoseconds) as the device writes them, and the nanoseconds they are.
        for (secs, nanos, ns) in [
            (0u64, 0u64, 0u64),
            (0, 999_999_999, 999_999_999),
            (1, 0, 1_000_000_000),
            (1_700_000_000, 123_456_789, 1_700_000_000_123_456_789),
            (0xffff_ffff, 999_999_999, 4_294_967_295_999_999_999),
        ] {
            let ts = secs << 32 | nanos;
            assert_eq!(real_time_to_ns(ts), ns, "{secs} s {nanos} ns");
            assert_eq!(ClockInfo::REAL_TIME.ts_to_ns(ts), ns, "{secs} s {nanos} ns");
        }
        assert!(ClockInfo::REAL_TIME.is_real_time());
        assert!(!INFO.is_real_time());
        assert!(!ClockInfo::default().is_real_time());
    }

    #[test]
    fn tick_rate_from_the_frequency() {
        assert_eq!(TickRate::from_khz(0), None);
        let r = TickRate::from_khz(156_250).unwrap();
        assert_eq!(r.khz(), 156_250);
        assert_eq!(r.ticks_to_ns(5), 32);
        assert_eq!(r.ticks_to_ns(156_250_000), 1_000_000_000);
        let g = TickRate::from_khz(1_000_000).unwrap();
        assert_eq!(g.ticks_to_ns(123_456_789), 123_456_789);
    }

    #[test]
    fn the_page_is_read_between_equal_even_signs() {
        let mut page = ib_uverbs_clock_info {
            sign: 4,
            nsec: 7,
            cycles: 8,
            frac: 9,
            mult: 10,
            shift: 11,
            mask: 12,
            ..Default::default()
        };
        // SAFETY: a local, aligned page.
        let got = unsafe { ClockInfo::read(&page) }.unwrap();
        assert_eq!(
            got,
            ClockInfo {
                nsec: 7,
                last_cycles: 8,
                frac: 9,
                mult: 10,
                shift: 11,
                mask: 12
            }
        );
        page.sign = 5;
        // SAFETY: as above.
        assert_eq!(unsafe { ClockInfo::read(&page) }, Err(ClockInfoError::Busy));
    }
}
