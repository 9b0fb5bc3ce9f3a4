//! The receive side's front door: a QP's receive queue ([`RecvQueue`]) and a shared receive
//! queue's ([`SrqQueue`]), each for both backends, posting checked buffer spans (no `unsafe`)
//! or, through [`PostRecv`], any [`RecvWr`] over memory the caller vouches for.

use zverbs_core::{BatchError, PostError, PostRecv, RecvWr};

use crate::error::SafePostError;
use crate::queues::{AnyRecvQueue, AnySrqQueue};
use crate::safe::BufSlice;
use crate::types::backend::BackendKind;

/// The receive handles' methods, written once for [`RecvQueue`] and [`SrqQueue`].
macro_rules! recv_front {
    ($t:ident, $any:ident) => {
        impl $t {
            pub(crate) fn new(q: $any) -> Self {
                Self { q }
            }

            /// Which backend drives it.
            pub fn kind(&self) -> BackendKind {
                self.q.kind()
            }

            /// The typed queue inside, for a loop monomorphised for its backend.
            pub fn into_typed(self) -> $any {
                self.q
            }

            /// Posts a receive into `local`; the device may fill it as soon as this returns.
            ///
            /// # Errors
            ///
            /// [`SafePostError::NotWritable`] unless the buffer has `LOCAL_WRITE`;
            /// [`SafePostError::Post`] when the queue refuses it.
            #[inline(always)]
            pub fn post(&mut self, wr_id: u64, local: BufSlice<'_>) -> Result<(), SafePostError> {
                let sgl = [local.writable()?];
                // SAFETY: a bounds-checked span of an `MrBuf` with its own key (`safe`'s docs).
                unsafe { self.q.post(&RecvWr::new(wr_id, &sgl)) }.map_err(Into::into)
            }
        }

        /// For receives over memory the caller vouches for (the posting contract of
        /// [`PostRecv`]); call as `PostRecv::post(&mut q, &wr)` (the safe `post` takes a span).
        impl PostRecv for $t {
            #[inline(always)]
            unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
                // SAFETY: (caller) the posting contract, the typed queue's.
                unsafe { self.q.post(wr) }
            }

            #[inline(always)]
            unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
                // SAFETY: (caller) the posting contract, the typed queue's.
                unsafe { self.q.post_all(wrs) }
            }
        }
    };
}

/// A receive queue that posts only [`BufSlice`]s of writable buffers.
///
/// # Example
///
/// Post a receive, and a SEND from the peer lands in it:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::{SendFlags, WcOpcode};
///
/// let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?);
/// qb.rq.post(7, buf_b.slice(2048..)?)?; // `qb.rq` is a `RecvQueue`; visible at once
/// buf_a.write(0, b"a message")?;
/// qa.sq.send_imm(1, buf_a.slice(0..9)?, 0xcafe, SendFlags::NONE)?;
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let c = *qb.cq.wait(1, deadline)?[0].ok()?;
/// assert_eq!((c.wr_id, c.opcode, c.byte_len, c.imm()), (7, WcOpcode::Recv, 9, Some(0xcafe)));
/// let mut got = [0; 9];
/// buf_b.read(2048, &mut got)?;
/// assert_eq!(&got, b"a message");
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct RecvQueue {
    q: AnyRecvQueue,
}

/// A shared receive queue's queue ([`Srq::queue`](crate::Srq::queue)), for every QP on the SRQ:
/// the same posts as a [`RecvQueue`]'s. Each receive completes on the receive CQ of the QP that
/// consumed it.
#[derive(Debug)]
pub struct SrqQueue {
    q: AnySrqQueue,
}

recv_front!(RecvQueue, AnyRecvQueue);
recv_front!(SrqQueue, AnySrqQueue);

impl From<crate::queues::direct::RecvQueue> for RecvQueue {
    fn from(q: crate::queues::direct::RecvQueue) -> Self {
        Self::new(AnyRecvQueue::Direct(q))
    }
}

impl From<crate::queues::verbs::RecvQueue> for RecvQueue {
    fn from(q: crate::queues::verbs::RecvQueue) -> Self {
        Self::new(AnyRecvQueue::Verbs(q))
    }
}
