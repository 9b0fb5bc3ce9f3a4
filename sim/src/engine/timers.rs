//! The requester's timers, with the values the InfiniBand specification gives them: the
//! transport (local ACK) timer and the RNR NAK timer.
//!
//! Contract: a request in flight to another process that no answer reaches is sent again when
//! its transport timer runs out, `4.096 µs × 2^timeout` after it was sent (the QP's `timeout`
//! of `ibv_modify_qp` at RTS; 0 disables the timer, as the specification says), and fails
//! with "transport retry exceeded" when its `retry_cnt` retries have run out too: within
//! `4.096 µs × 2^timeout × (retry_cnt + 1)` of its first sending. After an RNR NAK it is sent
//! again once the RNR timer the responder's NAK carries has run (its `min_rnr_timer`, a code
//! of the specification's table), up to `rnr_retry` times. [`Engine::set_timer_scale`] divides
//! both by a factor (tests make a dead peer's requests fail in milliseconds): a divisor, so
//! a timer is never made longer, and never infinite.
//!
//! A peer in the same device answers every request at once (or NAKs it), so its requests
//! never wait for a timer: their retries follow one device step apart.

use std::time::{Duration, Instant};

use super::Engine;

/// The transport timer code a QP starts with (`timeout` of `ibv_modify_qp` at RTS): 14,
/// 4.096 µs × 2^14 ≈ 67 ms, what `ibv_rc_pingpong` and perftest ask for.
pub(crate) const TIMEOUT_DEFAULT: u8 = 14;
/// The RNR timer code a QP starts with (`min_rnr_timer` at RTR): 12, 0.64 ms.
pub(crate) const MIN_RNR_TIMER_DEFAULT: u8 = 12;
/// The largest timer scale: a million times faster than the specification's values.
pub(crate) const MAX_TIMER_SCALE: u32 = 1_000_000;

/// The RNR NAK timer values of the specification's table (IBA table 45), in microseconds,
/// by their 5-bit code: 0 is the longest, 655.36 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The transport timer of `timeout` (5 bits): `4.096 µs × 2^timeout`, or `None` for 0
/// (the timer disabled).
pub(crate) fn transport_timer(timeout: u8) -> Option<Duration> {
    match timeout & 0x1f {
        0 => None,
        t => Some(Duration::from_nanos(4096 << t)),
    }
}

/// The RNR NAK timer of `code` (5 bits).
pub(crate) fn rnr_timer(code: u8) -> Duration {
    Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(code & 0x1f)]))
}

impl Engine {
    /// Makes the transport and RNR timers `scale` times shorter (1: the specification's
    /// values).
    pub(crate) fn set_timer_scale(&mut self, scale: u32) -> Result<(), crate::SimError> {
        if scale == 0 || scale > MAX_TIMER_SCALE {
            return Err(crate::SimError::InvalidConfig(
                "timer scale must be in 1..=1000000",
            ));
        }
        self.timer_scale = scale;
        Ok(())
    }

    /// `d`, scaled.
    fn scaled(&self, d: Duration) -> Duration {
        d / self.timer_scale
    }

    /// When QP `q`'s request sent at `sent` has waited its transport timer out (`None`: the
    /// timer is disabled, the request waits for its answer).
    pub(super) fn transport_deadline(&self, q: usize, sent: Instant) -> Option<Instant> {
        transport_timer(self.qps[q].timeout).map(|t| sent + self.scaled(t))
    }

    /// When a request NAKed with the RNR timer `code` may be sent again.
    pub(super) fn rnr_deadline(&self, code: u8) -> Instant {
        Instant::now() + self.scaled(rnr_timer(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of the specification: the transport timer doubles per code from 8.192 µs
    /// and is disabled at 0; the RNR table's ends and the default codes.
    #[test]
    fn timer_values_are_the_specifications() {
        assert_eq!(transport_timer(0), None);
        assert_eq!(transport_timer(1), Some(Duration::from_nanos(8192)));
        assert_eq!(transport_timer(14), Some(Duration::from_nanos(67_108_864)));
        assert_eq!(transport_timer(31), Some(Duration::from_nanos(4096 << 31)));
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        assert_eq!(rnr_timer(12), Duration::from_micros(640));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
        // Only the low five bits are a code.
        assert_eq!(rnr_timer(32 + 12), rnr_timer(12));
        for w in RNR_TIMER_US[1..].windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
    }
}
