//! The software device's asynchronous events behind a real fd, and its fault injection.
//!
//! Each reader subscribes to the device ([`zverbs_sim::Device::subscribe_events`]) with a
//! waker that writes a byte to one end of a Unix socket pair; the other end is the reader's
//! fd. Bytes are drained only when the queue is found empty (and the queue is looked at
//! again after the drain), so the fd stays readable while an event is pending.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use zverbs_sim::{self as sim, DeviceEvent, EventSubscription, PortState};

use super::{SimControl, device, sim_err};
use crate::error::{Error, Result};
use crate::provider::AsyncEventSource;
use crate::types::event::{AsyncEvent, CqId, SrqId};

/// A reader of the software device's events.
#[derive(Debug)]
pub(crate) struct SimEvents {
    sub: EventSubscription,
    rx: UnixStream,
}

fn io_err(verb: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Verbs { verb, source }
}

impl SimEvents {
    pub(crate) fn open() -> Result<Box<dyn AsyncEventSource>> {
        let (rx, tx) = UnixStream::pair().map_err(io_err("socketpair"))?;
        rx.set_nonblocking(true).map_err(io_err("fcntl"))?;
        tx.set_nonblocking(true).map_err(io_err("fcntl"))?;
        let sub = device().subscribe_events(Box::new(move || {
            // A full socket is a readable one: the byte is not needed then.
            let _ = (&tx).write(&[1]);
        }));
        Ok(Box::new(SimEvents { sub, rx }))
    }
}

/// The event as `zverbs` reports it.
fn convert(ev: DeviceEvent) -> AsyncEvent {
    match ev {
        DeviceEvent::PortActive { port } => AsyncEvent::PortActive { port },
        DeviceEvent::PortError { port } => AsyncEvent::PortError { port },
        DeviceEvent::QpFatal { qpn } => AsyncEvent::QpFatal { qpn },
        DeviceEvent::QpRequestError { qpn } => AsyncEvent::QpRequestError { qpn },
        DeviceEvent::QpAccessError { qpn } => AsyncEvent::QpAccessError { qpn },
        DeviceEvent::QpLastWqeReached { qpn } => AsyncEvent::QpLastWqeReached { qpn },
        DeviceEvent::CqError { cqn } => AsyncEvent::CqError {
            cq: CqId(u64::from(cqn)),
        },
        DeviceEvent::SrqLimitReached { srqn } => AsyncEvent::SrqLimitReached {
            srq: SrqId(u64::from(srqn)),
        },
        DeviceEvent::SrqError { srqn } => AsyncEvent::SrqError {
            srq: SrqId(u64::from(srqn)),
        },
        DeviceEvent::DeviceFatal => AsyncEvent::DeviceFatal,
        // A kind the device adds later.
        _ => AsyncEvent::Other {
            event_type: u32::MAX,
        },
    }
}

impl AsyncEventSource for SimEvents {
    fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    fn try_next(&self) -> Result<Option<AsyncEvent>> {
        if let Some(ev) = self.sub.try_next() {
            return Ok(Some(convert(ev)));
        }
        let mut buf = [0u8; 64];
        loop {
            match (&self.rx).read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err("read")(e)),
            }
        }
        // An event raised between the first look and the drain had its byte drained.
        Ok(self.sub.try_next().map(convert))
    }
}

impl SimControl<'_> {
    /// Takes port 1 down (`down`) or brings it up: `ibv_query_port` reports it, and every
    /// context's [`AsyncEvents`](crate::AsyncEvents) get [`AsyncEvent::PortError`] or
    /// [`AsyncEvent::PortActive`]. While it is down every RC request the device takes fails
    /// with "transport retry exceeded" and its QP enters the error state (the requests after
    /// it are flushed) with [`AsyncEvent::QpFatal`]; bringing the port up leaves those QPs in
    /// error.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] (invalid input) for a port other than 1.
    pub fn set_port_state(&self, port: u8, state: PortState) -> Result<()> {
        device()
            .set_port_state(port, state)
            .map_err(|e| sim_err("set_port_state", e))
    }

    /// Moves QP `qpn` to the error state outside any request, with [`AsyncEvent::QpFatal`]
    /// (and [`AsyncEvent::QpLastWqeReached`] for a QP on an SRQ).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] (not found) for a QP the device does not have.
    pub fn inject_qp_fatal(&self, qpn: u32) -> Result<()> {
        device()
            .inject_qp_fatal(qpn)
            .map_err(|e| sim_err("inject_qp_fatal", e))
    }

    /// Raises an event of a QP ([`zverbs_sim::Device::inject_qp_event`]): a fatal, request
    /// or access error moves the QP to the error state first.
    ///
    /// # Errors
    ///
    /// As [`inject_qp_fatal`](Self::inject_qp_fatal), and invalid input for an event of no
    /// QP.
    pub fn inject_qp_event(&self, ev: sim::DeviceEvent) -> Result<()> {
        device()
            .inject_qp_event(ev)
            .map_err(|e| sim_err("inject_qp_event", e))
    }

    /// The device fails: every QP enters the error state, with [`AsyncEvent::DeviceFatal`].
    pub fn inject_device_fatal(&self) {
        device().inject_device_fatal();
    }
}
