//! Queue state: the QPs and CQs the device drives, how they are created, connected and
//! destroyed, what the device reads of a QP's doorbell record, and the flush of receives in
//! the error state.
//!
//! Contract: every size a caller passes is checked against the device's limit before it is
//! computed with, so creation never overflows or panics; a refused request changes nothing.
//! Tables are sized when the device is created and a destroyed entry is reused, never grown
//! past the configured maximum. A destroyed QP or CQ is never found by number again and its
//! memory is never touched again; local peers that named a destroyed QP name nothing.
//! The doorbell records are read with `Acquire` (pairing with the driver's `Release` after
//! its WQEs) and their counters compared in 16 bits, as the hardware does.

use std::time::Instant;

use zverbs_mlx5dv::prm::wqe::inline_ds;
use zverbs_mlx5dv::prm::{MAX_DS, RCV_DBR, SND_DBR};
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};

use super::{Engine, FLUSH, Owner};
use crate::config::{
    CqConfig, QpConfig, QpStatus, QpType, RNR_RETRY_INFINITE, SimCq, SimError, SimQp,
};
use crate::cq::{self, DevCq, op};
use crate::mem::{Region, load_be32_acquire};
use crate::vendor;
use crate::wqe::{MAX_SEGS, RqRing, SqRing, Wqe};

/// The first QP number the device hands out.
const QPN_BASE: u32 = 0x100;
/// The first CQ number the device hands out.
const CQN_BASE: u32 = 0x40;
/// The most QPs a device can have: their numbers, from [`QPN_BASE`], are 24 bits.
pub(super) const MAX_QPS: u32 = (1 << 24) - QPN_BASE;
/// The most CQs a device can have: their numbers, from [`CQN_BASE`], are 24 bits.
pub(super) const MAX_CQS: u32 = (1 << 24) - CQN_BASE;
/// The most basic blocks of a send ring and entries of a receive ring.
const MAX_RING: u32 = 1 << 15;
/// The largest receive stride: [`MAX_SEGS`] scatter entries of 16 bytes.
const MAX_RQ_STRIDE: u32 = 16 * MAX_SEGS as u32;
/// The most CQEs of a CQ (a ConnectX's `max_cqe` + 1).
const MAX_CQE_CNT: u32 = 1 << 22;
/// Gather entries in the largest WQE, beside its control and remote-address segments.
const MAX_SEND_SGE: u32 = MAX_DS as u32 - 2;
/// Inline bytes in the largest WQE: its segments after control and remote address, less the
/// inline header.
const MAX_INLINE: u32 = (MAX_DS as u32 - 2) * 16 - 4;
/// The segments before a UD SEND's payload: control and the 48-byte datagram segment.
const UD_HEADER: u32 = zverbs_mlx5dv::prm::wqe::UD_HEADER_DS as u32;
/// Gather entries in the largest UD WQE, beside its control and datagram segments.
const MAX_UD_SEND_SGE: u32 = MAX_DS as u32 - UD_HEADER;
/// Inline bytes in the largest UD WQE.
const MAX_UD_INLINE: u32 = (MAX_DS as u32 - UD_HEADER) * 16 - 4;
/// The segments before a DCI's data: control, datagram and remote address.
const DCI_HEADER: u32 = 2 + zverbs_mlx5dv::DC_AV_DS;
/// Gather entries in the largest DCI WQE.
const MAX_DCI_SEND_SGE: u32 = MAX_DS as u32 - DCI_HEADER;
/// Inline bytes in the largest DCI WQE.
const MAX_DCI_INLINE: u32 = (MAX_DS as u32 - DCI_HEADER) * 16 - 4;

/// Where a QP's requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A QP of the same device, by QPN.
    Local(u32),
    /// A QP of the device instance at `lid` in another process, reached through the
    /// [`Wire`](crate::wire::Wire).
    Remote {
        /// The LID of the peer's device instance.
        lid: u16,
        /// The peer QP's number.
        qpn: u32,
    },
}

/// A request in flight to another process.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    /// The tag the response must echo.
    pub(super) seq: u32,
    /// The WQE it carries out, as parsed when it was sent.
    pub(super) wqe: Wqe,
    /// When it was sent: its transport timer runs from here (`timers.rs`).
    pub(super) sent: Instant,
}

/// A QP's memory as the device sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct QpMem {
    pub(super) sq: SqRing,
    pub(super) rq: Option<RqRing>,
    pub(super) dbrec: core::ptr::NonNull<u32>,
}

/// A QP as the device drives it.
#[derive(Debug)]
pub(crate) struct DevQp {
    pub(crate) qpn: u32,
    /// RC or UD.
    pub(super) qp_type: QpType,
    pub(super) mem: QpMem,
    /// The user index CQEs carry in `srqn_uidx` (the QPN unless the driver chose one).
    pub(super) uidx: u32,
    /// The driver chose the user index (CQE version 1): a receive from an SRQ carries it in
    /// `srqn_uidx` instead of the SRQ number.
    pub(super) uidx_set: bool,
    /// The table entry of the shared receive queue its receives come from (then `mem.rq` is
    /// `None`).
    pub(super) srq: Option<usize>,
    /// A UD QP's Q_Key (`qkey` of `ibv_modify_qp` at INIT): datagrams carrying another one are
    /// dropped, and a send whose Q_Key has bit 31 set carries this one instead.
    pub(super) qkey: u32,
    /// A UD QP's P_Key index (`pkey_index` at INIT), reported in its receive CQEs.
    pub(super) pkey_index: u16,
    /// Table entries of its send and receive CQs.
    pub(super) send_cq: usize,
    pub(super) recv_cq: usize,
    /// The QP of this device that this one names as its peer: where its requests go, and the
    /// only QP whose requests it serves.
    pub(super) peer: Option<usize>,
    /// A peer in another process, as (LID, QPN) (then `peer` is `None`): where its requests
    /// go, and the only source whose requests it serves and whose responses it takes.
    pub(super) remote: Option<(u16, u32)>,
    /// The request in flight to the remote peer.
    pub(super) pending: Option<Pending>,
    /// After an RNR NAK from a remote peer: send again at this time.
    pub(super) resend_at: Option<Instant>,
    /// Destroyed: skipped, and never found by number again.
    pub(super) dead: bool,
    pub(crate) status: QpStatus,
    /// Send consumer counter in basic blocks (free-running).
    pub(super) sq_ci: u32,
    /// Receive consumer counter (free-running).
    pub(super) rq_ci: u32,
    pub(super) rnr_retry: u8,
    /// RNR retries left for the WQE at `sq_ci`, once it has met an RNR NAK.
    pub(super) rnr_left: Option<u8>,
    /// Injected: fail the next WQE with (syndrome, vendor syndrome).
    pub(super) fail_next: Option<super::Fault>,
    /// Injected: the next message that needs a receive finds none.
    pub(super) drop_next_recv: bool,
    /// Injected: the acknowledgement of the next request this QP sends is lost.
    pub(super) lose_next_ack: bool,
    /// The PSN of the next request this QP sends (`sq_psn` at RTS, then advanced by each
    /// acknowledged request's packets).
    pub(super) sq_psn: u32,
    /// The PSN the responder expects next (`rq_psn` at RTR, then advanced by each request it
    /// carries out).
    pub(super) rq_psn: u32,
    /// Transport retries (timeouts and sequence-error NAKs) before "transport retry exceeded".
    pub(super) retry_cnt: u8,
    /// Transport retries left for the WQE at `sq_ci`, once it has needed one.
    pub(super) retry_left: Option<u8>,
    /// The transport timer's code (`timeout` at RTS): a request to another process that is
    /// not answered within `4.096 µs × 2^timeout` is sent again (0: never).
    pub(super) timeout: u8,
    /// The RNR timer's code this QP's RNR NAKs carry as a responder (`min_rnr_timer` at
    /// RTR): how long its requester waits before sending again.
    pub(super) min_rnr_timer: u8,
    /// The responder has NAKed an out-of-sequence request and drops the next ones until the
    /// expected PSN arrives (one NAK per sequence error, as IB responders send).
    pub(super) seq_nak_sent: bool,
    /// The results of the last atomics carried out, by PSN, to answer a duplicate without
    /// running it again; a ring of [`ATOMIC_RESOURCES`](super::ATOMIC_RESOURCES).
    pub(super) atomic_results: [Option<(u32, u64)>; super::ATOMIC_RESOURCES],
    /// The ring entry the next atomic result goes to.
    pub(super) atomic_next: usize,
    /// A DC target's access key: requests carrying another are dropped.
    pub(super) dc_key: u64,
    /// Created allowing scatter-to-CQE (`MLX5_QP_FLAG_SCATTER_CQE`): a small SEND it
    /// receives goes into the receive CQE instead of the receive buffer (RC only).
    pub(crate) scatter_to_cqe: bool,
}

impl DevQp {
    /// Sets the RNR retry count for the requests from now on.
    pub(crate) fn set_rnr_retry(&mut self, rnr_retry: u8) {
        self.rnr_retry = rnr_retry;
    }

    /// Sets the transport retry count for the requests from now on.
    pub(crate) fn set_retry_cnt(&mut self, retry_cnt: u8) {
        self.retry_cnt = retry_cnt;
    }

    /// Sets the transport timer's code (`timeout`, 5 bits; 0 disables the timer).
    pub(crate) fn set_timeout(&mut self, timeout: u8) {
        self.timeout = timeout & 0x1f;
    }

    /// Sets the RNR timer's code its RNR NAKs carry (`min_rnr_timer`, 5 bits).
    pub(crate) fn set_min_rnr_timer(&mut self, code: u8) {
        self.min_rnr_timer = code & 0x1f;
    }

    /// Sets the PSN of the next request this QP sends (`sq_psn`, 24 bits).
    pub(crate) fn set_sq_psn(&mut self, psn: u32) {
        self.sq_psn = psn & super::PSN_MASK;
    }

    /// Sets the PSN this QP expects next as a responder (`rq_psn`, 24 bits).
    pub(crate) fn set_rq_psn(&mut self, psn: u32) {
        self.rq_psn = psn & super::PSN_MASK;
        self.seq_nak_sent = false;
    }

    /// (`sq_psn`, `rq_psn`): the PSN it sends next, the PSN it expects next.
    pub(crate) fn psns(&self) -> (u32, u32) {
        (self.sq_psn, self.rq_psn)
    }

    /// Keeps the result of the atomic at `psn` for duplicates of it.
    pub(super) fn keep_atomic(&mut self, psn: u32, orig: u64) {
        self.atomic_results[self.atomic_next] = Some((psn, orig));
        self.atomic_next = (self.atomic_next + 1) % super::ATOMIC_RESOURCES;
    }

    /// The kept result of the atomic at `psn`, if it is still kept.
    pub(super) fn kept_atomic(&self, psn: u32) -> Option<u64> {
        self.atomic_results
            .iter()
            .flatten()
            .find(|(p, _)| *p == psn)
            .map(|(_, v)| *v)
    }
}

impl Engine {
    /// The table entry a new CQ takes: the first destroyed one, else a new one, else none.
    fn free_cq_slot(&self) -> Result<usize, SimError> {
        match self.cqs.iter().position(|c| c.dead) {
            Some(i) => Ok(i),
            None if self.cqs.len() < self.cfg.max_cqs as usize => Ok(self.cqs.len()),
            None => Err(SimError::TooMany),
        }
    }

    /// The table entry a new QP takes: the first destroyed one, else a new one, else none.
    fn free_qp_slot(&self) -> Result<usize, SimError> {
        match self.qps.iter().position(|q| q.dead) {
            Some(i) => Ok(i),
            None if self.qps.len() < self.cfg.max_qps as usize => Ok(self.qps.len()),
            None => Err(SimError::TooMany),
        }
    }

    pub(crate) fn create_cq(&mut self, cfg: CqConfig) -> Result<SimCq, SimError> {
        self.create_cq_sized(cfg, 64)
    }

    /// [`Engine::create_cq`] with CQEs of `cqe_size` bytes (64 or 128).
    pub(crate) fn create_cq_sized(
        &mut self,
        cfg: CqConfig,
        cqe_size: u32,
    ) -> Result<SimCq, SimError> {
        if cfg.cqe == 0 || cfg.cqe >= MAX_CQE_CNT {
            return Err(SimError::InvalidConfig("cqe must be in 1..2^22"));
        }
        if !matches!(cqe_size, 64 | 128) {
            return Err(SimError::InvalidConfig("CQE size must be 64 or 128"));
        }
        let slot = self.free_cq_slot()?;
        let owner = Owner::Cq(CQN_BASE + slot as u32);
        let made = self.create_cq_owned(cfg, cqe_size, slot, owner);
        if made.is_err() {
            self.free_owned(owner);
        }
        made
    }

    /// [`Engine::create_cq_sized`] into table entry `slot`, its buffers allocated for `owner`.
    fn create_cq_owned(
        &mut self,
        cfg: CqConfig,
        cqe_size: u32,
        slot: usize,
        owner: Owner,
    ) -> Result<SimCq, SimError> {
        let cnt = (cfg.cqe + 1).next_power_of_two();
        let size = cqe_size as usize;
        let buf = self.alloc(owner, cnt as usize * size)?;
        for i in 0..cnt as usize {
            // SAFETY: the last byte of entry `i` (its CQE's `op_own`), inside the new buffer.
            // libmlx5 initialises every CQE as invalid (opcode 15, owner 0).
            unsafe { buf.ptr.add(i * size + size - 1).write(op::INVALID << 4) };
        }
        let dbrec = self.alloc(owner, 8)?.ptr.cast::<u32>();
        let layout = CqLayout {
            buf: buf.ptr,
            dbrec,
            cqe_cnt: cnt,
            cqe_size,
            cqn: CQN_BASE + slot as u32,
        };
        let uar = self.alloc(owner, 64)?.ptr;
        // SAFETY: the buffers were just allocated for this CQ and live until it is destroyed.
        unsafe { self.add_cq(&layout) }?;
        let i = self.cq_index(layout.cqn)?;
        self.cqs[i].uar = Some(uar);
        Ok(SimCq {
            cqn: layout.cqn,
            layout,
        })
    }

    /// Drives a CQ laid out as `layout` (its `cqn` is the CQ's number).
    ///
    /// # Safety
    ///
    /// The ring (`cqe_cnt` initialised CQEs of `cqe_size` bytes, 64 or 128) and doorbell record are valid for the
    /// engine's life and accessed only as an mlx5 CQ is (by one poller).
    pub(crate) unsafe fn add_cq(&mut self, layout: &CqLayout) -> Result<(), SimError> {
        if !layout.cqe_cnt.is_power_of_two() || !matches!(layout.cqe_size, 64 | 128) {
            return Err(SimError::InvalidConfig(
                "CQ: power-of-two count of 64- or 128-byte CQEs",
            ));
        }
        if layout.cqe_cnt > MAX_CQE_CNT {
            return Err(SimError::InvalidConfig("CQ above 2^22 CQEs"));
        }
        let slot = self.free_cq_slot()?;
        if self.cqs.iter().any(|c| c.cqn == layout.cqn && !c.dead) {
            return Err(SimError::InvalidConfig("CQ number in use"));
        }
        let stride = layout.cqe_size as usize;
        let buf = Region {
            ptr: layout.buf,
            len: layout.cqe_cnt as usize * stride,
        };
        let cq = DevCq::new(layout.cqn, buf, layout.dbrec, layout.cqe_cnt, stride);
        if slot == self.cqs.len() {
            self.cqs.push(cq);
        } else {
            // A destroyed CQ's entry: no live QP refers to it (destruction was refused while
            // one did).
            self.cqs[slot] = cq;
        }
        Ok(())
    }

    pub(crate) fn create_qp(
        &mut self,
        cfg: QpConfig,
        qp_type: QpType,
        srqn: Option<u32>,
    ) -> Result<SimQp, SimError> {
        // Every caller-supplied size is bounded first, so the arithmetic below cannot
        // overflow.
        let (header, max_sge, max_inline) = match qp_type {
            QpType::Rc => (2, MAX_SEND_SGE, MAX_INLINE),
            QpType::Ud => (UD_HEADER, MAX_UD_SEND_SGE, MAX_UD_INLINE),
            QpType::Dci => (DCI_HEADER, MAX_DCI_SEND_SGE, MAX_DCI_INLINE),
            QpType::Dct => (2, MAX_SEND_SGE, MAX_INLINE),
            QpType::RawPacket => (RAW_HEADER, MAX_RAW_SEND_SGE, MAX_RAW_INLINE),
        };
        if qp_type == QpType::RawPacket {
            if srqn.is_some() {
                return Err(SimError::InvalidConfig(
                    "a raw packet QP has its own receive queue, not an SRQ",
                ));
            }
            self.eth.reserve()?;
        }
        let srq = srqn.map(|n| self.srq_index(n)).transpose()?;
        if srq.is_some() && cfg.max_recv_wr != 0 {
            return Err(SimError::InvalidConfig(
                "a QP on a shared receive queue has no receive queue: max_recv_wr must be 0",
            ));
        }
        if cfg.max_send_wr == 0 {
            return Err(SimError::InvalidConfig("max_send_wr must be at least 1"));
        }
        if cfg.max_send_wr > MAX_RING {
            return Err(SimError::InvalidConfig(
                "max_send_wr above 32768 (the send ring's limit)",
            ));
        }
        if cfg.max_send_sge > max_sge {
            return Err(SimError::InvalidConfig(match qp_type {
                QpType::Rc | QpType::Dct => "max_send_sge above 61 (a WQE has at most 63 segments)",
                QpType::Dci => "max_send_sge above 58 for a DCI (a WQE has at most 63 segments)",
                QpType::Ud => "max_send_sge above 59 for UD (a WQE has at most 63 segments)",
                QpType::RawPacket => {
                    "max_send_sge above 60 for a raw packet QP (a WQE has at most 63 segments)"
                }
            }));
        }
        if cfg.max_inline_data > max_inline {
            return Err(SimError::InvalidConfig(match qp_type {
                QpType::Rc | QpType::Dct => {
                    "max_inline_data above 972 bytes (a WQE has at most 63 segments)"
                }
                QpType::Dci => "max_inline_data above 924 bytes for a DCI (63 segments)",
                QpType::Ud => "max_inline_data above 940 bytes for UD (63 segments)",
                QpType::RawPacket => "max_inline_data above 956 bytes for a raw QP (63 segments)",
            }));
        }
        if cfg.max_recv_wr > MAX_RING {
            return Err(SimError::InvalidConfig(
                "max_recv_wr above 32768 (the receive ring's limit)",
            ));
        }
        if cfg.max_recv_sge > MAX_SEGS as u32 {
            return Err(SimError::InvalidConfig("max_recv_sge above 64"));
        }
        if !cfg.bf_size.is_multiple_of(64) || cfg.bf_size > 4096 {
            return Err(SimError::InvalidConfig(
                "bf_size must be a multiple of 64, ≤ 4096",
            ));
        }
        if cfg.rnr_retry > RNR_RETRY_INFINITE {
            return Err(SimError::InvalidConfig("rnr_retry above 7"));
        }
        let send_cq = self.cq_index(cfg.send_cq)?;
        self.cq_index(cfg.recv_cq)?;
        // The largest WQE: control + remote address (UD: control + datagram) + the larger of
        // the gather list and the inline segment (atomics fit one block), in whole basic
        // blocks, as libmlx5 sizes it: at most 63 segments, by the bounds above.
        let segs = header as usize
            + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        debug_assert!(segs <= MAX_DS);
        let wqe_bytes = (segs * 16).next_multiple_of(64) as u64;
        let max_ds = ((wqe_bytes / 16) as usize).min(MAX_DS);
        // At most 2^15 WQEs of 16 blocks: 2^19 blocks before the check.
        let sq_cnt = (u64::from(cfg.max_send_wr) * wqe_bytes / 64).next_power_of_two();
        if sq_cnt > u64::from(MAX_RING) {
            return Err(SimError::InvalidConfig(
                "send ring above 32768 basic blocks",
            ));
        }
        let sq_cnt = sq_cnt as u32;
        let (rq_cnt, stride) = if cfg.max_recv_wr == 0 {
            (0, 16)
        } else {
            (
                cfg.max_recv_wr.next_power_of_two(),
                16 * cfg.max_recv_sge.max(1).next_power_of_two(),
            )
        };
        let slot = self.free_qp_slot()?;
        let owner = Owner::Qp(QPN_BASE + slot as u32);
        let bf_len = if cfg.bf_size == 0 {
            8
        } else {
            2 * cfg.bf_size as usize
        };
        let allocated = (|| {
            let sq = self.alloc(owner, sq_cnt as usize * 64)?;
            let rq = self.alloc(owner, rq_cnt as usize * stride as usize)?;
            let dbrec = self.alloc(owner, 8)?.ptr.cast::<u32>();
            let bf = self.alloc(owner, bf_len)?;
            Ok::<_, SimError>((sq, rq, dbrec, bf))
        })();
        let (sq, rq, dbrec, bf) = match allocated {
            Ok(x) => x,
            Err(e) => {
                self.free_owned(owner);
                return Err(e);
            }
        };
        let layout = QpLayout {
            qpn: QPN_BASE + slot as u32,
            dbrec,
            sq: WqLayout {
                buf: sq.ptr,
                wqe_cnt: sq_cnt,
                stride: 64,
            },
            rq: WqLayout {
                buf: rq.ptr,
                wqe_cnt: rq_cnt,
                stride,
            },
            bf: BfLayout {
                reg: bf.ptr,
                size: cfg.bf_size,
            },
        };
        // SAFETY: the buffers were just allocated for this QP and live until it is destroyed.
        if let Err(e) = unsafe { self.add_qp(&layout, cfg.send_cq, cfg.recv_cq, cfg.rnr_retry) } {
            self.free_owned(owner);
            return Err(e);
        }
        let q = self.qp_index(layout.qpn)?;
        self.qps[q].qp_type = qp_type;
        self.qps[q].srq = srq;
        Ok(SimQp {
            qpn: layout.qpn,
            layout,
            max_send_sge: cfg.max_send_sge,
            max_inline_data: (max_ds as u32 - header) * 16 - 4,
            max_recv_sge: stride / 16,
            sig_all: cfg.sig_all,
            send_cqe_cnt: self.cqs[send_cq].cnt(),
        })
    }

    /// [`Engine::add_qp`] for a QP of `qp_type`, on shared receive queue `srqn` if given.
    ///
    /// # Safety
    ///
    /// As [`Engine::add_qp`].
    pub(crate) unsafe fn add_qp_ext(
        &mut self,
        layout: &QpLayout,
        send_cq: u32,
        recv_cq: u32,
        rnr_retry: u8,
        qp_type: QpType,
        srqn: Option<u32>,
    ) -> Result<(), SimError> {
        let srq = srqn.map(|n| self.srq_index(n)).transpose()?;
        if qp_type == QpType::RawPacket {
            self.eth.reserve()?;
        }
        if srq.is_some() && layout.rq.wqe_cnt != 0 {
            return Err(SimError::InvalidConfig(
                "a QP on a shared receive queue has no receive ring",
            ));
        }
        // SAFETY: (caller) the memory is valid for the engine's life.
        unsafe { self.add_qp(layout, send_cq, recv_cq, rnr_retry) }?;
        let q = self.qp_index(layout.qpn)?;
        self.qps[q].qp_type = qp_type;
        self.qps[q].srq = srq;
        Ok(())
    }

    /// Drives a QP laid out as `layout`.
    ///
    /// # Safety
    ///
    /// The rings and the doorbell record are valid for the engine's life and are written only
    /// as an mlx5 driver writes them.
    pub(crate) unsafe fn add_qp(
        &mut self,
        layout: &QpLayout,
        send_cq: u32,
        recv_cq: u32,
        rnr_retry: u8,
    ) -> Result<(), SimError> {
        let sq_cnt = layout.sq.wqe_cnt;
        if !sq_cnt.is_power_of_two() || sq_cnt > MAX_RING || layout.sq.stride != 64 {
            return Err(SimError::InvalidConfig(
                "SQ: power-of-two count, at most 32768, of 64-byte blocks",
            ));
        }
        let rq_cnt = layout.rq.wqe_cnt;
        let stride = layout.rq.stride;
        if rq_cnt != 0 && (!rq_cnt.is_power_of_two() || rq_cnt > MAX_RING) {
            return Err(SimError::InvalidConfig(
                "RQ: power-of-two count, at most 32768",
            ));
        }
        if rq_cnt != 0 && (!stride.is_power_of_two() || !(16..=MAX_RQ_STRIDE).contains(&stride)) {
            return Err(SimError::InvalidConfig(
                "RQ: power-of-two stride of 16 to 1024 bytes (64 scatter entries)",
            ));
        }
        let slot = self.free_qp_slot()?;
        if self.qps.iter().any(|q| q.qpn == layout.qpn && !q.dead) || layout.qpn > 0xff_ffff {
            return Err(SimError::InvalidConfig("QP number in use or above 24 bits"));
        }
        let send_cq = self.cq_index(send_cq)?;
        let recv_cq = self.cq_index(recv_cq)?;
        let rq = (rq_cnt != 0).then_some(RqRing {
            region: Region {
                ptr: layout.rq.buf,
                len: rq_cnt as usize * stride as usize,
            },
            cnt: rq_cnt,
            stride,
        });
        let qp = DevQp {
            qpn: layout.qpn,
            qp_type: QpType::Rc,
            srq: None,
            uidx_set: false,
            qkey: 0,
            pkey_index: 0,
            mem: QpMem {
                sq: SqRing {
                    region: Region {
                        ptr: layout.sq.buf,
                        len: sq_cnt as usize * 64,
                    },
                    blocks: sq_cnt,
                },
                rq,
                dbrec: layout.dbrec,
            },
            uidx: layout.qpn,
            send_cq,
            recv_cq,
            peer: None,
            remote: None,
            pending: None,
            resend_at: None,
            dead: false,
            status: QpStatus::Init,
            sq_ci: 0,
            rq_ci: 0,
            rnr_retry,
            rnr_left: None,
            fail_next: None,
            drop_next_recv: false,
            lose_next_ack: false,
            sq_psn: 0,
            rq_psn: 0,
            retry_cnt: super::RETRY_CNT_DEFAULT,
            retry_left: None,
            timeout: super::timers::TIMEOUT_DEFAULT,
            min_rnr_timer: super::timers::MIN_RNR_TIMER_DEFAULT,
            seq_nak_sent: false,
            atomic_results: [None; super::ATOMIC_RESOURCES],
            atomic_next: 0,
            dc_key: 0,
            scatter_to_cqe: false,
        };
        if slot == self.qps.len() {
            self.qps.push(qp);
        } else {
            // A destroyed QP's entry: nothing points at it any more (destruction cut its
            // peers' links).
            self.qps[slot] = qp;
        }
        Ok(())
    }

    pub(crate) fn connect(&mut self, a: u32, b: u32) -> Result<(), SimError> {
        let ia = self.qp_index(a)?;
        let ib = self.qp_index(b)?;
        if self.qps[ia].qp_type != QpType::Rc || self.qps[ib].qp_type != QpType::Rc {
            return Err(SimError::InvalidConfig("a UD QP has no peer"));
        }
        for (i, n) in [(ia, a), (ib, b)] {
            if self.qps[i].peer.is_some() || self.qps[i].status != QpStatus::Init {
                return Err(SimError::AlreadyConnected(n));
            }
        }
        self.qps[ia].peer = Some(ib);
        self.qps[ia].status = QpStatus::Rts;
        self.qps[ib].peer = Some(ia);
        self.qps[ib].status = QpStatus::Rts;
        Ok(())
    }

    /// Points QP `qpn`'s requests at `peer` (one-sided, as `ibv_modify_qp` to RTR does) and
    /// moves it to RTS. Traffic flows once the peer names `qpn` in turn: a responder accepts
    /// requests only from the QP its own connection names. A local peer that already names
    /// another QP is refused here, since it would never accept a request from `qpn`.
    pub(crate) fn connect_to(&mut self, qpn: u32, peer: Peer) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        let (local, remote) = match peer {
            Peer::Local(p) => (Some(self.qp_index(p)?), None),
            Peer::Remote { lid, qpn } => (None, Some((lid, qpn))),
        };
        if self.qps[q].qp_type != QpType::Rc
            || local.is_some_and(|p| self.qps[p].qp_type != QpType::Rc)
        {
            return Err(SimError::InvalidConfig("a UD QP has no peer"));
        }
        if self.qps[q].status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        if let Some(p) = local {
            let theirs = &self.qps[p];
            if theirs.remote.is_some() || theirs.peer.is_some_and(|x| x != q) {
                return Err(SimError::PeerTaken {
                    qpn,
                    peer: theirs.qpn,
                });
            }
        }
        let qp = &mut self.qps[q];
        qp.peer = local;
        qp.remote = remote;
        qp.status = QpStatus::Rts;
        Ok(())
    }

    pub(crate) fn set_user_index(&mut self, qpn: u32, uidx: u32) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn)?;
        qp.uidx = uidx;
        qp.uidx_set = true;
        Ok(())
    }

    /// Forgets QP `qpn`: the device never touches its memory again. Local peers pointing at it
    /// see a QP in the error state.
    pub(crate) fn destroy_qp(&mut self, qpn: u32) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        if self.flows_name_qp(qpn) {
            // As the kernel (EBUSY): a new QP may take this number, and the rule must not
            // steer frames to it.
            return Err(SimError::InvalidConfig("QP in use by a flow rule"));
        }
        let qp = &mut self.qps[q];
        qp.dead = true;
        qp.status = QpStatus::Error;
        qp.pending = None;
        qp.peer = None;
        // Its table entry may be reused by a new QP: local peers pointing at it now point
        // nowhere (their requests fail with "transport retry exceeded", as on a wire whose
        // far end has gone).
        for other in &mut self.qps {
            if other.peer == Some(q) {
                other.peer = None;
            }
        }
        self.leave_groups(q);
        // The rings, record and register the device allocated for it (none for a QP whose
        // driver allocated them): the QP is gone, and so are they.
        self.free_owned(Owner::Qp(qpn));
        Ok(())
    }

    /// Forgets CQ `cqn`; refused while a live QP uses it.
    pub(crate) fn destroy_cq(&mut self, cqn: u32) -> Result<(), SimError> {
        let c = self.cq_index(cqn)?;
        if self
            .qps
            .iter()
            .any(|q| !q.dead && (q.send_cq == c || q.recv_cq == c))
        {
            return Err(SimError::InvalidConfig("CQ in use by a QP"));
        }
        self.cqs[c].dead = true;
        self.cqs[c].arm.handler = None;
        self.cqs[c].uar = None;
        self.free_owned(Owner::Cq(cqn));
        Ok(())
    }

    /// Send basic blocks published beyond QP `q`'s consumer counter.
    pub(super) fn sq_doorbell(&self, q: usize) -> u32 {
        let qp = &self.qps[q];
        // SAFETY: the doorbell record is valid for the engine's life (creation contract).
        let pi = unsafe { load_be32_acquire(qp.mem.dbrec.add(SND_DBR)) } as u16;
        u32::from(pi.wrapping_sub(qp.sq_ci as u16))
    }

    /// Receives published beyond QP `q`'s consumer counter.
    pub(super) fn rq_doorbell(&self, q: usize) -> u32 {
        let qp = &self.qps[q];
        // SAFETY: as above.
        let head = unsafe { load_be32_acquire(qp.mem.dbrec.add(RCV_DBR)) } as u16;
        u32::from(head.wrapping_sub(qp.rq_ci as u16))
    }

    /// In the error state, flushes every published receive.
    pub(super) fn service_rq(&mut self, q: usize) -> usize {
        let Some(rq) = self.qps[q].mem.rq else {
            return 0;
        };
        if self.qps[q].status != QpStatus::Error {
            return 0;
        }
        let avail = self.rq_doorbell(q);
        if avail > rq.cnt {
            return 0;
        }
        for _ in 0..avail {
            let qp = &mut self.qps[q];
            let cqe = cq::err(
                qp.uidx,
                qp.qpn,
                op::RESP_ERR,
                0,
                qp.rq_ci as u16,
                FLUSH,
                vendor::FLUSH,
            );
            qp.rq_ci = qp.rq_ci.wrapping_add(1);
            let cqn = qp.recv_cq;
            self.push_cqe(cqn, cqe);
            self.stats.flushed += 1;
        }
        avail as usize
    }
}

/// The segments before a raw packet QP's frame data: control and the Ethernet segment as
/// libmlx5 sizes it (32 bytes: room for 18 inlined header bytes).
pub(super) const RAW_HEADER: u32 = 3;
/// Gather entries in the largest raw packet WQE.
const MAX_RAW_SEND_SGE: u32 = MAX_DS as u32 - RAW_HEADER;
/// Inline bytes in the largest raw packet WQE.
const MAX_RAW_INLINE: u32 = (MAX_DS as u32 - RAW_HEADER) * 16 - 4;

/// The capacity check of the UD limits above, against the segment counts.
const _: () = assert!(MAX_UD_SEND_SGE == 59 && MAX_UD_INLINE == 940 && MAX_INLINE == 972);
