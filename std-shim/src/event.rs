//! Completion channels: sleeping until a CQ has completions instead of spinning on it.
//!
//! A [`CompChannel`] is a descriptor that becomes readable when one of its CQs raises a
//! completion event; one channel may serve several CQs, as in verbs. A CQ gets one with
//! [`CqBuilder::channel`](crate::CqBuilder::channel). Its poller then:
//!
//! - [`arm`](AnyPoller::arm)s it: one event for the next completion (or, `solicited_only`,
//!   the next solicited or error completion). On the direct backend this is the mlx5 arm
//!   sequence itself ([`zverbs_mlx5dv::CqArm`]: no syscall, no libmlx5); on the fallback,
//!   `ibv_req_notify_cq` through the provider's ops;
//! - [`wait`](AnyPoller::wait)s: polls, arms, polls again, and only sleeps on the channel when
//!   that second poll is empty (the protocol of [`zverbs_core::event`], so no wake-up is
//!   lost), then returns the completions, or [`EventError::Timeout`] at the deadline;
// (Linked only where the feature, and so the items, exist.)
#![cfg_attr(
    feature = "tokio",
    doc = " - with the `tokio` feature, [`wait_async`](AnyPoller::wait_async) does the same \
           on an [`AsyncChannel`]."
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = " - with the `tokio` feature, `AnyPoller::wait_async` does the same on an \
           `AsyncChannel`."
)]
//!
//! The channel is [`AsFd`]/[`AsRawFd`] (non-blocking), so an event loop (epoll, mio, tokio)
//! can wait on it; after a wake-up, [`take_events`](AnyPoller::take_events) takes the CQ's
//! events, then poll, and arm again. Events are acknowledged (`ibv_ack_cq_events`) in
//! batches, and every one before the CQ is destroyed.
//!
//! The polling itself does not change: an armed CQ is polled exactly as any other.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zverbs_core::{Completion, PollCqTimed, TimedCompletion};
use zverbs_mlx5dv::CqArm;

use crate::device::Context;
use crate::error::Result;
use crate::provider::{ChannelProvider, CqEngine, CqProvider};
use crate::queues::AnyPoller;

/// What can go wrong arming a CQ or waiting for its event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The CQ was created without a completion channel: it raises no events.
    #[error("the CQ has no completion channel (create it with CqBuilder::channel)")]
    NoChannel,
    /// The deadline passed before a completion arrived.
    #[error("no completion within {0:?}")]
    Timeout(Duration),
    /// The device cannot make completion channels.
    #[error("the device {0} has no completion channels")]
    Unsupported(String),
    /// Waiting on the channel's descriptor failed.
    #[error("waiting on the completion channel failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A completion channel. Cloning is cheap; the channel is destroyed when the last clone and
/// every CQ using it are gone.
///
/// Wait on one channel from one thread at a time: a waiter takes every event the channel
/// holds and keeps those of other CQs for their pollers, but a thread already asleep on the
/// descriptor is not woken for them.
#[derive(Clone, Debug)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

#[derive(Debug)]
pub(crate) struct ChannelInner {
    // Field order is drop order: the channel before its context.
    pub(crate) provider: Box<dyn ChannelProvider>,
    _ctx: Context,
    /// Events taken from the channel for CQs whose waiter did not take them, by token.
    pending: Mutex<HashMap<usize, u32>>,
}

impl Context {
    /// A completion channel for CQs of this context (`ibv_create_comp_channel`).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`](crate::Error::Verbs) from `ibv_create_comp_channel`;
    /// [`EventError::Unsupported`].
    pub fn comp_channel(&self) -> Result<CompChannel> {
        let provider = self.inner.provider.create_comp_channel()?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                provider,
                _ctx: self.clone(),
                pending: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl CompChannel {
    /// Whether `self` and `other` are the same channel.
    pub fn is(&self, other: &CompChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Takes the events ready on the channel (without blocking) and returns those of the CQ
    /// named `token`, keeping the others' for their pollers.
    fn take_for(&self, token: usize) -> Result<u32> {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|p| p.into_inner());
        let mut mine = pending.remove(&token).unwrap_or(0);
        while let Some(t) = self.inner.provider.take_event()? {
            if t == token {
                mine += 1;
            } else {
                *pending.entry(t).or_insert(0) += 1;
            }
        }
        Ok(mine)
    }

    /// The events kept for the CQ named `token`, removed (it is being destroyed).
    pub(crate) fn forget(&self, token: usize) -> u32 {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.remove(&token).unwrap_or(0)
    }

    /// Sleeps until the descriptor is readable or `deadline` passes; `false` at the deadline.
    fn sleep(&self, deadline: Option<Instant>) -> Result<bool> {
        loop {
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    // Rounded up, so a sleep never ends before the deadline.
                    i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
                }
            };
            let mut pfd = libc::pollfd {
                fd: self.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r > 0 {
                return Ok(true);
            }
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(EventError::Io(e).into());
                }
            }
        }
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.provider.fd()
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor stays open as long as the channel, which `self` borrows.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

/// A CQ's events: its channel, and on the direct backend its arm.
#[derive(Debug)]
pub(crate) struct CqEvents {
    pub(crate) channel: CompChannel,
    /// The mlx5 arm of a direct CQ (`None`: armed through the provider).
    arm: Mutex<Option<CqArm>>,
}

impl CqEvents {
    /// The events of a CQ created on `channel`.
    pub(crate) fn new(channel: CompChannel, provider: &dyn CqProvider) -> Result<Self> {
        let arm = match provider.engine() {
            CqEngine::Direct(layout) => {
                let uar = provider.cq_uar().ok_or_else(|| crate::Error::Backend {
                    requested: crate::BackendKind::Direct,
                    reason: "the provider reported no CQ UAR to arm the CQ through".into(),
                })?;
                // SAFETY: the layout and UAR are the provider's for this live CQ, which the
                // `CqInner` holding these events keeps alive; only this arm writes the arm
                // word (the CQ is never armed through `ibv_req_notify_cq`).
                Some(unsafe { CqArm::new(&layout, uar) })
            }
            CqEngine::Verbs(_) => None,
        };
        Ok(Self {
            channel,
            arm: Mutex::new(arm),
        })
    }

    /// Before the CQ is destroyed: acknowledges the events kept for it.
    pub(crate) fn release(&self, provider: &dyn CqProvider) {
        for _ in 0..self.channel.forget(provider.event_token()) {
            provider.event_taken();
        }
    }
}

impl AnyPoller {
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
    /// arming before sleeping ([`AnyPoller::wait`] does all of it).
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

    /// Returns completions, sleeping on the CQ's channel while there are none, for at most
    /// `timeout` (`None`: no limit). Polls, arms, polls again, and sleeps only when that
    /// second poll is empty, so a completion that arrives meanwhile is never missed.
    ///
    /// # Errors
    ///
    /// [`EventError::Timeout`]; [`EventError::NoChannel`]; the errors of [`AnyPoller::arm`]
    /// and [`AnyPoller::take_events`].
    pub fn wait(&mut self, out: &mut [Completion], timeout: Option<Duration>) -> Result<usize> {
        self.wait_untimed(out, timeout, false)
    }

    /// [`AnyPoller::wait`], woken only by solicited (or error) completions: the others are
    /// returned with the next one that wakes it, or by a poll.
    ///
    /// # Errors
    ///
    /// As [`AnyPoller::wait`].
    pub fn wait_solicited(
        &mut self,
        out: &mut [Completion],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_untimed(out, timeout, true)
    }

    /// [`AnyPoller::wait`], returning each completion with its timestamp, as
    /// [`PollCqTimed::poll_timed`] does: for a CQ built
    /// with both a channel and [`timestamps`](crate::CqBuilder::timestamps).
    ///
    /// # Errors
    ///
    /// As [`AnyPoller::wait`].
    pub fn wait_timed(
        &mut self,
        out: &mut [TimedCompletion],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_with(out, timeout, |p: &mut Self, out: &mut [TimedCompletion]| {
            let n = p.poll_timed(out);
            if n > 0 {
                return Ok(n);
            }
            p.arm(false)?;
            Ok(p.poll_timed(out))
        })
    }

    fn wait_untimed(
        &mut self,
        out: &mut [Completion],
        timeout: Option<Duration>,
        solicited_only: bool,
    ) -> Result<usize> {
        self.wait_with(out, timeout, |p: &mut Self, out: &mut [Completion]| {
            zverbs_core::event::poll_arm_poll(p, out, |p: &mut Self| p.arm(solicited_only))
        })
    }

    /// Polls, arms and polls again with `poll_arm_poll` until it returns completions,
    /// sleeping on the channel between rounds.
    fn wait_with<T>(
        &mut self,
        out: &mut [T],
        timeout: Option<Duration>,
        mut poll_arm_poll: impl FnMut(&mut Self, &mut [T]) -> Result<usize>,
    ) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
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
                        return Err(EventError::Timeout(timeout.unwrap_or_default()).into());
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
/// [`AnyPoller::wait_async`].
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
impl AnyPoller {
    /// [`AnyPoller::wait`] without blocking the thread: awaits the channel's descriptor
    /// (which must be this CQ's channel). No deadline of its own: wrap it in
    /// `tokio::time::timeout`.
    ///
    /// # Errors
    ///
    /// [`EventError::NoChannel`]; [`EventError::Io`]; the errors of [`AnyPoller::arm`] and
    /// [`AnyPoller::take_events`].
    pub async fn wait_async(
        &mut self,
        out: &mut [Completion],
        channel: &AsyncChannel,
    ) -> Result<usize> {
        if !self.events()?.channel.is(channel.channel()) {
            return Err(crate::Error::InvalidArgument(
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
