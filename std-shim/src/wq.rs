//! Receive work queues (`ibv_create_wq`): the receive side of the standard raw Ethernet set-up,
//! an RSS QP ([`RssQp`](crate::RssQp)) spreading the frames its flow rules take over the work
//! queues of its indirection table.
//!
//! A work queue is ordinary (one packet per WQE, [`WqShape::Ordinary`]: posted to through a
//! [`RecvQueue`], on either backend) or striding ([`WqShape::Striding`]: many packets per
//! WQE, created with `mlx5dv_create_wq`'s striding parameters, driven by the direct backend
//! only: libibverbs cannot post or poll one, brief §0 finding 6). It is created ready
//! (`IBV_WQS_RDY`): frames are placed as soon as receives are posted.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use zverbs_mlx5dv::{QpLayout, RqSlot, RqState};

use crate::bindings::{WqBinding, WqRq};
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::fallback::RqShared;
use crate::pd::Pd;
use crate::provider::{WqEngine, WqProvider};
use crate::queues::{AnyRecvQueue, direct, verbs};
use crate::rq::RecvQueue;
use crate::types::backend::BackendKind;
use crate::types::eth::WqShape;

/// A receive work queue, destroyed when the last handle (and every RSS QP over it) is gone.
/// Cloning is cheap.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// use zverbs::{RxHash, WqShape};
///
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &Default::default())?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.cq_builder().cqe(256).build()?;
/// let wq = pd.create_wq(&cq, 64, WqShape::Ordinary { max_sge: 1 })?;
/// let rss = pd.create_rss_qp(1, &[&wq], &RxHash::default())?; // the standard receive set-up
/// let mut rq = wq.recv_queue()?; // post receives here; completions go to `cq`
/// # let _ = (rss, &mut rq);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct WorkQueue {
    pub(crate) inner: Arc<WqInner>,
}

#[derive(Debug)]
pub(crate) struct WqInner {
    // Field order is drop order: the queue goes before its bookkeeping, its CQ and its PD.
    pub(crate) provider: Box<dyn WqProvider>,
    pub(crate) binding: Arc<WqBinding>,
    shape: WqShape,
    /// Entries its CQ holds for it.
    hold: u32,
    taken: Mutex<bool>,
    pub(crate) cq: Cq,
    pub(crate) pd: Pd,
}

impl Drop for WqInner {
    fn drop(&mut self) {
        match self.shape {
            WqShape::Ordinary { .. } => self.cq.release(self.hold),
            WqShape::Striding(_) => self.cq.release_exclusive(),
        }
        if self.binding.sole_receiver.load(Ordering::Acquire) {
            self.cq.release_sole_receiver();
        }
    }
}

impl Pd {
    /// A receive work queue of at least `max_wr` WQEs of `shape`, whose completions go to
    /// `cq`, ready to take frames. `cq` must hold an entry for every completion the queue
    /// can have outstanding: one per WQE of an ordinary queue, one per stride of a striding
    /// one (a ConnectX writes one CQE per packet, and a packet may take a single stride).
    ///
    /// # Errors
    ///
    /// [`Error::StridingNeedsDirect`] for a striding queue on a CQ of the libibverbs
    /// fallback; [`Error::InvalidArgument`] for strides out of a ConnectX's range or a CQ of
    /// another context; [`Error::CqTooSmall`]; [`Error::NoRawPacket`] for a device without
    /// work queues; [`Error::Verbs`] from `ibv_create_wq` / `mlx5dv_create_wq` and
    /// `ibv_modify_wq`.
    pub fn create_wq(&self, cq: &Cq, max_wr: u32, shape: WqShape) -> Result<WorkQueue> {
        if !Arc::ptr_eq(&cq.context().inner, &self.context().inner) {
            return Err(Error::InvalidArgument(
                "the CQ belongs to another context than the PD".into(),
            ));
        }
        let direct = cq.backend().kind == BackendKind::Direct;
        if let WqShape::Striding(s) = shape {
            s.check()
                .map_err(|why| Error::InvalidArgument(why.into()))?;
            if !direct {
                return Err(Error::StridingNeedsDirect(format!(
                    "the CQ is driven by the {} backend",
                    cq.backend().kind
                )));
            }
        }
        if max_wr == 0 {
            return Err(Error::InvalidArgument(
                "a work queue needs at least one WQE".into(),
            ));
        }
        let provider = self
            .inner
            .provider
            .create_wq(&*cq.inner.provider, max_wr, shape, direct)?;
        let (wqe_cnt, _) = provider.caps();
        let hold = match shape {
            WqShape::Ordinary { .. } => {
                cq.hold(wqe_cnt, "the work queue's receives")?;
                wqe_cnt
            }
            // One completion per packet, and a packet may take a single stride; the poll of
            // a striding queue takes every receive completion of its CQ as its own.
            WqShape::Striding(s) => {
                let n = wqe_cnt.saturating_mul(s.num_strides());
                cq.hold_exclusive(n, "a striding work queue")?;
                n
            }
        };
        let release = || match shape {
            WqShape::Ordinary { .. } => cq.release(hold),
            WqShape::Striding(_) => cq.release_exclusive(),
        };
        let rq = match provider.engine() {
            WqEngine::Direct { layout, .. } => {
                let slots = (0..layout.wqe_cnt.max(1)).map(|_| RqSlot::new()).collect();
                match RqState::new(slots) {
                    Ok(state) => WqRq::Direct(Arc::new(state)),
                    Err(e) => {
                        release();
                        return Err(e.into());
                    }
                }
            }
            WqEngine::Verbs(_) => WqRq::Verbs(Arc::new(RqShared::new(wqe_cnt))),
        };
        let inner = Arc::new(WqInner {
            binding: Arc::new(WqBinding {
                // What its completions name it by on the direct poller (its user index), and
                // by its key on the fallback's.
                wqn: provider.user_index().unwrap_or(provider.wqn()),
                rq,
                sole_receiver: std::sync::atomic::AtomicBool::new(false),
            }),
            provider,
            shape,
            hold,
            taken: Mutex::new(false),
            cq: cq.clone(),
            pd: self.clone(),
        });
        inner.provider.ready()?;
        if let WqShape::Ordinary { .. } = shape {
            // Its receives complete through the CQ's poller (a striding queue polls its own).
            let mut reg = cq.inner.registry.lock().unwrap_or_else(|p| p.into_inner());
            reg.wqs.push(Arc::downgrade(&inner.binding));
            let reached = crate::qp::republish(cq, &mut reg);
            drop(reg);
            drop(reached);
        }
        Ok(WorkQueue { inner })
    }
}

impl WorkQueue {
    /// The WQ number (what an indirection table names).
    pub fn wqn(&self) -> u32 {
        self.inner.provider.wqn()
    }

    /// What its WQEs are.
    pub fn shape(&self) -> WqShape {
        self.inner.shape
    }

    /// WQEs and scatter entries per WQE it really has.
    pub fn caps(&self) -> (u32, u32) {
        self.inner.provider.caps()
    }

    /// The CQ its completions go to.
    pub fn cq(&self) -> &Cq {
        &self.inner.cq
    }

    /// The receive queue of an ordinary work queue, for posting (once): one frame per
    /// receive, its completion on [`WorkQueue::cq`]'s poller.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyTaken`]; [`Error::InvalidArgument`] for a striding queue (its WQEs
    /// are posted by the direct backend's striding queue); [`Error::Layout`] when the direct
    /// backend rejects the ring; [`Error::SoleReceiverCq`] on the direct backend of an
    /// rdma-core device when its CQ serves other queues: its completions name it only by a
    /// user index libmlx5 chose, so its CQ serves it alone, and from then on takes no other
    /// queue.
    pub fn recv_queue(&self) -> Result<RecvQueue> {
        let WqShape::Ordinary { .. } = self.inner.shape else {
            return Err(Error::InvalidArgument(
                "a striding work queue is posted to by the direct backend's striding queue, \
                 not a RecvQueue"
                    .into(),
            ));
        };
        if let (WqEngine::Direct { .. }, None) = (
            self.inner.provider.engine(),
            self.inner.provider.user_index(),
        ) {
            // Its completions name it only by libmlx5's user index: the CQ must serve it
            // alone, and the direct poller takes every receive completion as its.
            self.inner.cq.claim_sole_receiver(
                Arc::as_ptr(&self.inner.binding).cast(),
                self.inner.hold,
                &self.inner.binding.sole_receiver,
                "an ordinary work queue's receive queue",
            )?;
        }
        self.take()?;
        let (wqe_cnt, max_sge) = self.caps();
        let owner = self.inner.clone() as Arc<dyn std::fmt::Debug + Send + Sync>;
        let q = match (self.inner.provider.engine(), &self.inner.binding.rq) {
            (WqEngine::Direct { layout, dbrec }, WqRq::Direct(state)) => {
                // A work queue's ring is a QP's receive ring without a send ring: its
                // doorbell record is one word, the receive counter, as the QP's first.
                let as_qp = QpLayout {
                    qpn: self.wqn(),
                    dbrec,
                    sq: zverbs_mlx5dv::WqLayout {
                        buf: layout.buf,
                        wqe_cnt: 0,
                        stride: 64,
                    },
                    rq: layout,
                    bf: zverbs_mlx5dv::BfLayout {
                        reg: layout.buf,
                        size: 0,
                    },
                };
                // SAFETY: the ring and record are the device's for this live work queue,
                // kept alive by `owner`, held beside the queue (dropped after it); this is
                // its only receive queue (taken once); the state is bound to its CQ's poller
                // only; the queue is new.
                let mut q = unsafe { zverbs_mlx5dv::RecvQueue::new(&as_qp, state.clone())? };
                q.limit_outstanding(wqe_cnt);
                AnyRecvQueue::Direct(direct::RecvQueue { q, _owner: owner })
            }
            (WqEngine::Verbs(wq), WqRq::Verbs(shared)) => {
                // SAFETY: a live WQ kept alive by `owner`; only this queue posts to it; the
                // state is bound to its CQ's poller only.
                let q = unsafe {
                    crate::fallback::RecvQueue::new_wq(
                        wq.as_ptr(),
                        wqe_cnt,
                        max_sge,
                        shared.clone(),
                    )
                }
                .ok_or_else(|| crate::queues::no_entry("ibv_wq.post_recv"))?;
                AnyRecvQueue::Verbs(verbs::RecvQueue { q, _owner: owner })
            }
            _ => {
                return Err(Error::Backend {
                    requested: self.inner.cq.backend().kind,
                    reason: "the work queue's engine and its bookkeeping differ".into(),
                });
            }
        };
        Ok(RecvQueue::new(q))
    }

    /// Marks the queue's data-path handle taken, or refuses.
    pub(crate) fn take(&self) -> Result<()> {
        let mut t = self.inner.taken.lock().unwrap_or_else(|p| p.into_inner());
        if *t {
            return Err(Error::AlreadyTaken("work queue"));
        }
        *t = true;
        Ok(())
    }
}
