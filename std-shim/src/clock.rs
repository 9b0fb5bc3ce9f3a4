//! The device clock: what completion timestamps count, and their conversion to nanoseconds
//! and to wall-clock time.
//!
//! A CQ created with [`CqBuilder::timestamps`](crate::CqBuilder::timestamps) reports, through
//! [`PollCqTimed::poll_timed`](zverbs_core::PollCqTimed::poll_timed), the device clock when
//! each completion was written: ticks of a free-running counter of `hca_core_clock` kHz,
//! masked to `completion_timestamp_mask`. [`Context::clock`](crate::Context::clock) gives the
//! [`DeviceClock`] that converts them:
//!
//! - [`DeviceClock::elapsed_ns`]: the nanoseconds between two timestamps (the counter's wrap
//!   included), from the frequency alone;
//! - [`DeviceClock::to_wall_ns`] / [`DeviceClock::to_system_time`]: a timestamp as wall-clock
//!   time (`CLOCK_REALTIME`), from a snapshot of the kernel's timecounter over the device
//!   clock (`mlx5dv_get_clock_info`, `mlx5dv_ts_to_ns`; the software device's own page; on
//!   the fallback, `ibv_query_rt_values_ex` read beside `clock_gettime`). The snapshot is
//!   good for [`DeviceClock::max_age_ns`]; [`DeviceClock::refresh`] takes a new one.
//!
//! Converting is arithmetic on the snapshot: no system call, no lock, no allocation, so it
//! can run on the hot path. Refreshing is a read of the clock-info page on the direct backend
//! (and of `CLOCK_REALTIME`, a vDSO call, on the software device); the fallback's refresh goes
//! through libibverbs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zverbs_mlx5dv::clock::{ClockInfo, TickRate};

use crate::device::Context;
use crate::error::Result;
use crate::types::clock::ClockSnapshot;

/// The clock of a device whose CQs can report completion timestamps, and the conversions of
/// those timestamps.
///
/// A CQ created with [`CqBuilder::timestamps`](crate::CqBuilder::timestamps) reports, through
/// [`PollCqTimed::poll_timed`](zverbs_core::PollCqTimed::poll_timed), the device clock when
/// each completion was written: ticks of a free-running counter of `hca_core_clock` kHz,
/// masked to `completion_timestamp_mask`. [`DeviceClock::elapsed_ns`] is the time between two
/// timestamps (across the counter's wrap), from the frequency alone;
/// [`DeviceClock::to_wall_ns`] and [`DeviceClock::to_system_time`] turn a timestamp into
/// wall-clock time (`CLOCK_REALTIME`) as `mlx5dv_ts_to_ns` does, from a snapshot of the
/// kernel's timecounter over the device clock (`mlx5dv_get_clock_info` on mlx5, the software
/// device's own page, `ibv_query_rt_values_ex` read beside `clock_gettime` elsewhere). The
/// snapshot is good for [`DeviceClock::max_age_ns`]; [`DeviceClock::refresh`] takes a new
/// one.
///
/// Converting is arithmetic on the snapshot: no system call, no lock, no allocation, so it
/// can run on the hot path. Refreshing reads the clock-info page on the direct backend; the
/// fallback's goes through libibverbs.
///
/// # Example
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// let clock = ctx.clock()?;
/// assert_eq!(clock.khz(), 156_250); // the software device's 156.25 MHz
/// assert_eq!(clock.elapsed_ns(0, 156_250), 1_000_000); // 156 250 ticks: 1 ms
/// // The counter wrapped between the two: still 5 ticks, 32 ns.
/// assert_eq!(clock.elapsed_ns(clock.mask() - 2, 2), 32);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug, Clone)]
pub struct DeviceClock {
    ctx: Context,
    rate: TickRate,
    snap: ClockSnapshot,
}

impl DeviceClock {
    pub(crate) fn new(ctx: &Context, snap: ClockSnapshot) -> Option<Self> {
        Some(Self {
            ctx: ctx.clone(),
            rate: TickRate::from_khz(snap.khz)?,
            snap,
        })
    }

    /// The clock's frequency in kHz (`hca_core_clock`).
    #[inline]
    pub fn khz(&self) -> u64 {
        self.rate.khz()
    }

    /// The mask of a timestamp's valid bits (`completion_timestamp_mask`): the counter wraps
    /// to 0 after it.
    #[inline]
    pub fn mask(&self) -> u64 {
        self.snap.mask
    }

    /// `ticks` of the device clock in nanoseconds.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        self.rate.ticks_to_ns(ticks)
    }

    /// The nanoseconds from timestamp `earlier` to timestamp `later`, across one wrap of the
    /// counter.
    #[inline]
    pub fn elapsed_ns(&self, earlier: u64, later: u64) -> u64 {
        self.rate
            .ticks_to_ns(later.wrapping_sub(earlier) & self.snap.mask)
    }

    /// A timestamp in wall-clock nanoseconds since the Unix epoch (`CLOCK_REALTIME`), from
    /// the clock's snapshot (`mlx5dv_ts_to_ns`).
    #[inline]
    pub fn to_wall_ns(&self, timestamp: u64) -> u64 {
        self.snap.info.ts_to_ns(timestamp)
    }

    /// A timestamp as a [`SystemTime`].
    #[inline]
    pub fn to_system_time(&self, timestamp: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.to_wall_ns(timestamp))
    }

    /// The snapshot of the kernel's timecounter the conversions to wall-clock time use.
    pub fn info(&self) -> ClockInfo {
        self.snap.info
    }

    /// How long after the snapshot wall-clock conversions stay right, in ns (the clock-info
    /// page's `overflow_period`): refresh at least this often.
    pub fn max_age_ns(&self) -> u64 {
        self.snap.max_age_ns
    }

    /// Takes a new snapshot of the timecounter.
    ///
    /// # Errors
    ///
    /// As [`Context::clock`].
    pub fn refresh(&mut self) -> Result<()> {
        self.snap = self.ctx.inner.provider.clock()?;
        Ok(())
    }
}

impl Context {
    /// The device's clock, which converts completion timestamps
    /// ([`CqBuilder::timestamps`](crate::CqBuilder::timestamps)) to nanoseconds and to
    /// wall-clock time.
    ///
    /// # Errors
    ///
    /// [`Error::NoTimestamps`](crate::Error::NoTimestamps) when the device does not timestamp
    /// completions (rxe, for one); [`Error::Verbs`](crate::Error::Verbs) when a query fails.
    pub fn clock(&self) -> Result<DeviceClock> {
        let snap = self.inner.provider.clock()?;
        DeviceClock::new(self, snap).ok_or_else(|| crate::error::Error::NoTimestamps {
            device: self.inner.provider.name().to_string(),
            reason: "the device reports no clock frequency (hca_core_clock 0)".into(),
        })
    }
}
