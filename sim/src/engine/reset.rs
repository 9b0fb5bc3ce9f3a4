//! Modify to RESET: a QP's device state back to what creation gave it, so that it can be
//! connected again (to the same peer or another).
//!
//! Contract: after [`Engine::reset_qp`] the QP is as after creation: not connected, its send
//! and receive consumer counters at 0 (the driver clears the doorbell record and restarts its
//! own counters, as libmlx5 does), every piece of transport state of the old incarnation gone
//! (the request in flight to a remote peer, retry and RNR counts, PSNs, the atomic results kept
//! for duplicates, injected faults). The old incarnation's work the device had not carried out
//! is discarded without a completion, as a ConnectX does: the driver drains a QP (moves it to
//! the error state and polls a flush completion for every request) before it resets it, and
//! the CQEs the device still held back for it are dropped with it. The memory of the QP is
//! the driver's as before; nothing is freed.

use super::Engine;
use crate::config::{QpStatus, SimError};

impl Engine {
    /// Resets QP `qpn` (from any state, the error state included). Returns the CQEs of its old
    /// incarnation that were held back and are now dropped.
    pub(crate) fn reset_qp(&mut self, qpn: u32) -> Result<usize, SimError> {
        let q = self.qp_index(qpn)?;
        let qp = &mut self.qps[q];
        qp.status = QpStatus::Init;
        qp.peer = None;
        qp.remote = None;
        qp.pending = None;
        qp.resend_at = None;
        qp.sq_ci = 0;
        qp.rq_ci = 0;
        qp.rnr_left = None;
        qp.retry_left = None;
        qp.fail_next = None;
        qp.drop_next_recv = false;
        qp.lose_next_ack = false;
        qp.sq_psn = 0;
        qp.rq_psn = 0;
        qp.seq_nak_sent = false;
        qp.atomic_results = [None; super::ATOMIC_RESOURCES];
        qp.atomic_next = 0;
        let (send_cq, recv_cq) = (qp.send_cq, qp.recv_cq);
        let mut dropped = self.cqs[send_cq].forget_held(qpn);
        if recv_cq != send_cq {
            dropped += self.cqs[recv_cq].forget_held(qpn);
        }
        Ok(dropped)
    }
}
