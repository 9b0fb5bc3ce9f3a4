//! The backends' typed handles: the receive queue and the poller of each backend ([`direct`],
//! [`verbs`]) and the direct backend's send queue, generic over its transport, with the
//! `Any*` enums over the two backends. The front door's [`SendQueue`](crate::SendQueue) holds
//! one of the typed send queues; [`crate::backend`] names them for monomorphised loops.
//!
//! Every handle keeps its QP (and so its CQs, PD and context) alive: the objects can be
//! dropped in any order. Each owns what it uses: the direct queues hold the queue memory's
//! addresses (valid while the QP lives, which the handle's clone of the QP guarantees) and
//! clones of the bookkeeping they share with the poller ([`direct::SqStateHandle`], `Arc`s), so
//! no borrow outlives what it borrows and no lifetime is assumed.

use std::sync::Arc;

use zverbs_core::{BatchError, Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, SendWr};

use crate::backend::BackendKind;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::provider::{CqEngine, QpEngine};
use crate::qp::{QpData, QpInner};

/// The bindings a direct poller polls for.
type DirectBindings = crate::bindings::DirectTable;

/// Implements [`PostRecv`] for a handle type by forwarding to its field `q`.
macro_rules! forward_recv {
    ($t:ty) => {
        impl PostRecv for $t {
            #[inline(always)]
            unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
                // SAFETY: forwarded.
                unsafe { self.q.post(wr) }
            }
            #[inline(always)]
            unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
                // SAFETY: forwarded.
                unsafe { self.q.post_all(wrs) }
            }
        }
    };
}

/// Implements the poll traits for a backend's `Poller` by forwarding to the poller it holds in
/// its field `q` (always inlined: the handle adds nothing to the hot path).
macro_rules! forward_poller {
    () => {
        impl PollCq for Poller {
            /// Polls; a poll that finds nothing also adopts a new table of QPs if one waits
            /// (one load and a compare, on the idle path only: `bindings.rs`).
            #[inline(always)]
            fn poll(&mut self, out: &mut [Completion]) -> usize {
                let n = self.q.poll(out);
                if n == 0 && self.members.0.pending() {
                    self.q.adopt();
                }
                n
            }

            /// As `poll`, with the brief completions of the backend's own decoder.
            #[inline(always)]
            fn poll_brief(&mut self, out: &mut [zverbs_core::BriefCompletion]) -> usize {
                let n = self.q.poll_brief(out);
                if n == 0 && self.members.0.pending() {
                    self.q.adopt();
                }
                n
            }
        }

        impl zverbs_core::PollCqTimed for Poller {
            #[inline(always)]
            fn poll_timed(&mut self, out: &mut [zverbs_core::TimedCompletion]) -> usize {
                self.q.poll_timed(out)
            }
        }
    };
}

/// The direct (mlx5) backend's handles.
pub mod direct {
    use super::*;

    pub use crate::qp::{RqStateHandle, SqStateHandle};
    pub use zverbs_mlx5dv::{Connected, Datagram, Dci, Ethernet, SelfAddressed, SqTransport};

    /// A send queue driven by `zverbs-mlx5dv`, of transport `T`: [`Connected`] (RC, the
    /// default), [`Datagram`] (UD) or [`Dci`] (a DC initiator, whose posts name their target:
    /// `post_to`). The typed handle behind [`crate::SendQueue`], for loops monomorphised for
    /// the direct backend ([`crate::backend::Queues`]).
    #[derive(Debug)]
    pub struct SendQueue<T: SqTransport = Connected> {
        // Field order is drop order: the queue before the QP whose memory it writes (and
        // whose register state, shared or not, it points to).
        pub(crate) q: zverbs_mlx5dv::SendQueue<SqStateHandle, T>,
        pub(crate) _qp: Arc<QpInner>,
    }

    /// A receive queue driven by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct RecvQueue {
        // Field order is drop order: the queue before the QP or work queue it writes.
        pub(crate) q: zverbs_mlx5dv::RecvQueue<RqStateHandle>,
        pub(crate) _owner: Arc<dyn std::fmt::Debug + Send + Sync>,
    }

    /// A CQ polled by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct Poller {
        // Field order is drop order: the poller before the hand-over it reads and the CQ
        // whose memory it reads (its table keeps the SRQs it writes alive).
        pub(crate) q: zverbs_mlx5dv::CompletionQueue<DirectBindings>,
        pub(super) members: Arc<crate::bindings::Publisher<DirectBindings>>,
        pub(super) _cq: Cq,
    }

    impl<T: SqTransport> SendQueue<T> {
        /// The underlying `zverbs-mlx5dv` queue (counters, BlueFlame, prepared requests).
        pub fn raw(&self) -> &zverbs_mlx5dv::SendQueue<SqStateHandle, T> {
            &self.q
        }

        /// The underlying queue, to post through (`unsafe` there, as here).
        pub fn raw_mut(&mut self) -> &mut zverbs_mlx5dv::SendQueue<SqStateHandle, T> {
            &mut self.q
        }

        /// The QP number.
        pub fn qpn(&self) -> u32 {
            self.q.qpn()
        }

        /// Rings the doorbell for the requests staged since the last ring.
        #[inline(always)]
        pub fn ring(&mut self) {
            self.q.ring()
        }
    }

    impl<T: SelfAddressed> PostSend for SendQueue<T> {
        #[inline(always)]
        unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
            // SAFETY: the caller upholds the posting contract, which is the inner queue's.
            unsafe { self.q.stage(wr) }
        }
        #[inline(always)]
        fn ring(&mut self) {
            self.q.ring()
        }
        #[inline(always)]
        unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
            // SAFETY: the caller upholds the posting contract, which is the inner queue's.
            unsafe { self.q.post_all(wrs) }
        }
        #[inline(always)]
        unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
            // SAFETY: the caller upholds the posting contract, which is the inner queue's.
            unsafe { self.q.post(wr) }
        }
    }

    forward_recv!(RecvQueue);
    forward_poller!();

    /// A shared receive queue posted to by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct SrqQueue {
        // Field order is drop order: the queue before the SRQ whose memory it writes.
        pub(crate) q: zverbs_mlx5dv::SharedRecvQueue<crate::srq::SrqStateHandle>,
        pub(crate) _srq: crate::srq::Srq,
    }

    impl SrqQueue {
        /// The underlying `zverbs-mlx5dv` queue (counters).
        pub fn raw(&self) -> &zverbs_mlx5dv::SharedRecvQueue<crate::srq::SrqStateHandle> {
            &self.q
        }
    }

    forward_recv!(SrqQueue);
}

/// The libibverbs fallback's handles.
pub mod verbs {
    use super::*;
    use crate::fallback;

    /// A receive queue driven through `ibv_post_recv`.
    #[derive(Debug)]
    pub struct RecvQueue {
        // Field order is drop order: the queue before the QP or work queue it posts to.
        pub(crate) q: fallback::RecvQueue,
        pub(crate) _owner: Arc<dyn std::fmt::Debug + Send + Sync>,
    }

    /// A CQ polled through `ibv_poll_cq`.
    #[derive(Debug)]
    pub struct Poller {
        pub(super) q: fallback::Poller,
        pub(super) members: Arc<crate::bindings::Publisher<crate::bindings::VerbsTable>>,
        pub(super) _cq: Cq,
    }

    impl Poller {
        /// The errno of the last failed `ibv_poll_cq`, if any.
        pub fn take_error(&mut self) -> Option<i32> {
            self.q.take_error()
        }
    }

    forward_recv!(RecvQueue);
    forward_poller!();

    /// A shared receive queue posted to through `ibv_post_srq_recv`.
    #[derive(Debug)]
    pub struct SrqQueue {
        pub(crate) q: fallback::SrqQueue,
        pub(crate) _srq: crate::srq::Srq,
    }

    forward_recv!(SrqQueue);
}

/// A shared receive queue of either backend ([`Srq::queue`](crate::Srq::queue)).
#[derive(Debug)]
pub enum AnySrqQueue {
    /// Posted to directly.
    Direct(direct::SrqQueue),
    /// Posted to through libibverbs.
    Verbs(verbs::SrqQueue),
}

impl AnySrqQueue {
    /// Which backend drives it.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Direct(_) => BackendKind::Direct,
            Self::Verbs(_) => BackendKind::Verbs,
        }
    }
}

impl PostRecv for AnySrqQueue {
    #[inline(always)]
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post(wr) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post(wr) },
        }
    }
    #[inline(always)]
    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post_all(wrs) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post_all(wrs) },
        }
    }
}

/// A receive queue of either backend.
#[derive(Debug)]
pub enum AnyRecvQueue {
    /// Driven directly.
    Direct(direct::RecvQueue),
    /// Driven through libibverbs.
    Verbs(verbs::RecvQueue),
}

/// A CQ poller of either backend.
#[derive(Debug)]
pub enum AnyPoller {
    /// Polled directly.
    Direct(direct::Poller),
    /// Polled through libibverbs.
    Verbs(verbs::Poller),
}

pub(crate) fn qp_ptr(qp: &QpInner) -> Result<*mut zverbs_ffi::types::ibv_qp> {
    match qp.provider.engine() {
        QpEngine::Verbs(p) => Ok(p.as_ptr()),
        QpEngine::Direct(_) => Err(Error::Backend {
            requested: BackendKind::Verbs,
            reason: "the QP is driven directly".into(),
        }),
    }
}

/// Refuses an ordinary Ethernet receive queue on the direct backend where its completions
/// cannot be told apart: the direct poller finds them by their user index (their QP number's
/// place holds the flow tag), which libmlx5 chooses and no verb reports.
pub(crate) fn no_entry(what: &str) -> Error {
    Error::Backend {
        requested: BackendKind::Verbs,
        reason: format!("the provider has no {what} entry in ibv_context.ops"),
    }
}

impl AnyRecvQueue {
    pub(crate) fn new(qp: &Arc<QpInner>) -> Result<Self> {
        match &qp.data {
            QpData::Direct(d) => {
                // SAFETY: as for the send queue.
                let mut q =
                    unsafe { zverbs_mlx5dv::RecvQueue::new(&d.layout, d.rq_state.clone())? };
                // No more receives outstanding than its CQ holds entries for (`Cq::hold`).
                q.limit_outstanding(qp.caps.max_recv_wr);
                Ok(Self::Direct(direct::RecvQueue {
                    q,
                    _owner: qp.clone(),
                }))
            }
            QpData::Verbs(v) => {
                let ptr = qp_ptr(qp)?;
                // SAFETY: as for the send queue.
                let mut q = unsafe {
                    crate::fallback::RecvQueue::new(
                        ptr,
                        qp.caps.max_recv_wr,
                        qp.caps.max_recv_sge,
                        v.rq.clone(),
                    )
                }
                .ok_or_else(|| no_entry("post_recv"))?;
                if qp.qp_type == crate::types::qp::QpType::RawPacket {
                    // Its completions name the flow tag, not the QP: the poller finds its
                    // receives by this key (`qp::verbs_table`).
                    q = q.keyed(qp.provider.qpn());
                }
                Ok(Self::Verbs(verbs::RecvQueue {
                    q,
                    _owner: qp.clone(),
                }))
            }
        }
    }

    /// Which backend drives it.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Direct(_) => BackendKind::Direct,
            Self::Verbs(_) => BackendKind::Verbs,
        }
    }
}

impl AnyPoller {
    pub(crate) fn new(
        cq: &Cq,
        qps: Vec<Arc<QpInner>>,
        wqs: Vec<Arc<crate::bindings::WqBinding>>,
    ) -> Result<Self> {
        use crate::bindings::Tables;
        use crate::qp::{direct_table, verbs_table};
        match (cq.engine(), &cq.inner.tables) {
            (CqEngine::Direct(layout), Tables::Direct(members)) => {
                let table = direct_table(cq, &qps, &wqs);
                // SAFETY: the layout is libmlx5's for this live CQ (kept alive by `_cq`, dropped
                // after the queue); the poller is taken once and libibverbs never polls the CQ;
                // each binding names a QP of this CQ with its states; the CQ was created
                // without compression.
                let mut q = unsafe { zverbs_mlx5dv::CompletionQueue::new(&layout, table)? };
                q.set_timestamps(cq.has_timestamps());
                // SAFETY: the hand-over is kept alive by the `Arc` the poller holds beside the
                // queue (dropped after it); this is its one poller (taken once); the control
                // path publishes only tables built as the one above.
                unsafe { q.set_handover(std::ptr::NonNull::from(&members.0)) };
                Ok(Self::Direct(direct::Poller {
                    q,
                    members: members.clone(),
                    _cq: cq.clone(),
                }))
            }
            (CqEngine::Verbs(ptr), Tables::Verbs(members)) => {
                let table = verbs_table(cq, &qps, &wqs);
                // SAFETY: a live CQ kept alive by `_cq`, polled only through this handle;
                // the bindings name its QPs with their states.
                let mut q = unsafe {
                    crate::fallback::Poller::new(ptr.as_ptr(), cq.inner.poll_batch, table)
                }
                .ok_or_else(|| no_entry("poll_cq"))?;
                if let Some(ex) = cq.inner.provider.verbs_cq_ex() {
                    // SAFETY: the extended CQ is the same live CQ (`ibv_cq_ex_to_cq`), polled
                    // only through this handle, created with the standard fields and the
                    // completion timestamp.
                    unsafe { q.set_cq_ex(ex) };
                }
                // SAFETY: as for the direct poller.
                unsafe { q.set_handover(std::ptr::NonNull::from(&members.0)) };
                Ok(Self::Verbs(verbs::Poller {
                    q,
                    members: members.clone(),
                    _cq: cq.clone(),
                }))
            }
            _ => Err(Error::Backend {
                requested: cq.backend().kind,
                reason: "the CQ's engine and its hand-over differ".into(),
            }),
        }
    }

    /// Whether the poller serves QP `qpn` now: QPs created after it was taken join it (by
    /// the time they can post), destroyed ones leave it (at the latest at a poll that finds
    /// nothing).
    pub fn serves(&self, qpn: u32) -> bool {
        match self {
            Self::Direct(p) => p.q.serves(qpn),
            Self::Verbs(p) => p.q.serves(qpn),
        }
    }

    /// Which backend polls it.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Direct(_) => BackendKind::Direct,
            Self::Verbs(_) => BackendKind::Verbs,
        }
    }

    /// The CQ it polls.
    pub(crate) fn cq(&self) -> &Cq {
        match self {
            Self::Direct(p) => &p._cq,
            Self::Verbs(p) => &p._cq,
        }
    }

    /// The direct poller's consumer counter (`None` on the fallback).
    pub(crate) fn direct_consumer(&self) -> Option<u32> {
        match self {
            Self::Direct(p) => Some(p.q.consumer()),
            Self::Verbs(_) => None,
        }
    }
}

impl PostRecv for AnyRecvQueue {
    #[inline(always)]
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post(wr) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post(wr) },
        }
    }
    #[inline(always)]
    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post_all(wrs) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post_all(wrs) },
        }
    }
}

impl PollCq for AnyPoller {
    #[inline(always)]
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        match self {
            Self::Direct(q) => q.poll(out),
            Self::Verbs(q) => q.poll(out),
        }
    }

    #[inline(always)]
    fn poll_brief(&mut self, out: &mut [zverbs_core::BriefCompletion]) -> usize {
        match self {
            Self::Direct(q) => q.poll_brief(out),
            Self::Verbs(q) => q.poll_brief(out),
        }
    }
}

impl zverbs_core::PollCqTimed for AnyPoller {
    #[inline(always)]
    fn poll_timed(&mut self, out: &mut [zverbs_core::TimedCompletion]) -> usize {
        match self {
            Self::Direct(q) => q.poll_timed(out),
            Self::Verbs(q) => q.poll_timed(out),
        }
    }
}
