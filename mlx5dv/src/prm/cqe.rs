//! The 64-byte CQE (`struct mlx5_cqe64`) and the error CQE (`struct mlx5_err_cqe`).
//!
//! With 128-byte CQEs the 64-byte CQE is the second half of each entry.

use super::{Field, get_be16, get_be32, get_be64, set_be16, set_be32, set_be64};

/// Field offsets of `struct mlx5_cqe64`.
pub mod field {
    use super::Field;
    /// `wqe_id`: be16 of a striding receive queue's CQE, the WQE (multi-packet WQE) the
    /// packet is in (kernel `mlx5_cqe64.wqe_id`, DPDK `mlx5_cqe.wqe_id`).
    pub const WQE_ID: Field = 2..4;
    /// `hds_ip_ext`: u8 of an Ethernet receive CQE: bit 0 L2 OK, bit 1 L3 OK, bit 2 L4 OK
    /// ([`CQE_L3_OK`](super::CQE_L3_OK), ...).
    pub const HDS_IP_EXT: usize = 28;
    /// `l4_l3_hdr_type`: u8 of an Ethernet receive CQE: bits 3..2 the L3 type, 6..4 the L4 type.
    pub const L4_L3_HDR_TYPE: usize = 29;
    /// `ml_path`: u8 of a responder CQE, the destination LID path bits in bits 6..0.
    pub const ML_PATH: usize = 17;
    /// `slid`: be16 source LID of a responder CQE (InfiniBand).
    pub const SLID: Field = 22..24;
    /// `flags_rqpn`: be32 of a responder CQE: bits 29..28 say whether the message carried a
    /// GRH ([`FLAGS_RQPN_GRH`](super::FLAGS_RQPN_GRH)), bits 27..24 the SL, bits 23..0 the
    /// source QP.
    pub const FLAGS_RQPN: Field = 24..28;
    /// `srqn_uidx`: be32, SRQ number or (CQE version 1) the QP's user index, low 24 bits.
    pub const SRQN_UIDX: Field = 32..36;
    /// `imm_inval_pkey`: be32 of a responder CQE: the immediate data (as sent, big-endian)
    /// of a message with one, the invalidated rkey of a SEND with invalidate, and the P_Key
    /// index (low 16 bits) of a UD receive.
    pub const IMM_INVAL_PKEY: Field = 36..40;
    /// `byte_cnt`: be32 bytes received, or the RDMA READ length.
    pub const BYTE_CNT: Field = 44..48;
    /// `timestamp`: be64.
    pub const TIMESTAMP: Field = 48..56;
    /// `sop_drop_qpn`: be32, send opcode in the top byte of a requester CQE, QPN in the low
    /// 24 bits.
    pub const SOP_DROP_QPN: Field = 56..60;
    /// `wqe_counter`: be16, the WQE the CQE completes (the first basic block of a send WQE).
    pub const WQE_COUNTER: Field = 60..62;
    /// `signature`: u8.
    pub const SIGNATURE: usize = 62;
    /// `op_own`: u8, CQE opcode in the high nibble, owner bit in bit 0.
    pub const OP_OWN: usize = 63;
    /// Size of the CQE.
    pub const LEN: usize = 64;
}

/// Field offsets of `struct mlx5_err_cqe` (the same 64 bytes, read as an error).
pub mod err_field {
    use super::Field;
    /// `srqn`: be32.
    pub const SRQN: Field = 32..36;
    /// `vendor_err_synd`: u8, the device's own error code.
    pub const VENDOR_ERR_SYND: usize = 54;
    /// `syndrome`: u8, an [`Syndrome`](super::Syndrome).
    pub const SYNDROME: usize = 55;
    /// `s_wqe_opcode_qpn`: be32, the failed WQE's opcode in the top byte, QPN below.
    pub const S_WQE_OPCODE_QPN: Field = 56..60;
    /// `wqe_counter`: be16.
    pub const WQE_COUNTER: Field = 60..62;
}

// Plain `const` asserts: each names its failing comparison (`const_assert!` reports an overflow).
const _: () = assert!(field::LEN == 64 && field::OP_OWN == 63 && field::SIGNATURE == 62);
const _: () = assert!(field::FLAGS_RQPN.start == 24 && field::FLAGS_RQPN.end == 28);
const _: () = assert!(field::ML_PATH == 17 && field::SLID.start == 22 && field::SLID.end == 24);
const _: () = assert!(field::WQE_ID.start == 2 && field::HDS_IP_EXT == 28);
const _: () = assert!(mpwrq::FILLER >> mpwrq::STRIDES_SHIFT == (mpwrq::STRIDES_MASK + 1));
const _: () = assert!(field::SRQN_UIDX.start == 32 && field::IMM_INVAL_PKEY.start == 36);
const _: () = assert!(field::BYTE_CNT.start == 44 && field::TIMESTAMP.start == 48);
const _: () = assert!(field::SOP_DROP_QPN.start == 56 && field::WQE_COUNTER.start == 60);
const _: () = assert!(err_field::VENDOR_ERR_SYND == 54 && err_field::SYNDROME == 55);
const _: () = assert!(err_field::S_WQE_OPCODE_QPN.start == 56);
const _: () = assert!(err_field::S_WQE_OPCODE_QPN.end == field::SOP_DROP_QPN.end);
const _: () = assert!(err_field::WQE_COUNTER.start == field::WQE_COUNTER.start);
const _: () = assert!(SE_BIT == 2 && OPCODE_SHIFT == 4 && OWNER_MASK == 1);
const _: () = assert!(op::REQ == 0 && op::RESP_WR_IMM == 1 && op::RESP_SEND == 2);
const _: () = assert!(op::RESP_SEND_IMM == 3 && op::RESP_SEND_INV == 4 && op::RESIZE_CQ == 5);
const _: () = assert!(op::NO_PACKET == 6 && op::SIG_ERR == 12 && op::REQ_ERR == 13);
const _: () = assert!(op::RESP_ERR == 14 && op::INVALID == 15);

/// The bits of `flags_rqpn` (29..28) that say a received message carried a GRH: libmlx5 reports
/// `IBV_WC_GRH` when `(be32toh(cqe->flags_rqpn) >> 28) & 3` is not zero (`handle_responder`).
pub const FLAGS_RQPN_GRH: u32 = 3 << 28;

/// The bits of `flags_rqpn` that hold the source QP of a receive (libmlx5's `src_qp`).
pub const FLAGS_RQPN_SRC_QP: u32 = 0x00ff_ffff;
/// Where the SL of a receive starts in `flags_rqpn` (bits 27..24, libmlx5's `sl`).
pub const FLAGS_RQPN_SL_SHIFT: u32 = 24;
/// The bits of `ml_path` that hold the destination LID path bits (libmlx5's `dlid_path_bits`).
pub const ML_PATH_DLID_PATH_BITS: u8 = 0x7f;
/// The bits of `srqn_uidx` that hold the SRQ number or user index (24 bits).
pub const SRQN_UIDX_MASK: u32 = 0x00ff_ffff;

/// `hds_ip_ext` bit: the L2 header is valid (`MLX5_CQE_L2_OK`).
pub const CQE_L2_OK: u8 = 1 << 0;
/// `hds_ip_ext` bit: the L3 header and its checksum are valid (`MLX5_CQE_L3_OK`).
pub const CQE_L3_OK: u8 = 1 << 1;
/// `hds_ip_ext` bit: the L4 header and its checksum are valid (`MLX5_CQE_L4_OK`).
pub const CQE_L4_OK: u8 = 1 << 2;

/// The `byte_cnt` of a striding receive queue's CQE (kernel `struct mpwrq_cqe_bc`): bit 31
/// the filler flag (no packet; the strides counted are consumed), bits 30..16 the strides the
/// CQE consumes, bits 15..0 the packet's length.
pub mod mpwrq {
    /// Filler: the CQE carries no packet (`MLX5_MPRQ_FILLER_MASK`).
    pub const FILLER: u32 = 1 << 31;
    /// Where the consumed strides start.
    pub const STRIDES_SHIFT: u32 = 16;
    /// The consumed strides, after the shift: 15 bits, as the kernel reads them (DPDK masks
    /// 14; the two agree for the WQEs of up to 2^14 strides a CQE can describe either way).
    pub const STRIDES_MASK: u32 = 0x7fff;
    /// The packet's length (`MLX5_MPRQ_LEN_MASK`).
    pub const LEN_MASK: u32 = 0xffff;
}

/// Bit 0 of `op_own` (`MLX5_CQE_OWNER_MASK`).
pub const OWNER_MASK: u8 = 1;
/// `op_own` bit: the solicited-event bit of the message (`mlx5dv_get_cqe_se`).
pub const SE_BIT: u8 = 1 << 1;
/// Where the CQE opcode starts in `op_own` (its high nibble: `mlx5dv_get_cqe_opcode`).
pub const OPCODE_SHIFT: u32 = 4;
/// `op_own` bit: 32 bytes of data were scattered into this CQE (`MLX5_INLINE_SCATTER_32`).
pub const INLINE_SCATTER_32: u8 = 0x4;
/// `op_own` bit: 64 bytes were scattered into the CQE before this one (`MLX5_INLINE_SCATTER_64`).
pub const INLINE_SCATTER_64: u8 = 0x8;

/// CQE opcodes (`MLX5_CQE_*`), the high nibble of `op_own`, as numbers to match on;
/// [`CqeOpcode`] is the same as an enum.
pub mod op {
    /// A send-side (requester) completion (`MLX5_CQE_REQ`).
    pub const REQ: u8 = 0;
    /// A received RDMA WRITE with immediate (`MLX5_CQE_RESP_WR_IMM`).
    pub const RESP_WR_IMM: u8 = 1;
    /// A received SEND (`MLX5_CQE_RESP_SEND`).
    pub const RESP_SEND: u8 = 2;
    /// A received SEND with immediate (`MLX5_CQE_RESP_SEND_IMM`).
    pub const RESP_SEND_IMM: u8 = 3;
    /// A received SEND with invalidate (`MLX5_CQE_RESP_SEND_INV`).
    pub const RESP_SEND_INV: u8 = 4;
    /// CQ resize marker (`MLX5_CQE_RESIZE_CQ`).
    pub const RESIZE_CQ: u8 = 5;
    /// Tag matching: no packet (`MLX5_CQE_NO_PACKET`).
    pub const NO_PACKET: u8 = 6;
    /// Signature error (`MLX5_CQE_SIG_ERR`).
    pub const SIG_ERR: u8 = 12;
    /// A send-side error (`MLX5_CQE_REQ_ERR`).
    pub const REQ_ERR: u8 = 13;
    /// A receive-side error (`MLX5_CQE_RESP_ERR`).
    pub const RESP_ERR: u8 = 14;
    /// Never written by the device: the initial value of every CQE (`MLX5_CQE_INVALID`).
    pub const INVALID: u8 = 15;
}

/// The CQE opcode: the high nibble of `op_own` (`MLX5_CQE_*`, numbered in [`op`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CqeOpcode {
    /// A send-side (requester) completion (0).
    Req,
    /// A received RDMA WRITE with immediate (1).
    RespWrImm,
    /// A received SEND (2).
    RespSend,
    /// A received SEND with immediate (3).
    RespSendImm,
    /// A received SEND with invalidate (4).
    RespSendInv,
    /// CQ resize marker (5).
    ResizeCq,
    /// Tag matching: no packet (6).
    NoPacket,
    /// Signature error (12).
    SigErr,
    /// A send-side error (13).
    ReqErr,
    /// A receive-side error (14).
    RespErr,
    /// Never written by the device: the initial value of every CQE (15).
    Invalid,
    /// Any other nibble.
    Unknown(u8),
}

impl CqeOpcode {
    /// Decodes the 4-bit opcode.
    #[inline]
    pub const fn from_raw(raw: u8) -> Self {
        match raw {
            op::REQ => CqeOpcode::Req,
            op::RESP_WR_IMM => CqeOpcode::RespWrImm,
            op::RESP_SEND => CqeOpcode::RespSend,
            op::RESP_SEND_IMM => CqeOpcode::RespSendImm,
            op::RESP_SEND_INV => CqeOpcode::RespSendInv,
            op::RESIZE_CQ => CqeOpcode::ResizeCq,
            op::NO_PACKET => CqeOpcode::NoPacket,
            op::SIG_ERR => CqeOpcode::SigErr,
            op::REQ_ERR => CqeOpcode::ReqErr,
            op::RESP_ERR => CqeOpcode::RespErr,
            op::INVALID => CqeOpcode::Invalid,
            other => CqeOpcode::Unknown(other),
        }
    }

    /// The 4-bit number.
    #[inline]
    pub const fn to_raw(self) -> u8 {
        match self {
            CqeOpcode::Req => op::REQ,
            CqeOpcode::RespWrImm => op::RESP_WR_IMM,
            CqeOpcode::RespSend => op::RESP_SEND,
            CqeOpcode::RespSendImm => op::RESP_SEND_IMM,
            CqeOpcode::RespSendInv => op::RESP_SEND_INV,
            CqeOpcode::ResizeCq => op::RESIZE_CQ,
            CqeOpcode::NoPacket => op::NO_PACKET,
            CqeOpcode::SigErr => op::SIG_ERR,
            CqeOpcode::ReqErr => op::REQ_ERR,
            CqeOpcode::RespErr => op::RESP_ERR,
            CqeOpcode::Invalid => op::INVALID,
            CqeOpcode::Unknown(raw) => raw,
        }
    }
}

/// The raw `CQE_INVALID` nibble value ([`op::INVALID`]).
pub const CQE_INVALID: u8 = op::INVALID;

/// The error syndrome of an error CQE (`MLX5_CQE_SYNDROME_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Local length error (0x01).
    LocalLengthErr,
    /// Local QP operation error (0x02).
    LocalQpOpErr,
    /// Local protection error (0x04).
    LocalProtErr,
    /// WR flushed because the QP is in the error state (0x05).
    WrFlushErr,
    /// Memory window bind error (0x06).
    MwBindErr,
    /// Bad response (0x10).
    BadRespErr,
    /// Local access error (0x11).
    LocalAccessErr,
    /// Remote invalid request (0x12).
    RemoteInvalReqErr,
    /// Remote access error (0x13).
    RemoteAccessErr,
    /// Remote operation error (0x14).
    RemoteOpErr,
    /// Transport retry counter exceeded (0x15).
    TransportRetryExcErr,
    /// RNR retry counter exceeded (0x16).
    RnrRetryExcErr,
    /// Remote aborted (0x22).
    RemoteAbortedErr,
    /// Any other value.
    Unknown(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte.
    #[inline]
    pub const fn from_raw(raw: u8) -> Self {
        match raw {
            0x01 => Syndrome::LocalLengthErr,
            0x02 => Syndrome::LocalQpOpErr,
            0x04 => Syndrome::LocalProtErr,
            0x05 => Syndrome::WrFlushErr,
            0x06 => Syndrome::MwBindErr,
            0x10 => Syndrome::BadRespErr,
            0x11 => Syndrome::LocalAccessErr,
            0x12 => Syndrome::RemoteInvalReqErr,
            0x13 => Syndrome::RemoteAccessErr,
            0x14 => Syndrome::RemoteOpErr,
            0x15 => Syndrome::TransportRetryExcErr,
            0x16 => Syndrome::RnrRetryExcErr,
            0x22 => Syndrome::RemoteAbortedErr,
            other => Syndrome::Unknown(other),
        }
    }

    /// The syndrome byte.
    #[inline]
    pub const fn to_raw(self) -> u8 {
        match self {
            Syndrome::LocalLengthErr => 0x01,
            Syndrome::LocalQpOpErr => 0x02,
            Syndrome::LocalProtErr => 0x04,
            Syndrome::WrFlushErr => 0x05,
            Syndrome::MwBindErr => 0x06,
            Syndrome::BadRespErr => 0x10,
            Syndrome::LocalAccessErr => 0x11,
            Syndrome::RemoteInvalReqErr => 0x12,
            Syndrome::RemoteAccessErr => 0x13,
            Syndrome::RemoteOpErr => 0x14,
            Syndrome::TransportRetryExcErr => 0x15,
            Syndrome::RnrRetryExcErr => 0x16,
            Syndrome::RemoteAbortedErr => 0x22,
            Syndrome::Unknown(raw) => raw,
        }
    }
}

seg_view!(
    /// A view of a 64-byte CQE.
    Cqe64,
    field::LEN
);

impl<T: AsRef<[u8]>> Cqe64<T> {
    /// `op_own`.
    #[inline(always)]
    pub fn op_own(&self) -> u8 {
        self.buffer.as_ref()[field::OP_OWN]
    }
    /// The CQE opcode (`mlx5dv_get_cqe_opcode`).
    #[inline]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from_raw(self.op_own() >> OPCODE_SHIFT)
    }
    /// The owner bit (`mlx5dv_get_cqe_owner`).
    #[inline]
    pub fn owner(&self) -> u8 {
        self.op_own() & OWNER_MASK
    }
    /// The solicited-event bit (`mlx5dv_get_cqe_se`).
    #[inline]
    pub fn se(&self) -> u8 {
        u8::from(self.op_own() & SE_BIT != 0)
    }
    /// The CQE format (`mlx5dv_get_cqe_format`): 0 for a plain CQE, 3 for a compressed block.
    #[inline]
    pub fn format(&self) -> u8 {
        (self.op_own() >> 2) & 3
    }
    /// `srqn_uidx` (all 32 bits).
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::SRQN_UIDX)
    }
    /// The SRQ number (or, with CQE version 1, the user index) of a receive completion: the
    /// low 24 bits of `srqn_uidx`. For a shared receive queue, `wqe_counter` is the index of
    /// the WQE that took the message.
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.srqn_uidx() & SRQN_UIDX_MASK
    }
    /// `flags_rqpn` (all 32 bits).
    #[inline]
    pub fn flags_rqpn(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::FLAGS_RQPN)
    }
    /// The source QP of a receive (libmlx5's `src_qp`): the low 24 bits of `flags_rqpn`.
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.flags_rqpn() & FLAGS_RQPN_SRC_QP
    }
    /// The SL of a receive (libmlx5's `sl`): bits 27..24 of `flags_rqpn`.
    #[inline]
    pub fn sl(&self) -> u8 {
        ((self.flags_rqpn() >> FLAGS_RQPN_SL_SHIFT) & 0xf) as u8
    }
    /// `slid`: the source LID of a receive (InfiniBand).
    #[inline]
    pub fn slid(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::SLID)
    }
    /// `ml_path` (all 8 bits).
    #[inline]
    pub fn ml_path(&self) -> u8 {
        self.buffer.as_ref()[field::ML_PATH]
    }
    /// The destination LID path bits of a receive (libmlx5's `dlid_path_bits`): the low 7
    /// bits of `ml_path`.
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        self.ml_path() & ML_PATH_DLID_PATH_BITS
    }
    /// The P_Key index of a UD receive (libmlx5's `pkey_index`): the low 16 bits of
    /// `imm_inval_pkey`.
    #[inline]
    pub fn pkey_index(&self) -> u16 {
        self.imm_inval_pkey() as u16
    }
    /// Whether a received message carried a GRH (the [`FLAGS_RQPN_GRH`] bits of
    /// `flags_rqpn`; meaningful for responder CQEs).
    #[inline]
    pub fn grh(&self) -> bool {
        self.flags_rqpn() & FLAGS_RQPN_GRH != 0
    }
    /// `imm_inval_pkey` as the host value of the big-endian wire immediate.
    #[inline]
    pub fn imm_inval_pkey(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::IMM_INVAL_PKEY)
    }
    /// `timestamp`: the device clock when the CQE was written (free-running ticks of
    /// `hca_core_clock`, or nanoseconds on a device in real-time mode). Meaningful only on a
    /// CQ created with completion timestamps (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).
    #[inline]
    pub fn timestamp(&self) -> u64 {
        get_be64(self.buffer.as_ref(), field::TIMESTAMP)
    }
    /// `byte_cnt`.
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::BYTE_CNT)
    }
    /// `sop_drop_qpn` (all 32 bits).
    #[inline]
    pub fn sop_drop_qpn(&self) -> u32 {
        get_be32(self.buffer.as_ref(), field::SOP_DROP_QPN)
    }
    /// The QP number (low 24 bits of `sop_drop_qpn`).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }
    /// The send opcode of a requester CQE (top byte of `sop_drop_qpn`).
    #[inline]
    pub fn send_opcode(&self) -> u8 {
        (self.sop_drop_qpn() >> 24) as u8
    }
    /// `wqe_id` of a striding receive queue's CQE: the WQE the packet is in.
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::WQE_ID)
    }
    /// `hds_ip_ext` of an Ethernet receive CQE ([`CQE_L3_OK`], [`CQE_L4_OK`], ...).
    #[inline]
    pub fn hds_ip_ext(&self) -> u8 {
        self.buffer.as_ref()[field::HDS_IP_EXT]
    }
    /// `l4_l3_hdr_type` of an Ethernet receive CQE.
    #[inline]
    pub fn l4_l3_hdr_type(&self) -> u8 {
        self.buffer.as_ref()[field::L4_L3_HDR_TYPE]
    }
    /// `wqe_counter`.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        get_be16(self.buffer.as_ref(), field::WQE_COUNTER)
    }
    /// `signature`.
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// Error syndrome (meaningful when the opcode is `ReqErr` or `RespErr`).
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_raw(self.buffer.as_ref()[err_field::SYNDROME])
    }
    /// Vendor error syndrome (meaningful for error CQEs).
    #[inline]
    pub fn vendor_err_synd(&self) -> u8 {
        self.buffer.as_ref()[err_field::VENDOR_ERR_SYND]
    }
    /// `s_wqe_opcode_qpn` of an error CQE: the failed WQE's opcode in the top byte, the QPN
    /// below (the bytes of `sop_drop_qpn`).
    #[inline]
    pub fn s_wqe_opcode_qpn(&self) -> u32 {
        get_be32(self.buffer.as_ref(), err_field::S_WQE_OPCODE_QPN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe64<T> {
    /// Sets `op_own`.
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP_OWN] = v;
    }
    /// Sets the CQE opcode (the high nibble of `op_own`), keeping the other bits.
    #[inline]
    pub fn set_opcode(&mut self, opcode: u8) {
        let own = self.op_own() & !(0xf << OPCODE_SHIFT);
        self.set_op_own(own | (opcode << OPCODE_SHIFT));
    }
    /// Sets or clears the solicited-event bit of `op_own`.
    #[inline]
    pub fn set_se(&mut self, se: bool) {
        let own = self.op_own() & !SE_BIT;
        self.set_op_own(if se { own | SE_BIT } else { own });
    }
    /// Sets or clears the owner bit of `op_own`.
    #[inline]
    pub fn set_owner(&mut self, owner: u8) {
        let own = self.op_own() & !OWNER_MASK;
        self.set_op_own(own | (owner & OWNER_MASK));
    }
    /// Sets `srqn_uidx`.
    #[inline]
    pub fn set_srqn_uidx(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::SRQN_UIDX, v);
    }
    /// Sets `flags_rqpn`.
    #[inline]
    pub fn set_flags_rqpn(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::FLAGS_RQPN, v);
    }
    /// Sets `slid`.
    #[inline]
    pub fn set_slid(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SLID, v);
    }
    /// Sets `ml_path`.
    #[inline]
    pub fn set_ml_path(&mut self, v: u8) {
        self.buffer.as_mut()[field::ML_PATH] = v;
    }
    /// Sets `imm_inval_pkey` (host value of the big-endian wire word).
    #[inline]
    pub fn set_imm_inval_pkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::IMM_INVAL_PKEY, v);
    }
    /// Sets `timestamp`.
    #[inline]
    pub fn set_timestamp(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::TIMESTAMP, v);
    }
    /// Sets `byte_cnt`.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::BYTE_CNT, v);
    }
    /// Sets `sop_drop_qpn`.
    #[inline]
    pub fn set_sop_drop_qpn(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::SOP_DROP_QPN, v);
    }
    /// Sets `wqe_id`.
    #[inline]
    pub fn set_wqe_id(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::WQE_ID, v);
    }
    /// Sets `hds_ip_ext`.
    #[inline]
    pub fn set_hds_ip_ext(&mut self, v: u8) {
        self.buffer.as_mut()[field::HDS_IP_EXT] = v;
    }
    /// Sets `wqe_counter`.
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::WQE_COUNTER, v);
    }
    /// Sets the error syndrome byte.
    #[inline]
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[err_field::SYNDROME] = v;
    }
    /// Sets the vendor error syndrome byte.
    #[inline]
    pub fn set_vendor_err_synd(&mut self, v: u8) {
        self.buffer.as_mut()[err_field::VENDOR_ERR_SYND] = v;
    }
    /// Sets `s_wqe_opcode_qpn` of an error CQE.
    #[inline]
    pub fn set_s_wqe_opcode_qpn(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), err_field::S_WQE_OPCODE_QPN, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A requester CQE for an RDMA WRITE (send opcode 0x08) on QPN 0x000100, wqe_counter 5,
    /// owner bit 1.
    const REQ_CQE: [u8; 64] = {
        let mut c = [0u8; 64];
        c[56] = 0x08;
        c[57] = 0x00;
        c[58] = 0x01;
        c[59] = 0x00;
        c[60] = 0x00;
        c[61] = 0x05;
        c[63] = 0x01;
        c
    };

    #[test]
    fn the_bits_of_op_own() {
        // (op_own, owner, solicited event, format), as mlx5dv.h's getters read them.
        for (op_own, owner, se, format) in [
            (0x00, 0, 0, 0),
            (0x01, 1, 0, 0),
            (0x02, 0, 1, 0),
            (0x0c, 0, 0, 3),
            (0x04, 0, 0, 1),
            (0xf3, 1, 1, 0),
            (0x2e, 0, 1, 3),
        ] {
            let mut b = [0u8; 64];
            b[63] = op_own;
            let c = Cqe64::new_unchecked(&b);
            assert_eq!(
                (c.owner(), c.se(), c.format()),
                (owner, se, format),
                "{op_own:#04x}"
            );
        }
    }

    #[test]
    fn requester_cqe_deconstruct() {
        let c = Cqe64::new_unchecked(&REQ_CQE);
        assert_eq!(c.opcode(), CqeOpcode::Req);
        assert_eq!(c.owner(), 1);
        assert_eq!(c.qpn(), 0x100);
        assert_eq!(c.send_opcode(), 0x08);
        assert_eq!(c.wqe_counter(), 5);
    }

    #[test]
    fn responder_cqe_construct_and_deconstruct() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_byte_cnt(0x1234);
        c.set_imm_inval_pkey(0xcafe_babe);
        c.set_sop_drop_qpn(0x0000_0101);
        c.set_wqe_counter(0xfffe);
        c.set_srqn_uidx(0x42);
        c.set_op_own((3 << 4) | 1);
        let mut want = [0u8; 64];
        want[32..36].copy_from_slice(&[0, 0, 0, 0x42]);
        want[36..40].copy_from_slice(&[0xca, 0xfe, 0xba, 0xbe]);
        want[44..48].copy_from_slice(&[0, 0, 0x12, 0x34]);
        want[56..60].copy_from_slice(&[0, 0, 1, 1]);
        want[60..62].copy_from_slice(&[0xff, 0xfe]);
        want[63] = 0x31;
        assert_eq!(b, want);
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(v.opcode(), CqeOpcode::RespSendImm);
        assert_eq!(v.imm_inval_pkey(), 0xcafe_babe);
        assert_eq!(v.byte_cnt(), 0x1234);
        assert_eq!(v.srqn_uidx(), 0x42);
    }

    #[test]
    fn flags_rqpn_and_its_grh_bits() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_flags_rqpn(0x1a00_0123);
        let mut want = [0u8; 64];
        want[24..28].copy_from_slice(&[0x1a, 0x00, 0x01, 0x23]);
        assert_eq!(b, want);
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(v.flags_rqpn(), 0x1a00_0123);
        assert!(v.grh());
        // Each GRH bit alone says "present"; the SL, the source QP and bits 31..30 do not.
        for (byte24, grh) in [(0x10, true), (0x20, true), (0x30, true), (0x0f, false)] {
            let mut b = [0u8; 64];
            b[24] = byte24;
            b[25..28].copy_from_slice(&[0xff, 0xff, 0xff]);
            assert_eq!(Cqe64::new_unchecked(&b).grh(), grh, "{byte24:#x}");
        }
        let mut b = [0u8; 64];
        b[24] = 0xc0;
        assert!(!Cqe64::new_unchecked(&b).grh());
    }

    #[test]
    fn ud_and_srq_receive_fields() {
        // A UD receive through an SRQ: source QP 0x000abc, SL 5, a GRH, source LID 0x0017,
        // path bits 0x03 (force-loopback bit set above them), P_Key index 2, SRQ 0x000042,
        // WQE 7.
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_ml_path(0x83);
        c.set_slid(0x0017);
        c.set_flags_rqpn(0x2500_0abc);
        c.set_srqn_uidx(0xff00_0042);
        c.set_imm_inval_pkey(0x0000_0002);
        c.set_wqe_counter(7);
        let mut want = [0u8; 64];
        want[17] = 0x83;
        want[22..24].copy_from_slice(&[0x00, 0x17]);
        want[24..28].copy_from_slice(&[0x25, 0x00, 0x0a, 0xbc]);
        want[32..36].copy_from_slice(&[0xff, 0x00, 0x00, 0x42]);
        want[36..40].copy_from_slice(&[0, 0, 0, 2]);
        want[60..62].copy_from_slice(&[0, 7]);
        assert_eq!(b, want);
        let v = Cqe64::new_unchecked(&b);
        assert_eq!((v.src_qp(), v.sl(), v.grh()), (0xabc, 5, true));
        assert_eq!(
            (v.slid(), v.ml_path(), v.dlid_path_bits()),
            (0x17, 0x83, 0x03)
        );
        assert_eq!((v.pkey_index(), v.srqn(), v.wqe_counter()), (2, 0x42, 7));
    }

    #[test]
    fn error_cqe_construct_and_deconstruct() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_syndrome(0x13);
        c.set_vendor_err_synd(0x88);
        c.set_op_own(13 << 4);
        assert_eq!(b[54], 0x88);
        assert_eq!(b[55], 0x13);
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(v.opcode(), CqeOpcode::ReqErr);
        assert_eq!(v.syndrome(), Syndrome::RemoteAccessErr);
        assert_eq!(v.vendor_err_synd(), 0x88);
    }

    #[test]
    fn op_own_and_error_cqe_setters() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_opcode(op::RESP_SEND_IMM);
        c.set_se(true);
        c.set_owner(1);
        c.set_s_wqe_opcode_qpn(0x0a00_0103);
        let mut want = [0u8; 64];
        want[56..60].copy_from_slice(&[0x0a, 0x00, 0x01, 0x03]);
        want[63] = 0x33;
        assert_eq!(b, want);
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(
            (v.opcode(), v.se(), v.owner()),
            (CqeOpcode::RespSendImm, 1, 1)
        );
        assert_eq!(v.s_wqe_opcode_qpn(), 0x0a00_0103);
        assert_eq!((v.send_opcode(), v.qpn()), (0x0a, 0x103));
        // Each setter changes its own bits alone.
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_opcode(op::REQ_ERR);
        assert_eq!(b[63], 0xd3);
        let mut c = Cqe64::new_unchecked(&mut b);
        c.set_se(false);
        c.set_owner(0);
        assert_eq!(b[63], 0xd0);
    }

    #[test]
    fn opcode_numbers_and_enum_agree() {
        for (raw, named) in [
            (op::REQ, CqeOpcode::Req),
            (op::RESP_WR_IMM, CqeOpcode::RespWrImm),
            (op::RESP_SEND, CqeOpcode::RespSend),
            (op::RESP_SEND_IMM, CqeOpcode::RespSendImm),
            (op::RESP_SEND_INV, CqeOpcode::RespSendInv),
            (op::RESIZE_CQ, CqeOpcode::ResizeCq),
            (op::NO_PACKET, CqeOpcode::NoPacket),
            (op::SIG_ERR, CqeOpcode::SigErr),
            (op::REQ_ERR, CqeOpcode::ReqErr),
            (op::RESP_ERR, CqeOpcode::RespErr),
            (op::INVALID, CqeOpcode::Invalid),
        ] {
            assert_eq!(CqeOpcode::from_raw(raw), named);
            assert_eq!(named.to_raw(), raw);
        }
    }

    #[test]
    fn unknown_values_are_data() {
        for raw in 0..=15u8 {
            assert_eq!(CqeOpcode::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(CqeOpcode::from_raw(9), CqeOpcode::Unknown(9));
        for raw in 0..=255u8 {
            assert_eq!(Syndrome::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(Syndrome::from_raw(0x99), Syndrome::Unknown(0x99));
    }

    #[test]
    fn op_own_helpers() {
        let mut b = [0u8; 64];
        b[63] = 0xf0 | 0x0c | 0x02 | 0x01;
        let v = Cqe64::new_unchecked(&b);
        assert_eq!(v.opcode(), CqeOpcode::Invalid);
        assert_eq!((v.owner(), v.se(), v.format()), (1, 1, 3));
        assert!(Cqe64::new_checked(&b[..63]).is_err());
    }
}
