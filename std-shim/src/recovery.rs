//! Recovery: drain a queue pair in the error state, reset it, and connect it again (to the same
//! peer or another).
//!
//! A QP that meets an error (a remote access error, retries exceeded, ...) or that the caller
//! moves to the error state ([`Qp::to_error`]) completes every request it was given with a
//! completion of its own: the failed one with its error, every other send and receive with
//! [`WcStatus::WrFlushErr`](zverbs_core::WcStatus). Its queues refuse new posts from then on
//! ([`PostError::NotReady`](zverbs_core::PostError), nothing written): the poller closes
//! their gates when it meets the error completion, and the transition does too.
//!
//! Once every completion was polled, [`Qp::reset`] moves it to RESET. The device restarts its
//! counters at 0, and so do the queues: on the direct path the doorbell record is cleared and
//! the poller's credit words are set back to 0, then each queue's gate is closed at the next
//! incarnation; the send and receive queue handles keep working, and restart their own
//! counters (producer counter, cached limits, requests written and not rung) the first time
//! they post after the QP is back in INIT (receives) or RTS (sends). The fallback's counters
//! are its own (its `wr_id`s), not the device's: they go on, and only the gates change.
//!
//! **Completions of the old incarnation are delivered before the reset, never discarded.**
//! libmlx5 removes a reset QP's CQEs from its CQ (`__mlx5_cq_clean`, under the CQ's lock),
//! except for a CQ it handed to a direct user (`mlx5dv_init_obj`), which it leaves alone: a
//! direct poller owns its ring and takes no lock. So the reset waits for the poller instead: it
//! is refused ([`Error::NotDrained`]) while a request the device was given has not completed
//! (on the direct path, the doorbell record's counters against the poller's credit words; on
//! the fallback, the counters the poster and the poller publish). No CQE of the old
//! incarnation is then left in the CQ, and after RESET the device writes none, so the new
//! incarnation's completions are the only ones its queues' bookkeeping meets.
//!
//! Contract: no post to the QP is in progress on another thread while it is reset (the
//! queues are owned by their threads; a post racing the reset could publish to the old
//! incarnation). In the error state every outstanding request is flushed with a completion,
//! signaled or not; requests that completed *unsignaled* before the error, with no signaled
//! request after them, never get a completion and keep the send queue from looking drained:
//! signal the last request of each batch (the usual selective-signaling pattern does).

use crate::error::{Error, Result};
use crate::ffi::types::{ibv_qp_attr, qp_attr_mask as m};
use crate::qp::{Qp, QpData, QpState};

impl Qp {
    /// Moves the QP to the error state (`ibv_modify_qp` to `IBV_QPS_ERR`): every request it
    /// holds completes with a flush completion, and its queues refuse posts until it is
    /// [reset](Qp::reset) and connected again. The first step of draining it.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn to_error(&self) -> Result<()> {
        let mut attr = ibv_qp_attr {
            qp_state: QpState::Error.to_raw(),
            ..Default::default()
        };
        self.modify_raw(&mut attr, m::IBV_QP_STATE)
    }

    /// Send-queue slots and receives the device was given whose completions have not been
    /// polled yet: `(0, 0)` when the QP is drained. Send slots are basic blocks on the direct
    /// path and requests on the fallback.
    pub fn outstanding(&self) -> (u32, u32) {
        match &self.inner.data {
            QpData::Direct(d) => {
                // SAFETY: the layout is the live QP's (this handle keeps it alive).
                let (rq_head, sq_pi) = unsafe { zverbs_mlx5dv::doorbell_counters(&d.layout) };
                let send = sq_pi.wrapping_sub(d.sq_state.retired16());
                let recv = if self.inner.srq.is_some() {
                    0
                } else {
                    rq_head.wrapping_sub(d.rq_state.retired16())
                };
                (u32::from(send), u32::from(recv))
            }
            QpData::Verbs(v) => (v.sq.outstanding(), v.rq.outstanding()),
        }
    }

    /// Whether every request the device was given has completed ([`Qp::outstanding`] is
    /// `(0, 0)`): the QP may be [reset](Qp::reset).
    pub fn is_drained(&self) -> bool {
        self.outstanding() == (0, 0)
    }

    /// Moves a drained QP to RESET (`ibv_modify_qp` to `IBV_QPS_RESET`), from any state, the
    /// error state included, so that it can be connected again ([`Qp::connect`] or
    /// [`Qp::to_init`], to any peer). Its send and receive queue handles and its poller stay
    /// valid: the queues restart at 0 with the device (see the module docs of `recovery.rs`
    /// and `docs/usage.md`, "Recovery").
    ///
    /// # Errors
    ///
    /// [`Error::NotDrained`] while completions of the old incarnation are still to be polled
    /// (nothing changes); [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn reset(&self) -> Result<()> {
        let (send, recv) = self.outstanding();
        if send != 0 || recv != 0 {
            return Err(Error::NotDrained { send, recv });
        }
        self.close_gates();
        let mut attr = ibv_qp_attr {
            qp_state: QpState::Reset.to_raw(),
            ..Default::default()
        };
        self.modify_raw(&mut attr, m::IBV_QP_STATE)?;
        if let QpData::Direct(d) = &self.inner.data {
            // SAFETY: the QP is in RESET and drained: the device writes no CQE for it and the
            // poller has retired every WQE it was given, so nothing touches the credit words;
            // the layout is the live QP's. (Contract of this call: no post in progress.)
            unsafe {
                zverbs_mlx5dv::clear_doorbell_record(&d.layout);
                d.sq_state.restart();
                d.rq_state.restart();
            }
        }
        Ok(())
    }

    /// Closes both queues' gates: posts are refused from now on.
    fn close_gates(&self) {
        match &self.inner.data {
            QpData::Direct(d) => {
                d.sq_state.gate().close();
                d.rq_state.gate().close();
            }
            QpData::Verbs(v) => {
                v.sq.gate().close();
                v.rq.gate().close();
            }
        }
    }

    /// After a transition to `state`: opens the receive queue's gate at INIT, the send
    /// queue's at RTS, closes both in the error state.
    pub(crate) fn gates_after(&self, state: u32) {
        let (sq, rq) = match &self.inner.data {
            QpData::Direct(d) => (d.sq_state.gate(), d.rq_state.gate()),
            QpData::Verbs(v) => (v.sq.gate(), v.rq.gate()),
        };
        match QpState::from_raw(state) {
            QpState::Init => rq.open(),
            QpState::Rts => sq.open(),
            QpState::Error | QpState::Reset => {
                sq.close();
                rq.close();
            }
            _ => {}
        }
    }

    /// The state, with the error state the poller saw: a QP last moved to INIT, RTR or RTS by
    /// this library whose queue the poller closed after an error completion is in the error
    /// state.
    pub(crate) fn observed_state(&self, last: u32) -> QpState {
        let state = QpState::from_raw(last);
        let (sq, rq) = match &self.inner.data {
            QpData::Direct(d) => (d.sq_state.gate(), d.rq_state.gate()),
            QpData::Verbs(v) => (v.sq.gate(), v.rq.gate()),
        };
        let closed = match state {
            QpState::Rts => !sq.is_open() || (self.inner.srq.is_none() && !rq.is_open()),
            QpState::Init | QpState::Rtr => self.inner.srq.is_none() && !rq.is_open(),
            _ => false,
        };
        if closed { QpState::Error } else { state }
    }
}
