//! The convenient layer: posting without `unsafe`, posts that ring, waits with deadlines.
//!
//! The [`PostSend`] / [`PostRecv`] methods are `unsafe` because the device touches memory by
//! address. Here every local buffer is a [`BufSlice`] of an [`MrBuf`]: bounds-checked against
//! the buffer, with the buffer's own key. That is enough for memory safety:
//!
//! - Rust code never holds a reference into an [`MrBuf`] (it copies in and out, with atomic
//!   accesses: see its memory model), so the device writing at any time can neither break an
//!   aliasing guarantee nor race with a read;
//! - an `MrBuf` is deregistered before its memory is freed, and after deregistration the device
//!   no longer accesses it: dropping a buffer while a request still uses it makes that request
//!   fail with a protection error, never a write into freed memory;
//! - inline payloads are plain `&[u8]`, copied during the call.
//!
//! Remote addresses are the peer's memory, protected by its keys on the peer's side.
//!
//! What stays the caller's business is meaning, not safety: reading a buffer before the
//! completion of the request that fills it gives whatever bytes have landed so far.
//!
//! # Nothing is silently left undone
//!
//! - Every operation of [`SendQueue`](crate::SendQueue) posts one request **and rings the
//!   doorbell**: when it returns `Ok`, the device has the request. To put several requests
//!   behind one doorbell, stage them in a [`SendQueue::batch`](crate::SendQueue::batch) (the
//!   same method names), which rings once when it is finished or dropped:
//!
//!   ```no_run
//!   # use zverbs::{MrBuf, RemoteBuf, SendFlags, SendQueue};
//!   # fn f(sq: &mut SendQueue, buf: &MrBuf, peer: RemoteBuf) -> zverbs::Result<()> {
//!   let mut b = sq.batch();
//!   b.write(1, buf.slice(0..64)?, peer, SendFlags::NONE)?;
//!   b.send(2, buf.slice(64..128)?, SendFlags::SIGNALED)?;
//!   b.finish(); // one doorbell for both
//!   # Ok(()) }
//!   ```
//!
//! - [`Poller::wait`](crate::Poller::wait) spins for a number of completions until a
//!   deadline, [`Poller::wait_blocking`](crate::Poller::wait_blocking) sleeps on the CQ's
//!   channel for them, and both say so when the deadline passes ([`WaitError::Timeout`]);
//!   [`Completion::ok`](zverbs_core::Completion::ok) turns a failed completion into an error
//!   ([`zverbs_core::WcError`]).
//! - Every error here converts into [`crate::Error`], so `?` works across set-up, posting and
//!   waiting in one function.
//!
//! The layer is thin: a post through [`SendQueue`](crate::SendQueue) is the bounds and access
//! check its [`BufSlice`] already passed, and the backend queue's own [`PostSend::post`]; the
//! [`Poller`](crate::Poller) copies completions into a buffer of its own, allocated once.

use std::ops::RangeBounds;

use zverbs_core::Sge;

#[cfg(doc)]
use zverbs_core::{PostError, PostRecv, PostSend};

pub use crate::error::{SafePostError, WaitError};
use crate::mr::MrBuf;
use crate::mr::Registered;
use crate::types::access::AccessFlags;
use crate::types::buf::BufError;

/// A bounds-checked span of an [`MrBuf`] ([`MrBuf::slice`]).
#[derive(Clone, Copy, Debug)]
pub struct BufSlice<'a> {
    buf: &'a MrBuf,
    sge: Sge,
}

impl MrBuf {
    /// The span `range` of the buffer, to post: `buf.slice(..)?`, `buf.slice(64..128)?`,
    /// `buf.slice(8..)?`.
    ///
    /// # Errors
    ///
    /// [`BufError::ReversedRange`], [`BufError::OutOfBounds`] (naming the range and the
    /// buffer's length), or [`BufError::TooLong`] for a span longer than a scatter entry
    /// carries (4 GiB − 1 bytes). Nothing is posted: the error comes before the queue sees the
    /// span.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<BufSlice<'_>, BufError> {
        Ok(BufSlice {
            buf: self,
            sge: self.sge(range)?,
        })
    }
}

impl BufSlice<'_> {
    /// The scatter entry it stands for.
    pub fn sge(&self) -> Sge {
        self.sge
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.sge.length as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.sge.length == 0
    }

    pub(crate) fn writable(&self) -> Result<Sge, SafePostError> {
        if self.buf.access().contains(AccessFlags::LOCAL_WRITE) {
            Ok(self.sge)
        } else {
            Err(SafePostError::NotWritable)
        }
    }
}

/// A QP's send and receive queues and the poller of its CQ ([`Qp::queues`]): the front door's
/// handles, each holding its backend's typed handle, chosen at run time (one `match` per call:
/// `docs/usage.md`, "Posting, batching and waiting", has what it costs).
///
/// [`Qp::queues`]: crate::Qp::queues
#[derive(Debug)]
pub struct SafeQueues {
    /// The send queue: each post rings.
    pub sq: crate::SendQueue,
    /// The receive queue.
    pub rq: crate::RecvQueue,
    /// The CQ's poller, with room for as many completions as the CQ holds.
    pub cq: crate::Poller,
}
