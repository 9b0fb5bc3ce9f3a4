//! Shared receive queues: one pool of receives that many QPs take their messages into.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use zverbs_mlx5dv::{SrqSlot, SrqState};

use crate::backend::BackendKind;
pub use crate::bindings::SrqStateHandle;
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::provider::{SrqEngine, SrqLayout, SrqProvider};
use zverbs_ffi::types::ibv_srq;

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
    pub(crate) state: Option<SrqStateHandle>,
    /// Whether the queue handle was taken, and the CQ every QP on the SRQ must complete its
    /// receives on: the first such QP's.
    pub(crate) use_: Mutex<SrqUse>,
    pub(crate) pd: Pd,
}

/// How an SRQ is used (see [`SrqInner::use_`]).
#[derive(Debug, Default)]
pub(crate) struct SrqUse {
    pub(crate) taken: bool,
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
    /// ([`backend::verbs::raw::SrqQueue`](crate::backend::verbs::raw::SrqQueue)); `None` on the software device.
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
