//! The dynamically connected transport, as the kernel answers libmlx5 for it: DC initiators
//! and targets are `IBV_QPT_DRIVER` QPs whose driver command says which
//! (`MLX5_QP_FLAG_TYPE_DCI` / `MLX5_QP_FLAG_TYPE_DCT`). An initiator is created as an RC QP
//! is (libmlx5's rings), then RESET → INIT → RTR → RTS with no remote QP number. A target has
//! no rings, carries the access key in the command, takes its receives from an SRQ, goes
//! RESET → INIT → RTR and no further, and gets its number at RTR: the answer to the extended
//! modify carries it (`mlx5_ib_modify_qp_resp.dctn`), as a ConnectX's kernel driver creates
//! the target in the device only then. The create answer's QP number is 0 for a target.

use std::ptr::NonNull;

use zverbs_mlx5dv::{BfLayout, QpLayout, WqLayout};
use zverbs_sim::{QpType, RNR_RETRY_INFINITE};

use super::errno;
use super::{Emu, Qp, Res, sim_errno};
use crate::abi::{self, get, mask, put, qps};

/// The kind of DC QP the driver command's `flags` ask for.
pub(super) fn kind(flags: u32) -> Result<QpType, i32> {
    use abi::mlx5_create_qp as m;
    match flags & (m::FLAG_TYPE_DCT | m::FLAG_TYPE_DCI) {
        m::FLAG_TYPE_DCT => Ok(QpType::Dct),
        m::FLAG_TYPE_DCI => Ok(QpType::Dci),
        _ => Err(errno::EINVAL),
    }
}

impl Emu {
    /// `CREATE_QP` of a DC target: its receive CQ, SRQ and access key from the command; the
    /// device drives it over stand-in rings of the emulator's own.
    pub(super) fn create_dct(
        &self,
        fd: i32,
        i: &[u8],
        extended: bool,
        d: &[u8],
        o: &mut [u8],
    ) -> Res {
        use abi::create_qp as f;
        use abi::mlx5_create_qp as m;
        let at = |off: usize| if extended { off - f::EX_SHIFT } else { off };
        if get::<1>(i, at(f::IS_SRQ)) == 0 {
            // A target receives through an SRQ only (libmlx5 checks it too).
            return Err(errno::EINVAL);
        }
        let srq_h = get::<4>(i, at(f::SRQ)) as u32;
        let send_h = get::<4>(i, at(f::SEND_CQ)) as u32;
        let recv_h = get::<4>(i, at(f::RECV_CQ)) as u32;
        let access_key = get::<8>(d, m::ACCESS_KEY);
        let uidx = get::<4>(d, m::UIDX) as u32;
        let mut ctl = self.ctl();
        let (Some(&send_cq), Some(&recv_cq)) = (ctl.cqs.get(&send_h), ctl.cqs.get(&recv_h)) else {
            return Err(errno::EINVAL);
        };
        let srqn = *ctl.srqs.get(&srq_h).ok_or(errno::EINVAL)?;
        let qpn = ctl.next_qpn;
        let mut mem = Box::new([0u64; 9]);
        let base = NonNull::from(&mut mem[..]).cast::<u8>();
        // SAFETY: 72 bytes: one block at 0..64, the doorbell record at 64..72, 8-aligned.
        let dbrec = unsafe { base.add(64) }.cast::<u32>();
        let layout = QpLayout {
            qpn,
            dbrec,
            sq: WqLayout {
                buf: base,
                wqe_cnt: 1,
                stride: 64,
            },
            rq: WqLayout {
                buf: base,
                wqe_cnt: 0,
                stride: 16,
            },
            bf: BfLayout { reg: base, size: 0 },
        };
        // SAFETY: the memory is kept in the emulator's table until after DESTROY_QP, when the
        // device has forgotten the QP; nothing but the device reads it (the record stays 0).
        unsafe {
            self.dev.create_qp_external_ext(
                &layout,
                send_cq,
                recv_cq,
                RNR_RETRY_INFINITE,
                QpType::Dct,
                Some(srqn),
            )
        }
        .map_err(sim_errno)?;
        self.dev.set_dct_key(qpn, access_key).map_err(sim_errno)?;
        self.dev.set_user_index(qpn, uidx).map_err(sim_errno)?;
        ctl.next_qpn += 1;
        ctl.dct_mem.insert(qpn, mem);
        let h = ctl.handle();
        ctl.qps.insert(
            h,
            Qp {
                qpn,
                send_cq,
                recv_cq,
                state: qps::RESET,
                fd,
                dc: Some(QpType::Dct),
                ..Qp::default()
            },
        );
        put::<4>(o, 0, u64::from(h));
        // The number is the target's from RTR on (the modify's answer); none yet.
        put::<4>(o, 4, 0);
        if extended {
            put::<4>(o, f::EX_R_RESPONSE_LENGTH, o.len() as u64);
        }
        crate::log(format_args!(
            "  DCT {qpn:#x} (number given at RTR) on SRQ {srqn:#x}, key {access_key:#x}"
        ));
        Ok(())
    }

    /// A DC QP's transitions, after `modify_qp` recorded the attributes: a target serves from
    /// RTR on and goes no further; an initiator sends from RTS on, from its send PSN, with no
    /// remote QP number.
    pub(super) fn modify_dc(&self, qp: &mut Qp, m: u32, kind: QpType) -> Res {
        if m & mask::STATE == 0 {
            return Ok(());
        }
        let qpn = qp.qpn;
        match (qp.state, kind) {
            (qps::INIT, _) => Ok(()),
            (qps::RTR, QpType::Dct) => self.dev.ready_dct(qpn).map_err(sim_errno),
            (qps::RTR, _) => Ok(()),
            (qps::RTS, QpType::Dci) => {
                self.dev.ready_dci(qpn).map_err(sim_errno)?;
                if m & mask::SQ_PSN != 0 {
                    self.dev
                        .set_sq_psn(qpn, qp.sq_psn & 0xff_ffff)
                        .map_err(sim_errno)?;
                }
                if m & mask::RETRY_CNT != 0 {
                    self.dev
                        .set_retry_cnt(qpn, qp.retry_cnt.min(7))
                        .map_err(sim_errno)?;
                }
                if m & mask::TIMEOUT != 0 {
                    self.dev
                        .set_timeout(qpn, qp.timeout & 0x1f)
                        .map_err(sim_errno)?;
                }
                if m & mask::RNR_RETRY != 0 {
                    self.dev
                        .set_rnr_retry(qpn, qp.rnr_retry.min(7))
                        .map_err(sim_errno)?;
                }
                Ok(())
            }
            // A target stops at RTR, as the kernel has it.
            (qps::RTS, _) => Err(errno::EINVAL),
            (qps::ERR, _) => self.dev.set_error(qpn).map_err(sim_errno),
            (qps::RESET, _) => self.dev.reset_qp(qpn).map(drop).map_err(sim_errno),
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// The driver's answer to an extended modify that moved a DC target to RTR
    /// (`mlx5_ib_modify_qp_resp`: its length, then the target's number).
    pub(super) fn dct_modify_answer(&self, i: &[u8], drv_out: &mut [u8]) {
        let h = get::<4>(i, abi::modify_qp::QP_HANDLE) as u32;
        let m = get::<4>(i, abi::modify_qp::ATTR_MASK) as u32;
        let ctl = self.ctl();
        let Some(qp) = ctl.qps.get(&h) else {
            return;
        };
        if qp.dc == Some(QpType::Dct)
            && m & mask::STATE != 0
            && qp.state == qps::RTR
            && drv_out.len() >= 8
        {
            put::<4>(drv_out, 0, drv_out.len() as u64);
            put::<4>(drv_out, 4, u64::from(qp.qpn));
        }
    }
}
