//! The dynamically connected transport: DC targets (DCTs) and the DC initiator's requester.
//!
//! Contract: a DCI is a QP with no peer; each of its WQEs names a target in its datagram
//! segment (the DCT number in `dqp_dct`, the access key in `key.dc_key`) and is otherwise an
//! RC WQE: the requester checks its own side as for RC, then the target carries it out as an
//! RC responder would ([`Engine::respond`]), and the DCI completes it with the answer. Each
//! request opens its own connection at the target, so a target takes requests from any number
//! of initiators in any order (its expected PSN is the request's). A target that does not
//! exist or is not ready, and a request whose access key is not the target's, is dropped
//! silently at the target, as a ConnectX drops it (the key violation is an event at the
//! target's side): the initiator's retries run out and its WQE completes with "transport retry
//! counter exceeded", vendor syndrome 0x81, as a ConnectX reports it; the drop is counted in
//! [`Stats`](crate::Stats). An error at the target (remote access, a receive too short) fails
//! the initiator's WQE and moves the DCI to the error state; the target stays ready for the
//! others. Targets are in this device: an address vector whose LID is another instance's
//! reaches no target.

use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::prm::wqe::DatagramSeg;

use super::requester::Outcome;
use super::{Engine, Fault, RETRY_EXC};
use crate::config::{DctConfig, QpConfig, QpStatus, QpType, SimDct, SimError};
use crate::vendor;
use crate::wqe::Wqe;

impl Engine {
    /// Creates a DC target on shared receive queue `cfg.srq`, completing on `cfg.cq`, in
    /// INIT ([`Engine::ready_dct`] moves it to RTR).
    pub(crate) fn create_dct(&mut self, cfg: DctConfig) -> Result<SimDct, SimError> {
        // A target has no send queue; the device's QP table holds it with the smallest ring.
        let qp = QpConfig {
            send_cq: cfg.cq,
            recv_cq: cfg.cq,
            max_send_wr: 1,
            max_send_sge: 1,
            max_inline_data: 0,
            max_recv_wr: 0,
            max_recv_sge: 1,
            sig_all: false,
            bf_size: 0,
            rnr_retry: 0,
        };
        let q = self.create_qp(qp, QpType::Dct, Some(cfg.srq))?;
        let i = self.qp_index(q.qpn)?;
        self.qps[i].dc_key = cfg.access_key;
        Ok(SimDct {
            dctn: q.qpn,
            access_key: cfg.access_key,
        })
    }

    /// Gives DC target `dctn` (driven over memory someone else allocated) its access key.
    pub(crate) fn set_dct_key(&mut self, dctn: u32, access_key: u64) -> Result<(), SimError> {
        let qp = self.qp_mut(dctn)?;
        if qp.qp_type != QpType::Dct {
            return Err(SimError::InvalidConfig("not a DC target"));
        }
        qp.dc_key = access_key;
        Ok(())
    }

    /// Moves DC target `dctn` to RTR (through INIT): it serves requests from now on.
    pub(crate) fn ready_dct(&mut self, dctn: u32) -> Result<(), SimError> {
        self.ready_dc(dctn, QpType::Dct, "not a DC target")
    }

    /// Moves DC initiator `qpn` to RTS (through INIT and RTR, with no remote QP number): it
    /// executes its sends from now on.
    pub(crate) fn ready_dci(&mut self, qpn: u32) -> Result<(), SimError> {
        self.ready_dc(qpn, QpType::Dci, "not a DC initiator")
    }

    fn ready_dc(&mut self, qpn: u32, want: QpType, what: &'static str) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn)?;
        if qp.qp_type != want {
            return Err(SimError::InvalidConfig(what));
        }
        if qp.status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        // Internally "ready" is RTS for both: a target's RTR serves requests as an RC
        // responder in RTS does, and it has no send queue to run.
        qp.status = QpStatus::Rts;
        Ok(())
    }

    /// The table entry of the ready DC target `dctn` of this device, if any.
    fn dct_index(&self, dctn: u32) -> Option<usize> {
        let p = self.qp_index(dctn).ok()?;
        let qp = &self.qps[p];
        (qp.qp_type == QpType::Dct && qp.status == QpStatus::Rts).then_some(p)
    }

    /// The target of DCI WQE `w` when it lies in another device instance (a LID other than
    /// this one's, with a wire to reach it): `(lid, dctn, access_key)`. A NOP has none.
    pub(super) fn remote_dc_target(&self, w: &Wqe) -> Option<(u16, u32, u64)> {
        if w.opcode == opcode::NOP || self.wire.is_none() {
            return None;
        }
        let av = DatagramSeg::new_unchecked(&w.av[..]);
        let dlid = av.rlid();
        (dlid != 0 && dlid != self.lid()).then(|| (dlid, av.dqp(), av.dc_key()))
    }

    /// The DC target `dctn` of this device for a request from another process carrying
    /// `key`: ready for it (a new connection, expecting the request's `psn`), or the fault the
    /// initiator reports (dropped at the target: its retries run out).
    pub(super) fn admit_dc(&mut self, dctn: u32, key: u64, psn: u32) -> Result<usize, Fault> {
        let Some(p) = self.dct_index(dctn) else {
            self.stats.dc_no_target += 1;
            return Err(Fault::new(RETRY_EXC, vendor::RETRY));
        };
        if self.qps[p].dc_key != key {
            self.stats.dc_key_violations += 1;
            return Err(Fault::new(RETRY_EXC, vendor::RETRY));
        }
        let target = &mut self.qps[p];
        target.rq_psn = psn;
        target.seq_nak_sent = false;
        Ok(p)
    }

    /// Executes DCI `q`'s WQE `w` against the target its datagram segment names.
    pub(super) fn execute_dc(&mut self, q: usize, w: &Wqe) -> Outcome {
        if w.opcode == opcode::NOP {
            return Outcome::Done(0);
        }
        let av = DatagramSeg::new_unchecked(&w.av[..]);
        if av.rlid() != self.lid() {
            self.stats.dc_no_target += 1;
            return Outcome::Fail(Fault::new(RETRY_EXC, vendor::RETRY));
        }
        // A new connection at the target for each request: it expects the request's PSN.
        match self.admit_dc(av.dqp(), av.dc_key(), self.qps[q].sq_psn) {
            Ok(p) => self.run_local(q, p, w),
            Err(f) => Outcome::Fail(f),
        }
    }
}
