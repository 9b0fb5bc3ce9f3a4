//! The completion queue: lock-free owner-bit polling.
//!
//! A CQE at consumer counter `ci` belongs to software when its opcode is not `INVALID` and its
//! owner bit equals the parity of the pass over the ring (`(ci >> log2(cqe_cnt)) & 1`). The
//! poller reads `op_own` alone first, then issues the
//! [`from_device`](zverbs_core::barrier::from_device) barrier, and only then reads the rest of
//! the CQE, so nothing stale from before the device's write is used. After a poll that
//! consumed CQEs the consumer counter goes to the doorbell record
//! (`dbrec[MLX5_CQ_SET_CI] = be32(ci & 0xffffff)`) with `Release`, after the reads of the CQEs
//! it frees, so the device never overwrites an entry still being read.
//!
//! A requester CQE names the first basic block of the WQE it completes (`wqe_counter`); that
//! WQE and every unsignaled WQE before it are retired and their credits handed back to the
//! send queue. Receives complete in order. Error CQEs are decoded on a cold path.
//!
//! The CQ must have been created without CQE compression, and its QPs without
//! scatter-to-CQE: a CQE in those formats is reported as a [`WcStatus::GeneralErr`]
//! completion whose `vendor_err` is `0x100 | op_own`, and its WQE is retired, so no completion
//! is lost.

use zverbs_core::ring::Ring;
use zverbs_core::sync::atomic::{AtomicU32, Ordering};
use zverbs_core::{Completion, PollCq, WcFlags, WcOpcode, WcStatus, barrier};

use crate::devmem::{CqeRing, dbrec_word, publish};
use crate::layout::{CqLayout, LayoutError};
use crate::prm::cqe::{CQE_INVALID, Cqe64, INLINE_SCATTER_32, INLINE_SCATTER_64, Syndrome};
use crate::prm::{CQ_SET_CI, opcode};
use crate::state::CqBinding;

/// `vendor_err` bit marking a CQE format the poller does not decode (compressed or scattered).
pub const VENDOR_ERR_UNSUPPORTED_FORMAT: u32 = 0x100;

/// A completion queue of an mlx5 device, polled directly.
#[derive(Debug)]
pub struct CompletionQueue<'a> {
    cqes: CqeRing,
    ring: Ring,
    /// Consumer counter (free-running; the device sees its low 24 bits).
    ci: u32,
    dbrec: &'a AtomicU32,
    bindings: &'a [CqBinding<'a>],
    /// Index of the binding that matched last.
    last: usize,
    cqn: u32,
}

// SAFETY: the poller owns the consumer side of the CQE ring; shared state goes through the
// bindings' `SqState`/`RqState` (Sync).
unsafe impl Send for CompletionQueue<'_> {}

impl<'a> CompletionQueue<'a> {
    /// Polls the CQ that `layout` describes, for the queues in `bindings`.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live CQ (or the software device's
    ///   equivalent); its ring and doorbell record stay valid for `'a`;
    /// - nothing else polls this CQ (no `ibv_poll_cq`) while this value lives, and it is new:
    ///   its consumer counter is 0;
    /// - each binding names a QP whose completions go to this CQ, with the states its queues
    ///   were built with; no state is bound to two CQs;
    /// - the CQ does not use CQE compression;
    /// - under `cfg(zverbs_loom)` the ring is an array of `LoomCqe` and the doorbell record a
    ///   loom atomic.
    ///
    /// # Errors
    ///
    /// A [`LayoutError`] for a CQE count that is not a power of two or a CQE size other than 64
    /// or 128.
    pub unsafe fn new(
        layout: &CqLayout,
        bindings: &'a [CqBinding<'a>],
    ) -> Result<Self, LayoutError> {
        let ring = Ring::new(layout.cqe_cnt).ok_or(LayoutError::NotPowerOfTwo {
            count: layout.cqe_cnt,
        })?;
        if layout.cqe_size != 64 && layout.cqe_size != 128 {
            return Err(LayoutError::BadStride {
                stride: layout.cqe_size,
            });
        }
        Ok(Self {
            // SAFETY: (caller) the ring is valid for 'a and only this poller consumes it.
            cqes: unsafe { CqeRing::new(layout.buf, layout.cqe_size) },
            ring,
            ci: 0,
            // SAFETY: (caller) the doorbell record is valid for 'a.
            dbrec: unsafe { dbrec_word(layout.dbrec, CQ_SET_CI) },
            bindings,
            last: 0,
            cqn: layout.cqn,
        })
    }

    /// The CQ number.
    #[inline]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The consumer counter.
    #[inline]
    pub fn consumer(&self) -> u32 {
        self.ci
    }

    /// Number of CQEs in the ring.
    #[inline]
    pub fn cqe_cnt(&self) -> u32 {
        self.ring.size()
    }

    /// The binding for `qpn`, trying the last match first.
    #[inline(always)]
    fn binding(&mut self, qpn: u32) -> Option<CqBinding<'a>> {
        let bindings = self.bindings;
        if let Some(b) = bindings.get(self.last)
            && b.qpn == qpn
        {
            return Some(*b);
        }
        find_binding(bindings, qpn).map(|i| {
            self.last = i;
            bindings[i]
        })
    }

    /// Decodes one software-owned CQE into `out`.
    #[inline(always)]
    fn decode(&mut self, c: &RawCqe, op_own: u8, out: &mut Completion) {
        let qpn = c.sop_drop_qpn & 0x00ff_ffff;
        let binding = self.binding(qpn);
        out.qp_num = qpn;
        out.vendor_err = 0;
        out.imm = 0;
        out.flags = WcFlags::NONE;
        out.byte_len = 0;
        let cqe_op = op_own >> 4;
        let scattered = op_own & (INLINE_SCATTER_32 | INLINE_SCATTER_64) != 0;
        match (cqe_op, binding) {
            (0, Some(CqBinding { sq: Some(sq), .. })) => {
                // SAFETY: this poller is the only one for the CQ, and the device reported the
                // WQE at `wqe_counter` complete.
                let slot = unsafe { sq.retire(c.wqe_counter) };
                out.wr_id = slot.wr_id;
                out.status = WcStatus::Success;
                let (opcode, imm) = wc_opcode((c.sop_drop_qpn >> 24) as u8);
                out.opcode = opcode;
                if imm {
                    out.flags = WcFlags::WITH_IMM;
                }
                out.byte_len = match opcode {
                    WcOpcode::RdmaRead => c.byte_cnt,
                    WcOpcode::CompSwap | WcOpcode::FetchAdd => 8,
                    _ => 0,
                };
                if scattered {
                    unsupported_format(out, op_own);
                }
            }
            (1..=4, Some(CqBinding { rq: Some(rq), .. })) => {
                // SAFETY: the only poller; the device reported the oldest receive complete.
                out.wr_id = unsafe { rq.retire() };
                out.status = WcStatus::Success;
                out.byte_len = c.byte_cnt;
                out.opcode = if cqe_op == 1 {
                    WcOpcode::RecvRdmaWithImm
                } else {
                    WcOpcode::Recv
                };
                if cqe_op == 1 || cqe_op == 3 {
                    out.flags = WcFlags::WITH_IMM;
                    out.imm = c.imm;
                }
                if scattered {
                    unsupported_format(out, op_own);
                }
            }
            _ => decode_cold(c, cqe_op, binding, out),
        }
    }
}

/// The fields of a CQE the poller uses, read in one go while the CQE is software's.
#[derive(Clone, Copy, Debug)]
struct RawCqe {
    sop_drop_qpn: u32,
    wqe_counter: u16,
    byte_cnt: u32,
    imm: u32,
    syndrome: u8,
    vendor_err_synd: u8,
}

impl RawCqe {
    #[inline(always)]
    fn read(cqe: &[u8; 64]) -> Self {
        let c = Cqe64::new_unchecked(cqe);
        Self {
            sop_drop_qpn: c.sop_drop_qpn(),
            wqe_counter: c.wqe_counter(),
            byte_cnt: c.byte_cnt(),
            imm: c.imm_inval_pkey(),
            syndrome: c.syndrome().to_raw(),
            vendor_err_synd: c.vendor_err_synd(),
        }
    }
}

#[inline(never)]
fn find_binding(bindings: &[CqBinding<'_>], qpn: u32) -> Option<usize> {
    bindings.iter().position(|b| b.qpn == qpn)
}

/// The verbs opcode for a requester CQE's send opcode, and whether it carried an immediate.
#[inline(always)]
fn wc_opcode(send_opcode: u8) -> (WcOpcode, bool) {
    match send_opcode {
        opcode::RDMA_WRITE => (WcOpcode::RdmaWrite, false),
        opcode::RDMA_WRITE_IMM => (WcOpcode::RdmaWrite, true),
        opcode::SEND => (WcOpcode::Send, false),
        opcode::SEND_IMM => (WcOpcode::Send, true),
        opcode::RDMA_READ => (WcOpcode::RdmaRead, false),
        opcode::ATOMIC_CS => (WcOpcode::CompSwap, false),
        opcode::ATOMIC_FA => (WcOpcode::FetchAdd, false),
        opcode::NOP => (WcOpcode::Nop, false),
        other => (WcOpcode::Unknown(u32::from(other)), false),
    }
}

#[cold]
fn unsupported_format(out: &mut Completion, op_own: u8) {
    out.status = WcStatus::GeneralErr;
    out.vendor_err = VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(op_own);
}

/// The verbs status for an error CQE's syndrome, as libmlx5 maps it.
pub fn status_of(syndrome: Syndrome) -> WcStatus {
    match syndrome {
        Syndrome::LocalLengthErr => WcStatus::LocLenErr,
        Syndrome::LocalQpOpErr => WcStatus::LocQpOpErr,
        Syndrome::LocalProtErr => WcStatus::LocProtErr,
        Syndrome::WrFlushErr => WcStatus::WrFlushErr,
        Syndrome::MwBindErr => WcStatus::MwBindErr,
        Syndrome::BadRespErr => WcStatus::BadRespErr,
        Syndrome::LocalAccessErr => WcStatus::LocAccessErr,
        Syndrome::RemoteInvalReqErr => WcStatus::RemInvReqErr,
        Syndrome::RemoteAccessErr => WcStatus::RemAccessErr,
        Syndrome::RemoteOpErr => WcStatus::RemOpErr,
        Syndrome::TransportRetryExcErr => WcStatus::RetryExcErr,
        Syndrome::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
        Syndrome::RemoteAbortedErr => WcStatus::RemAbortErr,
        Syndrome::Unknown(_) => WcStatus::GeneralErr,
    }
}

/// Error CQEs, and CQEs for queues this CQ does not know.
#[cold]
#[inline(never)]
fn decode_cold(c: &RawCqe, cqe_op: u8, binding: Option<CqBinding<'_>>, out: &mut Completion) {
    out.wr_id = 0;
    match (cqe_op, binding) {
        (13, Some(CqBinding { sq: Some(sq), .. })) => {
            // SAFETY: the only poller; an error CQE completes the WQE it names.
            let slot = unsafe { sq.retire(c.wqe_counter) };
            out.wr_id = slot.wr_id;
            out.status = status_of(Syndrome::from_raw(c.syndrome));
            out.vendor_err = u32::from(c.vendor_err_synd);
            out.opcode = wc_opcode(slot.opcode).0;
        }
        (14, Some(CqBinding { rq: Some(rq), .. })) => {
            // SAFETY: the only poller; receives complete in order, errors included.
            out.wr_id = unsafe { rq.retire() };
            out.status = status_of(Syndrome::from_raw(c.syndrome));
            out.vendor_err = u32::from(c.vendor_err_synd);
            out.opcode = WcOpcode::Recv;
        }
        _ => {
            // A CQE for a queue this CQ was not given, or an opcode the poller does not handle
            // (resize, signature error, unknown): reported, not dropped, and nothing retired.
            out.status = WcStatus::GeneralErr;
            out.vendor_err = u32::from(cqe_op) << 4;
            out.opcode = WcOpcode::Unknown(u32::from(cqe_op));
        }
    }
}

impl PollCq for CompletionQueue<'_> {
    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let slot = self.ring.slot(self.ci);
            let op_own = self.cqes.op_own(slot);
            if op_own >> 4 == CQE_INVALID || u32::from(op_own & 1) != self.ring.pass_parity(self.ci)
            {
                break;
            }
            barrier::from_device();
            // SAFETY: the owner bit says the CQE is software's, the barrier orders the reads
            // after that check, and the consumer counter that would free the entry is
            // published only after them.
            let raw = unsafe { self.cqes.with_cqe(slot, RawCqe::read) };
            self.decode(&raw, op_own, &mut out[n]);
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        if n > 0 {
            publish(self.dbrec, self.ci & 0x00ff_ffff, Ordering::Release);
        }
        n
    }
}
