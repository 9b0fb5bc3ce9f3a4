//! An rdma-core context's asynchronous events: `ibv_get_async_event` on the context's async
//! fd (made non-blocking), each event converted and acknowledged (`ibv_ack_async_event`)
//! before it is returned.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

use crate::error::{Error, Result};
use crate::provider::AsyncEventSource;
use crate::types::event::AsyncEvent;
use zverbs_ffi::load::Verbs;
use zverbs_ffi::types::{ibv_async_event, ibv_context, ibv_event_type as ty};

/// The reader of one context's async fd.
#[derive(Debug)]
pub(crate) struct VerbsEvents {
    ctx: *mut ibv_context,
    fd: RawFd,
    verbs: &'static Verbs,
}

// SAFETY: libibverbs' `ibv_get_async_event` and `ibv_ack_async_event` may be called from any
// thread; the fields are immutable.
unsafe impl Send for VerbsEvents {}
// SAFETY: as above; concurrent readers each read whole events from the fd.
unsafe impl Sync for VerbsEvents {}

impl VerbsEvents {
    /// Makes the context's async fd non-blocking and reads it.
    ///
    /// # Safety
    ///
    /// `ctx` is a live context that outlives the reader.
    pub(crate) unsafe fn open(
        ctx: *mut ibv_context,
        verbs: &'static Verbs,
    ) -> Result<Box<dyn AsyncEventSource>> {
        // SAFETY: (caller) a live context.
        let fd = unsafe { (*ctx).async_fd };
        // SAFETY: fcntl on the context's own descriptor, changing only its O_NONBLOCK flag.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(Error::Verbs {
                verb: "fcntl(async_fd, O_NONBLOCK)",
                source: io::Error::last_os_error(),
            });
        }
        Ok(Box::new(VerbsEvents { ctx, fd, verbs }))
    }
}

impl AsyncEventSource for VerbsEvents {
    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the context's async fd stays open until `ibv_close_device`, after this
        // reader is gone.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    fn try_next(&self) -> Result<Option<AsyncEvent>> {
        let mut ev = ibv_async_event::zeroed();
        // SAFETY: a live context and a valid event to fill.
        if unsafe { (self.verbs.ibv_get_async_event)(self.ctx, &mut ev) } != 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(Error::Verbs {
                    verb: "ibv_get_async_event",
                    source: e,
                }),
            };
        }
        // SAFETY: libibverbs filled the union member of the event's kind; the object it
        // names cannot be destroyed before the event is acknowledged below (its destroy waits
        // for the acknowledgement), so reading its QP number is sound.
        let element = unsafe {
            match ev.event_type {
                ty::IBV_EVENT_CQ_ERR => ev.element.cq as u64,
                ty::IBV_EVENT_QP_FATAL
                | ty::IBV_EVENT_QP_REQ_ERR
                | ty::IBV_EVENT_QP_ACCESS_ERR
                | ty::IBV_EVENT_COMM_EST
                | ty::IBV_EVENT_SQ_DRAINED
                | ty::IBV_EVENT_PATH_MIG
                | ty::IBV_EVENT_PATH_MIG_ERR
                | ty::IBV_EVENT_QP_LAST_WQE_REACHED => {
                    let qp = ev.element.qp;
                    if qp.is_null() {
                        0
                    } else {
                        u64::from((*qp).qp_num)
                    }
                }
                ty::IBV_EVENT_SRQ_ERR | ty::IBV_EVENT_SRQ_LIMIT_REACHED => ev.element.srq as u64,
                ty::IBV_EVENT_WQ_FATAL => ev.element.wq as u64,
                _ => ev.element.port_num.max(0) as u64,
            }
        };
        let out = AsyncEvent::from_raw(ev.event_type, element);
        // SAFETY: the event `ibv_get_async_event` returned, acknowledged once.
        unsafe { (self.verbs.ibv_ack_async_event)(&mut ev) };
        Ok(Some(out))
    }
}
