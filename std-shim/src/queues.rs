//! The data-path handles: one send queue, one receive queue per QP and one poller per CQ,
//! driven by either backend through the [`zverbs_core`] traits.
//!
//! Each backend has its own concrete types ([`direct`], [`verbs`]); generic code over
//! [`PostSend`], [`PostRecv`] and [`PollCq`] instantiated with them compiles to static dispatch.
//! The `Any*` enums hold whichever backend was chosen at run time and implement the same traits
//! with one `match` per call; [`Queues`] pairs a QP's queues with its CQ's poller so that code
//! can branch once and run a monomorphised loop:
//!
//! ```no_run
//! use zverbs::{PollCq, PostRecv, PostSend, Queues};
//!
//! fn run(sq: impl PostSend, rq: impl PostRecv, cq: impl PollCq) { /* the hot loop */ }
//!
//! # fn f(qp: &zverbs::Qp, cq: &zverbs::Cq) -> zverbs::Result<()> {
//! match Queues::take(qp, cq)? {
//!     Queues::Direct(q) => run(q.sq, q.rq, q.cq), // monomorphised for mlx5
//!     Queues::DirectUd(q) => run(q.sq, q.rq, q.cq), // for a UD QP on mlx5
//!     Queues::Verbs(q) => run(q.sq, q.rq, q.cq),  // monomorphised for libibverbs
//! }
//! # Ok(()) }
//! ```
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
use crate::qp::{Qp, QpData, QpInner};

/// The bindings a direct poller polls for.
type DirectBindings = crate::bindings::DirectTable;

/// Implements [`PostSend`] for a handle type by forwarding to the queue it holds in its field
/// `q` (always inlined).
macro_rules! forward_send {
    ($t:ty) => {
        impl PostSend for $t {
            #[inline(always)]
            unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
                // SAFETY: forwarded; the caller upholds the posting contract.
                unsafe { self.q.stage(wr) }
            }
            #[inline(always)]
            fn ring(&mut self) {
                self.q.ring()
            }
            #[inline(always)]
            unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
                // SAFETY: forwarded.
                unsafe { self.q.post_all(wrs) }
            }
            #[inline(always)]
            unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
                // SAFETY: forwarded.
                unsafe { self.q.post(wr) }
            }
        }
    };
}

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

/// Implements the data-path traits for a backend's `SendQueue`, `RecvQueue` and `Poller` by
/// forwarding to the queue each holds in its field `q` (always inlined: the handles add
/// nothing to the hot path).
macro_rules! forward_queues {
    () => {
        forward_send!(SendQueue);
        forward_recv!(RecvQueue);

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

    /// A send queue driven by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct SendQueue {
        // Field order is drop order: the queue before the QP whose memory it writes (and
        // whose register state, shared or not, it points to).
        pub(super) q: zverbs_mlx5dv::SendQueue<SqStateHandle>,
        pub(super) _qp: Arc<QpInner>,
    }

    /// A receive queue driven by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct RecvQueue {
        pub(super) q: zverbs_mlx5dv::RecvQueue<RqStateHandle>,
        pub(super) _qp: Arc<QpInner>,
    }

    /// A CQ polled by `zverbs-mlx5dv`.
    #[derive(Debug)]
    pub struct Poller {
        // Field order is drop order: the poller before the hand-over it reads and the CQ
        // whose memory it reads (its table keeps the SRQs it writes alive).
        pub(super) q: zverbs_mlx5dv::CompletionQueue<DirectBindings>,
        pub(super) members: Arc<crate::bindings::Publisher<DirectBindings>>,
        pub(super) _cq: Cq,
    }

    impl SendQueue {
        /// The underlying `zverbs-mlx5dv` queue (counters, BlueFlame).
        pub fn raw(&self) -> &zverbs_mlx5dv::SendQueue<SqStateHandle> {
            &self.q
        }
    }

    forward_queues!();

    /// The send queue of a UD QP driven by `zverbs-mlx5dv`: it posts
    /// [`SendOp::SendTo`](zverbs_core::SendOp::SendTo), `SendToImm` and NOP.
    #[derive(Debug)]
    pub struct UdSendQueue {
        // Field order is drop order: the queue before the QP whose memory it writes.
        pub(super) q: zverbs_mlx5dv::SendQueue<SqStateHandle, zverbs_mlx5dv::Datagram>,
        pub(super) _qp: Arc<QpInner>,
    }

    impl UdSendQueue {
        /// The underlying `zverbs-mlx5dv` queue (counters, BlueFlame).
        pub fn raw(&self) -> &zverbs_mlx5dv::SendQueue<SqStateHandle, zverbs_mlx5dv::Datagram> {
            &self.q
        }
    }

    forward_send!(UdSendQueue);

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

    /// A send queue driven through `ibv_post_send`.
    #[derive(Debug)]
    pub struct SendQueue {
        pub(super) q: fallback::SendQueue,
        pub(super) _qp: Arc<QpInner>,
    }

    /// A receive queue driven through `ibv_post_recv`.
    #[derive(Debug)]
    pub struct RecvQueue {
        pub(super) q: fallback::RecvQueue,
        pub(super) _qp: Arc<QpInner>,
    }

    /// A CQ polled through `ibv_poll_cq`.
    #[derive(Debug)]
    pub struct Poller {
        pub(super) q: fallback::Poller,
        pub(super) members: Arc<crate::bindings::Publisher<crate::bindings::VerbsTable>>,
        pub(super) _cq: Cq,
    }

    impl SendQueue {
        /// The refusal the provider made at the last `ring`, if any (see [`fallback`]).
        pub fn take_ring_error(&mut self) -> Option<fallback::RingError> {
            self.q.take_ring_error()
        }
    }

    impl Poller {
        /// The errno of the last failed `ibv_poll_cq`, if any.
        pub fn take_error(&mut self) -> Option<i32> {
            self.q.take_error()
        }
    }

    forward_queues!();

    /// A shared receive queue posted to through `ibv_post_srq_recv`.
    #[derive(Debug)]
    pub struct SrqQueue {
        pub(crate) q: fallback::SrqQueue,
        pub(crate) _srq: crate::srq::Srq,
    }

    forward_recv!(SrqQueue);
}

/// A send queue of either backend.
#[derive(Debug)]
pub enum AnySendQueue {
    /// Driven directly (an RC QP).
    Direct(direct::SendQueue),
    /// A UD QP's, driven directly.
    DirectUd(direct::UdSendQueue),
    /// Driven through libibverbs (either transport).
    Verbs(verbs::SendQueue),
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

fn qp_ptr(qp: &QpInner) -> Result<*mut zverbs_ffi::types::ibv_qp> {
    match qp.provider.engine() {
        QpEngine::Verbs(p) => Ok(p.as_ptr()),
        QpEngine::Direct(_) => Err(Error::Backend {
            requested: BackendKind::Verbs,
            reason: "the QP is driven directly".into(),
        }),
    }
}

fn no_entry(what: &str) -> Error {
    Error::Backend {
        requested: BackendKind::Verbs,
        reason: format!("the provider has no {what} entry in ibv_context.ops"),
    }
}

impl AnySendQueue {
    pub(crate) fn new(qp: &Arc<QpInner>) -> Result<Self> {
        match &qp.data {
            QpData::Direct(d) if qp.send_caps().is_ud() => {
                let (layout, caps, state) = (&d.layout, qp.send_caps(), d.sq_state.clone());
                // SAFETY: as for an RC QP below (the register: its own, or the one `SharedBf`
                // of its address, which RC and UD QPs on it hold alike); the QP is UD and its
                // caps say so.
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new_ud(layout, caps, state, d.register.shared())?
                };
                Ok(Self::DirectUd(direct::UdSendQueue { q, _qp: qp.clone() }))
            }
            QpData::Direct(d) => {
                let (layout, caps, state) = (&d.layout, qp.sq_caps, d.sq_state.clone());
                // SAFETY: the layout is libmlx5's for this live QP, kept alive by the `Arc` the
                // handle holds beside the queue (dropped after it); this is the QP's only send
                // queue handle (taken once) and libibverbs never posts to it; the caps are the
                // QP's, its state is bound to its send CQ's poller only; the QP is new; it was
                // created without scatter-to-CQE. The register: the provider vouched that a
                // dedicated one is this QP's alone (and 8-byte doorbells alone cannot tear);
                // every direct QP of this process on a shared one holds the same `SharedBf`
                // (one per address, `blueflame::join`), which the QP, kept alive by the handle,
                // keeps alive.
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new(layout, caps, state, d.register.shared())?
                };
                Ok(Self::Direct(direct::SendQueue { q, _qp: qp.clone() }))
            }
            QpData::Verbs(v) => {
                let ptr = qp_ptr(qp)?;
                // SAFETY: a live QP kept alive by the `Arc`; the only send queue handle; the
                // QP's real caps; the state made for it and bound to its send CQ only.
                let q = unsafe {
                    crate::fallback::SendQueue::new(
                        ptr,
                        qp.caps.max_send_wr,
                        qp.send_caps(),
                        v.sq.clone(),
                    )
                }
                .ok_or_else(|| no_entry("post_send"))?;
                Ok(Self::Verbs(verbs::SendQueue { q, _qp: qp.clone() }))
            }
        }
    }

    /// Which backend drives it.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Direct(_) | Self::DirectUd(_) => BackendKind::Direct,
            Self::Verbs(_) => BackendKind::Verbs,
        }
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
                Ok(Self::Direct(direct::RecvQueue { q, _qp: qp.clone() }))
            }
            QpData::Verbs(v) => {
                let ptr = qp_ptr(qp)?;
                // SAFETY: as for the send queue.
                let q = unsafe {
                    crate::fallback::RecvQueue::new(
                        ptr,
                        qp.caps.max_recv_wr,
                        qp.caps.max_recv_sge,
                        v.rq.clone(),
                    )
                }
                .ok_or_else(|| no_entry("post_recv"))?;
                Ok(Self::Verbs(verbs::RecvQueue { q, _qp: qp.clone() }))
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
    pub(crate) fn new(cq: &Cq, qps: Vec<Arc<QpInner>>) -> Result<Self> {
        use crate::bindings::Tables;
        use crate::qp::{direct_table, verbs_table};
        match (cq.engine(), &cq.inner.tables) {
            (CqEngine::Direct(layout), Tables::Direct(members)) => {
                let table = direct_table(cq, &qps);
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
                let table = verbs_table(cq, &qps);
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

impl PostSend for AnySendQueue {
    #[inline(always)]
    unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.stage(wr) },
            // SAFETY: forwarded.
            Self::DirectUd(q) => unsafe { q.stage(wr) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.stage(wr) },
        }
    }
    #[inline(always)]
    fn ring(&mut self) {
        match self {
            Self::Direct(q) => q.ring(),
            Self::DirectUd(q) => q.ring(),
            Self::Verbs(q) => q.ring(),
        }
    }
    #[inline(always)]
    unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post_all(wrs) },
            // SAFETY: forwarded.
            Self::DirectUd(q) => unsafe { q.post_all(wrs) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post_all(wrs) },
        }
    }
    #[inline(always)]
    unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        match self {
            // SAFETY: forwarded.
            Self::Direct(q) => unsafe { q.post(wr) },
            // SAFETY: forwarded.
            Self::DirectUd(q) => unsafe { q.post(wr) },
            // SAFETY: forwarded.
            Self::Verbs(q) => unsafe { q.post(wr) },
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

/// One QP's send and receive queues with the poller of the CQ they share, all of one backend.
#[derive(Debug)]
pub struct QueueSet<S, R, C> {
    /// The send queue.
    pub sq: S,
    /// The receive queue.
    pub rq: R,
    /// The poller of the QP's CQ.
    pub cq: C,
}

/// A [`QueueSet`] of the backend chosen at run time: match once, then run generic code.
#[derive(Debug)]
pub enum Queues {
    /// Driven directly (an RC QP).
    Direct(QueueSet<direct::SendQueue, direct::RecvQueue, direct::Poller>),
    /// A UD QP's, driven directly.
    DirectUd(QueueSet<direct::UdSendQueue, direct::RecvQueue, direct::Poller>),
    /// Driven through libibverbs (either transport).
    Verbs(QueueSet<verbs::SendQueue, verbs::RecvQueue, verbs::Poller>),
}

impl Queues {
    /// Takes `qp`'s queues and the poller of `cq`, which must serve both of its queues. The QP
    /// must be in RTS (see [`Qp::send_queue`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `cq` is not the QP's send and receive CQ; the errors of
    /// [`Qp::send_queue`], [`Qp::recv_queue`] and [`Cq::poller`].
    pub fn take(qp: &Qp, cq: &Cq) -> Result<Self> {
        if !qp.inner.send_cq.is(cq) || !qp.inner.recv_cq.is(cq) {
            return Err(Error::InvalidArgument(
                "Queues::take needs the CQ that serves both queues of the QP".into(),
            ));
        }
        qp.send_queue_ready()?;
        qp.own_receives()?;
        let sq = qp.send_queue()?;
        let rq = qp.recv_queue()?;
        let cq = cq.poller()?;
        Self::from_parts(sq, rq, cq)
    }

    /// Groups handles taken one by one: for a QP whose receives are posted before it is
    /// connected (the receive queue from INIT, the send queue once in RTS), or whose queues
    /// use two CQs.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the handles are driven by different backends.
    pub fn from_parts(sq: AnySendQueue, rq: AnyRecvQueue, cq: AnyPoller) -> Result<Self> {
        match (sq, rq, cq) {
            (AnySendQueue::Direct(sq), AnyRecvQueue::Direct(rq), AnyPoller::Direct(cq)) => {
                Ok(Self::Direct(QueueSet { sq, rq, cq }))
            }
            (AnySendQueue::DirectUd(sq), AnyRecvQueue::Direct(rq), AnyPoller::Direct(cq)) => {
                Ok(Self::DirectUd(QueueSet { sq, rq, cq }))
            }
            (AnySendQueue::Verbs(sq), AnyRecvQueue::Verbs(rq), AnyPoller::Verbs(cq)) => {
                Ok(Self::Verbs(QueueSet { sq, rq, cq }))
            }
            (sq, _, _) => Err(Error::Backend {
                requested: sq.kind(),
                reason: "the queues and the poller are driven by different backends".into(),
            }),
        }
    }

    /// Which backend drives them.
    pub fn kind(&self) -> BackendKind {
        match self {
            Self::Direct(_) | Self::DirectUd(_) => BackendKind::Direct,
            Self::Verbs(_) => BackendKind::Verbs,
        }
    }
}

mod prepared;
