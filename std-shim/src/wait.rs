//! Waiting for completions on a CQ's channel: a poller arms its CQ, polls, and sleeps on the
//! channel (`channel.rs`) only when nothing is there; with the `tokio` feature it awaits the
//! channel through tokio's reactor.

use std::time::Instant;

use zverbs_core::{Completion, PollCqTimed, TimedCompletion};

use crate::channel::{CompChannel, CqEvents};
use crate::error::{EventError, Result, WaitError};
use crate::poller::Poller;

impl Poller {
    fn events(&self) -> Result<&CqEvents> {
        self.cq()
            .inner
            .events
            .as_ref()
            .ok_or_else(|| EventError::NoChannel.into())
    }

    /// The completion channel of the CQ, if it has one.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.cq().inner.events.as_ref().map(|e| &e.channel)
    }

    /// Arms the CQ: its channel gets one event for the next completion (with
    /// `solicited_only`: the next solicited or error completion). Poll once more after
    /// arming before sleeping ([`Poller::wait_blocking`] does all of it).
    ///
    /// # Errors
    ///
    /// [`EventError::NoChannel`] for a CQ created without a channel;
    /// [`Error::Verbs`](crate::Error::Verbs) from `ibv_req_notify_cq`.
    pub fn arm(&mut self, solicited_only: bool) -> Result<()> {
        let consumer = self.direct_consumer();
        let events = self.events()?;
        let mut arm = events.arm.lock().unwrap_or_else(|p| p.into_inner());
        match (arm.as_mut(), consumer) {
            (Some(arm), Some(ci)) => {
                arm.arm(ci, solicited_only);
                Ok(())
            }
            _ => self.cq().inner.provider.req_notify(solicited_only),
        }
    }

    /// Takes this CQ's events from its channel without blocking; returns how many there were
    /// (each one disarmed the CQ: arm again before sleeping).
    ///
    /// # Errors
    ///
    /// [`EventError::NoChannel`]; [`Error::Verbs`](crate::Error::Verbs) from
    /// `ibv_get_cq_event`.
    pub fn take_events(&mut self) -> Result<u32> {
        let events = self.events()?;
        let n = events
            .channel
            .take_for(self.cq().inner.provider.event_token())?;
        self.taken(n)?;
        Ok(n)
    }

    /// The events kept for this CQ by another CQ's waiter on the same channel, taken (no
    /// system call).
    fn take_kept(&mut self) -> Result<u32> {
        let events = self.events()?;
        let provider = &self.cq().inner.provider;
        let n = events.channel.forget(provider.event_token());
        self.taken(n)?;
        Ok(n)
    }

    /// Accounts for `n` events of this CQ taken from its channel.
    fn taken(&mut self, n: u32) -> Result<()> {
        if n > 0 {
            let events = self.events()?;
            let provider = &self.cq().inner.provider;
            let mut arm = events.arm.lock().unwrap_or_else(|p| p.into_inner());
            for _ in 0..n {
                provider.event_taken();
                if let Some(a) = arm.as_mut() {
                    a.event();
                }
            }
        }
        Ok(())
    }

    /// The CQ this poller polls.
    fn cq(&self) -> &crate::cq::Cq {
        self.p.cq()
    }

    /// The direct poller's consumer counter (`None` on the fallback).
    fn direct_consumer(&self) -> Option<u32> {
        self.p.direct_consumer()
    }

    /// One round of a sleeping wait: completions into `out`, sleeping on the channel while
    /// there are none, until `deadline`.
    pub(crate) fn sleep_round(
        &mut self,
        out: &mut [Completion],
        deadline: Option<Instant>,
        solicited_only: bool,
    ) -> Result<usize> {
        self.wait_with(out, deadline, |p: &mut Self, out: &mut [Completion]| {
            zverbs_core::event::poll_arm_poll(p, out, |p: &mut Self| p.arm(solicited_only))
        })
    }

    /// [`Poller::wait_blocking`] returning each completion with its timestamp, as
    /// [`PollCqTimed::poll_timed`] does, into `out` (at least one, at most `out.len()`): for a
    /// CQ built with both a channel and [`timestamps`](crate::CqBuilder::timestamps).
    ///
    /// # Errors
    ///
    /// As [`Poller::wait_blocking`].
    pub fn wait_timed(
        &mut self,
        out: &mut [TimedCompletion],
        deadline: Instant,
    ) -> std::result::Result<usize, WaitError> {
        self.wait_with(
            out,
            Some(deadline),
            |p: &mut Self, out: &mut [TimedCompletion]| {
                let n = p.poll_timed(out);
                if n > 0 {
                    return Ok(n);
                }
                p.arm(false)?;
                Ok(p.poll_timed(out))
            },
        )
        .map_err(|e| match e {
            crate::Error::Event(EventError::Timeout(_)) => WaitError::Timeout { wanted: 1, got: 0 },
            e => WaitError::of(e),
        })
    }

    /// Polls, arms and polls again with `poll_arm_poll` until it returns completions,
    /// sleeping on the channel between rounds.
    fn wait_with<T>(
        &mut self,
        out: &mut [T],
        deadline: Option<Instant>,
        mut poll_arm_poll: impl FnMut(&mut Self, &mut [T]) -> Result<usize>,
    ) -> Result<usize> {
        let channel = self.events()?.channel.clone();
        loop {
            let n = poll_arm_poll(self, out)?;
            if n > 0 {
                return Ok(n);
            }
            // Armed and empty: sleep until this CQ's event (an event kept for it by another
            // CQ's waiter first; a queued one makes the descriptor readable at once).
            if self.take_kept()? == 0 {
                loop {
                    if !channel.sleep(deadline)? {
                        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                        return Err(EventError::Timeout(left.unwrap_or_default()).into());
                    }
                    if self.take_events()? > 0 {
                        break;
                    }
                }
            }
        }
    }
}

/// A completion channel registered with tokio's reactor (feature `tokio`), for
/// [`Poller::wait_async`].
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct AsyncChannel {
    fd: tokio::io::unix::AsyncFd<CompChannel>,
}

#[cfg(feature = "tokio")]
impl AsyncChannel {
    /// Registers `channel` with the current tokio runtime's I/O driver.
    ///
    /// # Errors
    ///
    /// [`EventError::Io`] when the driver refuses the descriptor.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with its I/O driver enabled (as tokio's `AsyncFd` does).
    pub fn new(channel: CompChannel) -> Result<Self> {
        // SAFETY: the descriptor is the channel's, open as long as the channel lives, which
        // the `AsyncFd` owns (a clone) until it is dropped; `as_raw_fd` always returns it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(channel, tokio::io::Interest::READABLE)
        }
        .map_err(|e| EventError::Io(e.into()))?;
        Ok(Self { fd })
    }

    /// The channel.
    pub fn channel(&self) -> &CompChannel {
        self.fd.get_ref()
    }
}

#[cfg(feature = "tokio")]
impl Poller {
    /// [`Poller::wait_blocking`] without blocking the thread: awaits the channel's descriptor
    /// (which must be this CQ's channel). No deadline of its own: wrap it in
    /// `tokio::time::timeout`.
    ///
    /// # Errors
    ///
    /// [`EventError::NoChannel`]; [`EventError::Io`]; the errors of [`Poller::arm`] and
    /// [`Poller::take_events`].
    pub async fn wait_async(
        &mut self,
        out: &mut [Completion],
        channel: &AsyncChannel,
    ) -> Result<usize> {
        if !self.events()?.channel.is(channel.channel()) {
            return Err(crate::error::Error::InvalidArgument(
                "wait_async needs the CQ's own completion channel".into(),
            ));
        }
        loop {
            let n = zverbs_core::event::poll_arm_poll(self, out, |p: &mut Self| p.arm(false))?;
            if n > 0 {
                return Ok(n);
            }
            while self.take_events()? == 0 {
                let mut guard = channel.fd.readable().await.map_err(EventError::Io)?;
                if self.take_events()? > 0 {
                    break;
                }
                guard.clear_ready();
            }
        }
    }
}
