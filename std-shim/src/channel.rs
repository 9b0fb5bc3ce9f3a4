//! Completion channels: sleeping until a CQ has completions instead of spinning on it.
//!
//! A [`CompChannel`] is a descriptor that becomes readable when one of its CQs raises a
//! completion event; one channel may serve several CQs, as in verbs. A CQ gets one with
//! [`CqBuilder::channel`](crate::CqBuilder::channel). Its poller then:
//!
//! - [`arm`](crate::Poller::arm)s it: one event for the next completion (or, `solicited_only`,
//!   the next solicited or error completion). On the direct backend this is the mlx5 arm
//!   sequence itself ([`zverbs_mlx5dv::CqArm`]: no syscall, no libmlx5); on the fallback,
//!   `ibv_req_notify_cq` through the provider's ops;
//! - [`wait`](crate::Poller::wait_blocking)s: polls, arms, polls again, and only sleeps on the channel when
//!   that second poll is empty (the protocol of [`zverbs_core::event`], so no wake-up is
//!   lost), then returns the completions, or [`EventError::Timeout`] at the deadline;
// (Linked only where the feature, and so the items, exist.)
#![cfg_attr(
    feature = "tokio",
    doc = " - with the `tokio` feature, [`wait_async`](crate::Poller::wait_async) does the same \
           on an [`AsyncChannel`](crate::AsyncChannel)."
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = " - with the `tokio` feature, `Poller::wait_async` does the same on an \
           `AsyncChannel`."
)]
//!
//! The channel is [`AsFd`]/[`AsRawFd`] (non-blocking), so an event loop (epoll, mio, tokio)
//! can wait on it; after a wake-up, [`take_events`](crate::Poller::take_events) takes the CQ's
//! events, then poll, and arm again. Events are acknowledged (`ibv_ack_cq_events`) in
//! batches, and every one before the CQ is destroyed.
//!
//! The polling itself does not change: an armed CQ is polled exactly as any other.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use zverbs_mlx5dv::CqArm;

use crate::device::Context;
pub use crate::error::EventError;
use crate::error::Result;
use crate::provider::{ChannelProvider, CqEngine, CqProvider};

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
    pub(crate) fn take_for(&self, token: usize) -> Result<u32> {
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
    pub(crate) fn sleep(&self, deadline: Option<Instant>) -> Result<bool> {
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
    pub(crate) arm: Mutex<Option<CqArm>>,
}

impl CqEvents {
    /// The events of a CQ created on `channel`.
    pub(crate) fn new(channel: CompChannel, provider: &dyn CqProvider) -> Result<Self> {
        let arm = match provider.engine() {
            CqEngine::Direct(layout) => {
                let uar = provider
                    .cq_uar()
                    .ok_or_else(|| crate::error::Error::Backend {
                        requested: crate::types::backend::BackendKind::Direct,
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
