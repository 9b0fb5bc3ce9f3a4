//! Shared receive queues: one pool of receives that many QPs take their messages into.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use zverbs_mlx5dv::{SrqSlot, SrqState};

use crate::backend::BackendKind;
use crate::error::{Error, Result};
use crate::ffi::types::ibv_srq;
use crate::pd::Pd;
use crate::provider::{SrqEngine, SrqLayout, SrqProvider};
use crate::queues::{AnySrqQueue, direct, verbs};

/// A direct shared receive queue's bookkeeping, shared by its queue handle and the pollers of
/// the CQ its QPs complete their receives on.
pub type SrqStateHandle = Arc<SrqState<Box<[SrqSlot]>>>;

/// A shared receive queue (`ibv_create_srq`), destroyed on drop (`ibv_destroy_srq`) once no
/// QP uses it (QPs on it hold it alive). Cloning is cheap.
#[derive(Clone, Debug)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

#[derive(Debug)]
pub(crate) struct SrqInner {
    // Field order is drop order: the SRQ goes before its bookkeeping and its PD.
    pub(crate) provider: Box<dyn SrqProvider>,
    /// The direct path's bookkeeping (`None` on the fallback).
    state: Option<SrqStateHandle>,
    /// Whether the queue handle was taken, and the CQ every QP on the SRQ must complete its
    /// receives on: the first such QP's.
    pub(crate) use_: Mutex<SrqUse>,
    pub(crate) pd: Pd,
}

/// How an SRQ is used (see [`SrqInner::use_`]).
#[derive(Debug, Default)]
pub(crate) struct SrqUse {
    taken: bool,
    recv_cq: Option<crate::cq::Cq>,
    /// The entries `recv_cq` holds for the SRQ's receives.
    held: u32,
}

impl Drop for SrqInner {
    /// Gives back the entries its receive CQ held for it.
    fn drop(&mut self) {
        let u = self.use_.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(cq) = &u.recv_cq {
            cq.release(u.held);
        }
    }
}

impl Srq {
    /// The backend that drives its receives: the direct one when its memory layout is known
    /// ([`Srq::layout`]), the libibverbs fallback otherwise.
    pub fn backend(&self) -> BackendKind {
        match self.inner.provider.engine() {
            SrqEngine::Direct(_) => BackendKind::Direct,
            SrqEngine::Verbs(_) => BackendKind::Verbs,
        }
    }

    /// The SRQ number, where the device reports it (mlx5, the software device).
    pub fn srqn(&self) -> Option<u32> {
        self.inner.provider.srqn()
    }

    /// Receive requests and scatter entries per request the SRQ really has.
    pub fn caps(&self) -> (u32, u32) {
        self.inner.provider.caps()
    }

    /// Its memory, for the direct path: `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)` on mlx5, the
    /// software device's own layout on it; `None` on the fallback.
    pub fn layout(&self) -> Option<SrqLayout> {
        match self.inner.provider.engine() {
            SrqEngine::Direct(l) => Some(l),
            SrqEngine::Verbs(_) => None,
        }
    }

    /// The rdma-core SRQ, for the fallback's `ibv_post_srq_recv`
    /// ([`fallback::SrqQueue`](crate::fallback::SrqQueue)); `None` on the software device.
    pub fn as_raw(&self) -> Option<NonNull<ibv_srq>> {
        match self.inner.provider.engine() {
            SrqEngine::Verbs(p) => Some(p),
            SrqEngine::Direct(_) => None,
        }
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a message leaves
    /// fewer than `limit` receives posted, the device raises `IBV_EVENT_SRQ_LIMIT_REACHED`
    /// once and disarms it. 0 disarms it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a limit at or above the SRQ's size; [`Error::Verbs`] from
    /// `ibv_modify_srq`.
    pub fn arm(&self, limit: u32) -> Result<()> {
        let (max_wr, _) = self.caps();
        if limit >= max_wr.max(1) {
            return Err(Error::InvalidArgument(format!(
                "SRQ limit {limit} is not below its {max_wr} receive requests"
            )));
        }
        self.inner.provider.arm(limit)
    }

    /// The queue to post receives to, for every QP on the SRQ; it can be taken once.
    /// Completions of its receives arrive on the receive CQs of the QPs that consumed them
    /// (on the direct path, one CQ for all: [`QpBuilder::srq`](crate::QpBuilder::srq)).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyTaken`]; [`Error::Layout`] if the direct backend rejects the layout;
    /// [`Error::Backend`] when the provider has no `post_srq_recv` entry.
    pub fn queue(&self) -> Result<AnySrqQueue> {
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
                Ok(AnySrqQueue::Direct(direct::SrqQueue {
                    q,
                    _srq: self.clone(),
                }))
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
                Ok(AnySrqQueue::Verbs(verbs::SrqQueue {
                    q,
                    _srq: self.clone(),
                }))
            }
            (SrqEngine::Direct(_), None) => Err(Error::Backend {
                requested: BackendKind::Direct,
                reason: "the SRQ has no direct bookkeeping".into(),
            }),
        }
    }

    /// The direct path's bookkeeping, for the pollers of its QPs' receive CQ.
    pub(crate) fn direct_state(&self) -> Option<&SrqStateHandle> {
        self.inner.state.as_ref()
    }

    /// Records `cq` as the receive CQ of a new QP on the SRQ: every QP on it must complete its
    /// receives on the same CQ (on the direct path, its poller frees the SRQ's WQEs), which
    /// holds an entry for each receive the SRQ can hold ([`Cq::hold`](crate::Cq)), so that
    /// none of them can overrun it.
    pub(crate) fn bind_recv_cq(&self, cq: &crate::cq::Cq) -> Result<()> {
        let mut u = self.inner.use_.lock().unwrap_or_else(|p| p.into_inner());
        match &u.recv_cq {
            Some(c) if !c.is(cq) => Err(Error::InvalidArgument(
                "every QP on an SRQ must complete its receives on the same CQ".into(),
            )),
            Some(_) => Ok(()),
            None => {
                let (max_wr, _) = self.caps();
                cq.hold(max_wr, "the SRQ's receives")?;
                u.held = max_wr;
                u.recv_cq = Some(cq.clone());
                Ok(())
            }
        }
    }

    pub(crate) fn pd(&self) -> &Pd {
        &self.inner.pd
    }
}

impl Pd {
    /// A shared receive queue of at least `max_wr` receive requests of up to `max_sge`
    /// scatter entries, driven by the context's backend.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for `max_wr` 0; [`Error::Verbs`] from `ibv_create_srq`;
    /// [`Error::Backend`] when `mlx5dv_init_obj` cannot give a direct SRQ's layout.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        if max_wr == 0 {
            return Err(Error::InvalidArgument(
                "an SRQ needs at least one receive request".into(),
            ));
        }
        let ctx = self.context();
        let direct = crate::backend::want_direct(
            ctx.backend_choice(),
            &ctx.inner.provider.direct_support(),
        )?;
        let provider = self.inner.provider.create_srq(max_wr, max_sge, direct)?;
        let state = match provider.engine() {
            SrqEngine::Direct(l) => {
                let slots = (0..l.wqe_cnt).map(|_| SrqSlot::new()).collect();
                // SAFETY: the provider's layout of this new SRQ (nothing posted, its free list
                // whole), whose ring lives as long as the provider, which the `SrqInner`
                // drops only after every holder of the state (queue, pollers: each holds the
                // SRQ or a QP that holds it).
                Some(Arc::new(unsafe { SrqState::new(&l, slots)? }))
            }
            SrqEngine::Verbs(_) => None,
        };
        Ok(Srq {
            inner: Arc::new(SrqInner {
                provider,
                state,
                use_: Mutex::new(SrqUse::default()),
                pd: self.clone(),
            }),
        })
    }
}
