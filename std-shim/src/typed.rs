//! The typed route: a QP's queues and its CQ's poller as the types of the backend that drives
//! them ([`crate::backend::mlx5`], [`crate::backend::verbs`]), for a hot loop monomorphised
//! for that backend. Taken from the front-door handles ([`crate::SendQueue`] and the rest),
//! so it stands above them.
//!
//! ```no_run
//! use zverbs::backend::Queues;
//! use zverbs::{PollCq, PostRecv, PostSend};
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

use crate::backend::BackendKind;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::poller::Poller;
use crate::qp::Qp;
use crate::queues::{AnyPoller, AnyRecvQueue, direct, verbs};
use crate::rq::RecvQueue;
use crate::sq::{SendQueue, TypedSq};

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
    DirectUd(QueueSet<direct::SendQueue<direct::Datagram>, direct::RecvQueue, direct::Poller>),
    /// Driven through libibverbs (either transport).
    Verbs(QueueSet<crate::fallback::SendQueue, verbs::RecvQueue, verbs::Poller>),
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
    pub fn from_parts(sq: SendQueue, rq: RecvQueue, cq: Poller) -> Result<Self> {
        let requested = sq.kind();
        match (sq.into_typed(), rq.into_typed(), cq.into_typed()) {
            (TypedSq::Rc(sq), AnyRecvQueue::Direct(rq), AnyPoller::Direct(cq)) => {
                Ok(Self::Direct(QueueSet { sq, rq, cq }))
            }
            (TypedSq::Ud(sq), AnyRecvQueue::Direct(rq), AnyPoller::Direct(cq)) => {
                Ok(Self::DirectUd(QueueSet { sq, rq, cq }))
            }
            (TypedSq::Verbs(sq), AnyRecvQueue::Verbs(rq), AnyPoller::Verbs(cq)) => {
                Ok(Self::Verbs(QueueSet { sq, rq, cq }))
            }
            (TypedSq::Eth(_), ..) => Err(Error::Backend {
                requested,
                reason: "a raw packet QP's direct queues are taken one by one (SendQueue::\
                         into_typed gives TypedSq::Eth; RecvQueue and Poller as for any QP)"
                    .into(),
            }),
            _ => Err(Error::Backend {
                requested,
                reason: "the queues and the poller are driven by different backends (or the \
                         send queue is a DC initiator's, which has no receive queue)"
                    .into(),
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
