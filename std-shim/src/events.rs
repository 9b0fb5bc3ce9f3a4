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

use crate::error::{Error, Result};
use crate::ffi::types::ibv_event_type as ty;
use crate::{Context, Cq, Srq};

/// Identifies a CQ in an [`AsyncEvent`]: compare with [`Cq::event_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId(pub(crate) u64);

/// Identifies an SRQ in an [`AsyncEvent`]: compare with [`Srq::event_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqId(pub(crate) u64);

/// An asynchronous event (`enum ibv_event_type`) with the object it concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up.
    PortActive {
        /// The port.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down (its link is lost).
    PortError {
        /// The port.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`, `IBV_EVENT_PKEY_CHANGE`, `IBV_EVENT_SM_CHANGE`,
    /// `IBV_EVENT_CLIENT_REREGISTER`, `IBV_EVENT_GID_CHANGE`: something of the port changed.
    PortChange {
        /// The port.
        port: u8,
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP entered the error state outside a completion error.
    QpFatal {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: an invalid request reached the QP as a responder; it is in
    /// the error state.
    QpRequestError {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: a request violated the QP's access rights as a responder;
    /// it is in the error state.
    QpAccessError {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on a shared receive queue entered the error
    /// state; none of the SRQ's receives will complete on it any more.
    QpLastWqeReached {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_COMM_EST`, `IBV_EVENT_SQ_DRAINED`, `IBV_EVENT_PATH_MIG`,
    /// `IBV_EVENT_PATH_MIG_ERR`: other events of a QP.
    QpOther {
        /// The QP's number.
        qpn: u32,
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: the CQ overran (a completion found it full) and is in error.
    CqError {
        /// The CQ.
        cq: CqId,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than [`Srq::arm`]'s limit are posted;
    /// the limit is disarmed (arm it again to hear of it again).
    SrqLimitReached {
        /// The SRQ.
        srq: SrqId,
    },
    /// `IBV_EVENT_SRQ_ERR`: the SRQ entered the error state.
    SrqError {
        /// The SRQ.
        srq: SrqId,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed; the context must be closed.
    DeviceFatal,
    /// An event this crate does not know (`IBV_EVENT_WQ_FATAL`, later ones).
    Other {
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
}

impl AsyncEvent {
    /// The QP number, for an event of a QP.
    pub fn qpn(&self) -> Option<u32> {
        match *self {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpRequestError { qpn }
            | AsyncEvent::QpAccessError { qpn }
            | AsyncEvent::QpLastWqeReached { qpn }
            | AsyncEvent::QpOther { qpn, .. } => Some(qpn),
            _ => None,
        }
    }

    /// The port, for an event of a port.
    pub fn port(&self) -> Option<u8> {
        match *self {
            AsyncEvent::PortActive { port }
            | AsyncEvent::PortError { port }
            | AsyncEvent::PortChange { port, .. } => Some(port),
            _ => None,
        }
    }

    /// Whether the event concerns `qp`.
    pub fn concerns_qp(&self, qp: &crate::Qp) -> bool {
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

    /// The event of `event_type` about the object `element` names (a QP number, a CQ or SRQ
    /// id, a port number, by the type).
    pub(crate) fn from_raw(event_type: u32, element: u64) -> Self {
        let qpn = element as u32;
        let port = element as u8;
        match event_type {
            ty::IBV_EVENT_CQ_ERR => AsyncEvent::CqError { cq: CqId(element) },
            ty::IBV_EVENT_QP_FATAL => AsyncEvent::QpFatal { qpn },
            ty::IBV_EVENT_QP_REQ_ERR => AsyncEvent::QpRequestError { qpn },
            ty::IBV_EVENT_QP_ACCESS_ERR => AsyncEvent::QpAccessError { qpn },
            ty::IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEvent::QpLastWqeReached { qpn },
            ty::IBV_EVENT_COMM_EST
            | ty::IBV_EVENT_SQ_DRAINED
            | ty::IBV_EVENT_PATH_MIG
            | ty::IBV_EVENT_PATH_MIG_ERR => AsyncEvent::QpOther { qpn, event_type },
            ty::IBV_EVENT_DEVICE_FATAL => AsyncEvent::DeviceFatal,
            ty::IBV_EVENT_PORT_ACTIVE => AsyncEvent::PortActive { port },
            ty::IBV_EVENT_PORT_ERR => AsyncEvent::PortError { port },
            ty::IBV_EVENT_LID_CHANGE
            | ty::IBV_EVENT_PKEY_CHANGE
            | ty::IBV_EVENT_SM_CHANGE
            | ty::IBV_EVENT_CLIENT_REREGISTER
            | ty::IBV_EVENT_GID_CHANGE => AsyncEvent::PortChange { port, event_type },
            ty::IBV_EVENT_SRQ_ERR => AsyncEvent::SrqError {
                srq: SrqId(element),
            },
            ty::IBV_EVENT_SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached {
                srq: SrqId(element),
            },
            _ => AsyncEvent::Other { event_type },
        }
    }
}

/// What reads a context's events (one per provider).
pub(crate) trait AsyncEventSource: Send + Sync + Debug {
    /// The non-blocking fd, readable while events are pending.
    fn fd(&self) -> BorrowedFd<'_>;
    /// The next event, converted (and acknowledged), if one is pending.
    fn try_next(&self) -> Result<Option<AsyncEvent>>;
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

/// The error of a provider without asynchronous events.
pub(crate) fn unsupported() -> Error {
    Error::Verbs {
        verb: "ibv_get_async_event",
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each raw type becomes the variant of its kind, with the element read as its kind's.
    #[test]
    fn raw_events_convert_by_kind() {
        let e = 0x1_0000_0203u64;
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_QP_FATAL, e),
            AsyncEvent::QpFatal { qpn: 0x203 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PORT_ERR, 1),
            AsyncEvent::PortError { port: 1 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PORT_ACTIVE, 2),
            AsyncEvent::PortActive { port: 2 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_CQ_ERR, e),
            AsyncEvent::CqError { cq: CqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_SRQ_LIMIT_REACHED, e),
            AsyncEvent::SrqLimitReached { srq: SrqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_SRQ_ERR, e),
            AsyncEvent::SrqError { srq: SrqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_QP_LAST_WQE_REACHED, 7),
            AsyncEvent::QpLastWqeReached { qpn: 7 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_DEVICE_FATAL, 0),
            AsyncEvent::DeviceFatal
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_LID_CHANGE, 1).port(),
            Some(1)
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PATH_MIG, 9).qpn(),
            Some(9)
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_WQ_FATAL, 9),
            AsyncEvent::Other { event_type: 19 }
        );
    }
}
