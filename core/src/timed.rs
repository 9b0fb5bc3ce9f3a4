//! Completions with the device's timestamp, polled through their own entry.
//!
//! [`PollCq::poll`](crate::PollCq::poll) writes [`Completion`]s and nothing else, whatever
//! the CQ: a CQ without timestamps costs not one instruction more for their existence. A CQ
//! created with completion timestamps is polled through [`PollCqTimed::poll_timed`] into
//! [`TimedCompletion`]s, which carry the timestamp the device wrote into the entry (in ticks
//! of the device clock: convert them with the context's clock).

use core::ops::{Deref, DerefMut};

use crate::Completion;

/// A completion and the device clock when the device wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedCompletion {
    /// The completion, as [`PollCq::poll`](crate::PollCq::poll) reports it.
    pub wc: Completion,
    /// The device clock when the completion was written (ticks of `hca_core_clock`, or
    /// nanoseconds on a device in real-time mode); `None` for a CQ created without
    /// timestamps, and for a failed completion (an mlx5 error CQE carries its syndromes where
    /// the timestamp would be).
    pub timestamp: Option<u64>,
}

impl TimedCompletion {
    /// An empty entry, for initialising the caller's poll buffer.
    pub const EMPTY: Self = Self {
        wc: Completion::EMPTY,
        timestamp: None,
    };

    /// The device clock when the completion was written, in device ticks; `None` when the CQ
    /// was created without timestamps or the completion failed.
    #[inline]
    pub const fn hw_timestamp(&self) -> Option<u64> {
        self.timestamp
    }
}

impl Deref for TimedCompletion {
    type Target = Completion;

    #[inline]
    fn deref(&self) -> &Completion {
        &self.wc
    }
}

impl DerefMut for TimedCompletion {
    #[inline]
    fn deref_mut(&mut self) -> &mut Completion {
        &mut self.wc
    }
}

/// A CQ that reports completions with their timestamps.
pub trait PollCqTimed {
    /// As [`PollCq::poll`](crate::PollCq::poll), with each completion's timestamp (`None`
    /// for every completion of a CQ created without timestamps).
    fn poll_timed(&mut self, out: &mut [TimedCompletion]) -> usize;
}
