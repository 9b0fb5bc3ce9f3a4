//! Taking the data-path handles of a QP, a CQ and an SRQ: each can be taken once, and only
//! when it can be used. The handles ([`SendQueue`], [`Poller`], the receive queues,
//! [`crate::backend`]'s typed ones) stand above the control-path objects they are taken from,
//! so the taking is here, above both.

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::poller::Poller;
use crate::provider::SrqEngine;
use crate::qp::{Qp, attached};
use crate::queues::{AnyPoller, AnyRecvQueue, AnySrqQueue, direct, verbs};
use crate::rq::{RecvQueue, SrqQueue};
use crate::safe::SafeQueues;
use crate::sq::SendQueue;
use crate::srq::Srq;
use crate::types::backend::BackendKind;
use crate::types::qp::QpType;

/// Refuses `what` (a receive queue, or queues with one) on a DC QP, with the way to do it.
pub(crate) fn not_dc(qp: &Qp, what: &str) -> Result<()> {
    match qp.qp_type() {
        QpType::Dci => Err(Error::InvalidArgument(format!(
            "{what}: a DC initiator has a send queue only (Qp::send_queue), each request naming \
             its target (SendQueue::to with a DcPeer)"
        ))),
        QpType::Dct => Err(Error::InvalidArgument(format!(
            "{what}: a DC target has no queues of its own; post its receives to its SRQ"
        ))),
        _ => Ok(()),
    }
}

impl Qp {
    /// The send queue, for posting; it can be taken once, when the QP is in RTS (ready to
    /// send): a request posted earlier would never be executed, so asking earlier is an error,
    /// not a queue that silently does nothing. For an RC, UD or DC initiator's QP on either
    /// backend (a DC initiator's requests name their target: [`SendQueue::to`]).
    ///
    /// # Errors
    ///
    /// [`Error::NotReady`] before RTS; [`Error::AlreadyTaken`]; [`Error::Layout`] if the direct
    /// backend rejects the layout; [`Error::InvalidArgument`] for a DC target (it has no send
    /// queue).
    pub fn send_queue(&self) -> Result<SendQueue> {
        if self.qp_type() == QpType::Dct {
            not_dc(self, "Qp::send_queue")?;
        }
        self.take_send_queue()?;
        SendQueue::new(&self.inner)
    }

    /// The receive queue, for posting; it can be taken once, from INIT on: receives may be
    /// posted before the peer connects (and should be, for a peer that sends at once).
    ///
    /// # Errors
    ///
    /// [`Error::NotReady`] before INIT (a raw packet QP: before RTR); as [`Qp::send_queue`];
    /// [`Error::SoleReceiverCq`] for a raw packet QP of an rdma-core device on the direct
    /// backend whose receive CQ serves other queues: its completions name it only by a user
    /// index libmlx5 chose, so its CQ serves it alone (its own sends may share it), and from
    /// then on the CQ takes no other queue.
    pub fn recv_queue(&self) -> Result<RecvQueue> {
        not_dc(self, "Qp::recv_queue")?;
        self.own_receives()?;
        self.recv_ready()?;
        self.raw_recv_ready()?;
        self.raw_recv_cq()?;
        self.take_once("receive queue", |t| &mut t.1)?;
        AnyRecvQueue::new(&self.inner).map(RecvQueue::new)
    }

    /// The QP's send and receive queues and the poller of `cq`, which must serve both, in the
    /// [`safe`](crate::safe) layer: posts that ring, waits with deadlines. The QP must be in
    /// RTS ([`Qp::connect`]). QPs created on `cq` later join its poller.
    ///
    /// The QPs `a` and `b` are connected to each other, each with one CQ for both queues, as in
    /// [`Qp`]'s example:
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
    /// use zverbs::SendFlags;
    ///
    /// let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?);
    /// qb.rq.post(1, buf_b.slice(..)?)?;
    /// buf_a.write(0, b"ping")?;
    /// qa.sq.send(2, buf_a.slice(0..4)?, SendFlags::SIGNALED)?;
    /// let deadline = Instant::now() + Duration::from_secs(5);
    /// assert_eq!(qa.cq.wait(1, deadline)?[0].ok()?.wr_id, 2); // the SEND is done
    /// assert_eq!(qb.cq.wait(1, deadline)?[0].ok()?.byte_len, 4); // and received
    /// assert!(a.queues(&cq_a).is_err()); // taken once: `Error::AlreadyTaken`
    /// # Ok(()) }
    /// # main().unwrap(); }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `cq` is not the QP's send and receive CQ; the errors of
    /// [`Qp::send_queue`], [`Qp::recv_queue`] and [`Cq::poller`].
    pub fn queues(&self, cq: &Cq) -> Result<SafeQueues> {
        if !self.inner.send_cq.is(cq) || !self.inner.recv_cq.is(cq) {
            return Err(Error::InvalidArgument(
                "Qp::queues needs the CQ that serves both queues of the QP (for separate CQs, \
                 take Qp::send_queue, Qp::recv_queue and each Cq::poller)"
                    .into(),
            ));
        }
        not_dc(self, "Qp::queues")?;
        self.send_queue_ready()?;
        // Refused before the send queue is taken, so that the refusal changes nothing.
        self.own_receives()?;
        let sq = self.send_queue()?;
        let rq = self.recv_queue()?;
        let poller = cq.poller()?;
        Ok(SafeQueues { sq, rq, cq: poller })
    }
}

impl Cq {
    /// The CQ's poller, for the QPs created on it, before it was taken and after; it can be
    /// taken once. A QP created later joins it, and a destroyed one leaves it, while it polls
    /// on another thread (without a lock on the poll path: `docs/architecture.md`).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyTaken`] on a second call; [`Error::Layout`] if the direct backend
    /// rejects the CQ's layout.
    pub fn poller(&self) -> Result<Poller> {
        let qps = {
            let mut reg = self
                .inner
                .registry
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if reg.poller_taken {
                return Err(Error::AlreadyTaken("CQ poller"));
            }
            reg.poller_taken = true;
            (attached(&reg), crate::qp::attached_wqs(&reg))
        };
        Ok(Poller::new(
            AnyPoller::new(self, qps.0, qps.1)?,
            self.cqe() as usize,
        ))
    }
}

impl Srq {
    /// The queue to post receives to, for every QP on the SRQ; it can be taken once.
    /// Completions of its receives arrive on the receive CQs of the QPs that consumed them
    /// (on the direct path, one CQ for all: [`QpBuilder::srq`](crate::QpBuilder::srq)).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyTaken`]; [`Error::Layout`] if the direct backend rejects the layout;
    /// [`Error::Backend`] when the provider has no `post_srq_recv` entry.
    pub fn queue(&self) -> Result<SrqQueue> {
        {
            let mut u = self.inner.use_.lock().unwrap_or_else(|p| p.into_inner());
            if u.taken {
                return Err(Error::AlreadyTaken("shared receive queue"));
            }
            u.taken = true;
        }
        match (self.inner.provider.engine(), &self.inner.state) {
            (SrqEngine::Direct(l), Some(state)) => {
                // SAFETY: the layout is the provider's for this live SRQ, kept alive by the
                // clone the handle holds beside the queue (dropped after it); the queue is
                // taken once and nothing else posts to the SRQ; `state` was made from the
                // same layout when the SRQ was created, nothing was posted since, and the
                // QPs on the SRQ all complete their receives on one CQ, whose pollers bind it
                // (`QpBuilder::build` refuses another).
                let q = unsafe { zverbs_mlx5dv::SharedRecvQueue::new(&l, state.clone())? };
                Ok(SrqQueue::new(AnySrqQueue::Direct(direct::SrqQueue {
                    q,
                    _srq: self.clone(),
                })))
            }
            (SrqEngine::Verbs(p), _) => {
                let (max_wr, max_sge) = self.caps();
                // SAFETY: a live SRQ kept alive by the handle's clone; only this queue posts
                // to it; its real scatter limit.
                let q = unsafe { crate::fallback::SrqQueue::new(p.as_ptr(), max_wr, max_sge) }
                    .ok_or_else(|| Error::Backend {
                        requested: BackendKind::Verbs,
                        reason: "the provider has no post_srq_recv entry in ibv_context.ops".into(),
                    })?;
                Ok(SrqQueue::new(AnySrqQueue::Verbs(verbs::SrqQueue {
                    q,
                    _srq: self.clone(),
                })))
            }
            (SrqEngine::Direct(_), None) => Err(Error::Backend {
                requested: BackendKind::Direct,
                reason: "the SRQ has no direct bookkeeping".into(),
            }),
        }
    }
}
