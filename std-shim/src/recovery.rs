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
//! **Requests that completed unsignaled.** In the error state every outstanding request is
//! flushed with a completion, signaled or not. Requests the device had carried out
//! *unsignaled* before the error, with no signaled request after them, never get one (no
//! device writes it), and would keep the send queue from looking drained for ever. So a reset
//! refused with send requests outstanding, on a QP the device has in the error state, posts a
//! drain marker once per incarnation (`zverbs_mlx5dv::post_drain_marker`, a NOP; on the
//! fallback a zero-length WRITE): the device flushes it, and its completion (a flush with
//! `wr_id` [`DRAIN_WR_ID`](crate::DRAIN_WR_ID)) retires everything before it. `to_error`, then
//! polling and resetting until the reset is accepted, always ends.
//!
//! **A new PSN.** Each reset draws a new first PSN ([`Qp::psn`], announced by
//! [`Qp::endpoint`]), never the last one's: the peer that connects to the new endpoint
//! expects it, and a late packet of the old connection is not taken for the new one's.
//!
//! Contract: no post to the QP is in progress on another thread while it is reset (the
//! queues are owned by their threads; a post racing the reset could publish to the old
//! incarnation, or meet the drain marker).

use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::provider::QpEngine;
use crate::qp::{DirectRegister, Qp, QpData};
use crate::types::endpoint::random_psn;
use crate::types::qp::QpState;
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask as m};

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
    /// [`Qp::to_init`]) with a new first PSN ([`Qp::psn`], which [`Qp::endpoint`] announces).
    /// Its send and receive queue handles and its poller stay valid: the queues restart at 0
    /// with the device (see the module docs of `recovery.rs` and `docs/usage.md`,
    /// "Recovery").
    ///
    /// Refused while completions are still to come. When the device has the QP in the error
    /// state and send requests are not retired, the first refusal posts a drain marker: the
    /// requests that completed unsignaled get no completion of their own, and the marker's
    /// flush (a completion with `wr_id` [`DRAIN_WR_ID`](crate::DRAIN_WR_ID)) retires them.
    /// Poll, and call `reset` again.
    ///
    /// # Errors
    ///
    /// [`Error::NotDrained`] while completions of the old incarnation are still to be polled
    /// (nothing changes but the marker); [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn reset(&self) -> Result<()> {
        let (send, recv) = self.outstanding();
        if send != 0 || recv != 0 {
            if send != 0 {
                self.post_drain_marker();
            }
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
        self.inner.drain_marker.store(false, Ordering::Release);
        // A new incarnation sends from a new PSN, never the last one's: a late packet of the
        // old connection is not taken for the new one's, and the peer that connects to the
        // new `endpoint()` expects the PSN the new incarnation sends from.
        let old = self.inner.psn.load(Ordering::Acquire);
        let psn = loop {
            let p = random_psn();
            if p != old {
                break p;
            }
        };
        self.inner.psn.store(psn, Ordering::Release);
        Ok(())
    }

    /// Posts a drain marker (`zverbs_mlx5dv::post_drain_marker`), once per incarnation, to a QP
    /// the device has in the error state with send requests not retired: when the last of them
    /// completed unsignaled, no completion would ever retire them, and the marker's flush does
    /// (a completion with `wr_id` [`DRAIN_WR_ID`](crate::DRAIN_WR_ID)). Under `reset`'s
    /// contract: no post to the QP in progress.
    fn post_drain_marker(&self) {
        if self.state() != QpState::Error || self.inner.drain_marker.swap(true, Ordering::AcqRel) {
            return;
        }
        // The device may have moved the QP to the error state with no completion of its own
        // (as a responder): its queues refuse posts from now on, so that none can follow the
        // marker into its slot.
        self.close_gates();
        let posted = match &self.inner.data {
            QpData::Direct(d) => {
                let shared = match &d.register {
                    DirectRegister::Shared(r) => Some(&**r.bf()),
                    DirectRegister::DoorbellOnly | DirectRegister::Dedicated => None,
                };
                // SAFETY: the layout and send state are the live QP's (this handle keeps it
                // alive), its register held as its send queue holds it; the device has the QP
                // in the error state and (contract of `reset`) no post is in progress, nor
                // will one be until the QP is reset and connected again.
                unsafe { zverbs_mlx5dv::post_drain_marker(&d.layout, &d.sq_state, shared) }
                    .unwrap_or(false)
            }
            QpData::Verbs(v) => match self.inner.provider.engine() {
                QpEngine::Verbs(qp) => {
                    // SAFETY: as above, for the live QP libibverbs posts to, whose send queue
                    // `v.sq` serves.
                    unsafe { crate::fallback::post_drain_marker(qp.as_ptr(), &v.sq) }
                        .unwrap_or(false)
                }
                QpEngine::Direct(_) => false,
            },
        };
        if !posted {
            // No room, or refused: the next refused reset tries again.
            self.inner.drain_marker.store(false, Ordering::Release);
        }
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
