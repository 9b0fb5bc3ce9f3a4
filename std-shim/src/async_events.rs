//! Asynchronous events of a device: what the NIC reports outside any completion.
//!
//! A device tells the control path through its context's async fd (`ibv_get_async_event`)
//! that a port went down or came up, that a QP, SRQ or CQ failed outside a work request, that
//! an SRQ's receives dropped below its armed limit, or that the device itself failed.
//! [`Context::async_events`] gives the reader of those events, [`AsyncEvents`]:
//!
//! - [`AsyncEvents::try_next`] never blocks; [`AsyncEvents::next`] waits up to a timeout;
//! - [`AsFd`]/[`AsRawFd`]: a non-blocking fd that is readable while events are pending, for
//!   epoll, mio or tokio's `AsyncFd`. After each wake-up, read with `try_next` until it
//!   returns `None` (the fd may also wake with nothing to read).
//!
//! Each event is returned as an [`AsyncEvent`] naming what it concerns: a port number, a QP
//! by its number ([`Qp::qpn`](crate::Qp::qpn)), a CQ or SRQ by an id that [`Cq::event_id`]
//! and [`Srq::event_id`] give. On an rdma-core device the library acknowledges each event
//! (`ibv_ack_async_event`) as soon as it has been converted, before `try_next` returns: no
//! event is ever left unacknowledged, so destroying a QP, CQ or SRQ (which waits in
//! libibverbs for the acknowledgement of every event it was reported) never blocks on an
//! event this crate read.
//!
//! On the software device each [`AsyncEvents`] sees every event of the device raised after
//! it was created (the device's [`faults`](zverbs_sim::faults) say what raises each one).
//! On an rdma-core device the context's one async fd is read: take one reader per context,
//! as two would share its events between them.

use std::fmt::Debug;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use crate::cq::Cq;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::provider::AsyncEventSource;
use crate::srq::Srq;
use crate::types::event::{AsyncEvent, CqId, SrqId};

impl AsyncEvent {
    /// Whether the event concerns `qp`.
    pub fn concerns_qp(&self, qp: &crate::qp::Qp) -> bool {
        self.qpn() == Some(qp.qpn())
    }

    /// Whether the event concerns `cq`.
    pub fn concerns_cq(&self, cq: &Cq) -> bool {
        matches!(*self, AsyncEvent::CqError { cq: id } if id == cq.event_id())
    }

    /// Whether the event concerns `srq`.
    pub fn concerns_srq(&self, srq: &Srq) -> bool {
        matches!(*self,
            AsyncEvent::SrqLimitReached { srq: id } | AsyncEvent::SrqError { srq: id }
                if id == srq.event_id())
    }
}

/// The reader of a context's asynchronous events ([`Context::async_events`]).
///
/// ```
/// # #[cfg(feature = "sim")] {
/// use std::time::Duration;
/// use zverbs::{AsyncEvent, ContextOptions};
/// use zverbs::sim::PortState;
///
/// # fn main() -> zverbs::Result<()> {
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default())?;
/// let mut events = ctx.async_events()?;
/// assert_eq!(events.try_next()?, None); // never blocks
/// ctx.sim().expect("the software device").set_port_state(1, PortState::Down)?;
/// let ev = events.next(Duration::from_secs(5))?;
/// assert_eq!(ev, Some(AsyncEvent::PortError { port: 1 }));
/// # ctx.sim().unwrap().set_port_state(1, PortState::Active)?;
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct AsyncEvents {
    // Field order is drop order: the reader goes before its context.
    src: Box<dyn AsyncEventSource>,
    _ctx: Context,
}

impl AsyncEvents {
    /// The next pending event, or `None` at once when there is none.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] when reading the async fd fails for another reason than "nothing
    /// to read".
    pub fn try_next(&mut self) -> Result<Option<AsyncEvent>> {
        self.src.try_next()
    }

    /// The next event, waiting up to `timeout` for one (`poll(2)` on the fd); `None` when
    /// none came in time.
    ///
    /// # Errors
    ///
    /// As [`try_next`](Self::try_next), and [`Error::Verbs`] when `poll` fails.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.src.try_next()? {
                return Ok(Some(ev));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            let mut p = libc::pollfd {
                fd: self.src.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut p, 1, ms) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(Error::Verbs {
                        verb: "poll",
                        source: e,
                    });
                }
            }
        }
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.src.fd()
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.src.fd().as_raw_fd()
    }
}

impl Context {
    /// The reader of this context's asynchronous events (see [`AsyncEvents`]).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] when the async fd cannot be made non-blocking (or, on the software
    /// device, the socket pair that stands for it cannot be created).
    pub fn async_events(&self) -> Result<AsyncEvents> {
        Ok(AsyncEvents {
            src: self.inner.provider.async_events()?,
            _ctx: self.clone(),
        })
    }
}

impl Cq {
    /// What identifies this CQ in an [`AsyncEvent::CqError`].
    pub fn event_id(&self) -> CqId {
        CqId(self.inner.provider.event_id())
    }
}

impl Srq {
    /// What identifies this SRQ in [`AsyncEvent::SrqLimitReached`] and
    /// [`AsyncEvent::SrqError`].
    pub fn event_id(&self) -> SrqId {
        SrqId(self.inner.provider.event_id())
    }
}
