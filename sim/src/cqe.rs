//! The CQEs the device writes, as values: a 64-byte entry built through the backend's CQE view
//! (requester, responder, UD receive fields, error), before the completion queue
//! ([`crate::cq`]) places it with its owner bit or compression ([`crate::compress`]) folds a run
//! of them into a session.

use zverbs_mlx5dv::prm::cqe::Cqe64;

/// CQE opcodes (`MLX5_CQE_*`): the mlx5 backend's, which its poller decodes.
pub(crate) use zverbs_mlx5dv::prm::cqe::op;

/// A 64-byte CQE under construction. Its `op_own` holds the opcode and flags; the owner bit is
/// added when it is written.
pub(crate) type RawCqe = [u8; 64];

/// A CQE of `opcode` for the QP `qpn` (`srqn_uidx` its user index `uidx`, by which libmlx5
/// finds the QP with CQE version 1; the device's own QPs use their QPN), completing
/// `wqe_counter`, written through the backend's CQE view.
fn cqe(
    uidx: u32,
    opcode: u8,
    wqe_counter: u16,
    fill: impl FnOnce(&mut Cqe64<&mut RawCqe>),
) -> RawCqe {
    let mut c = [0u8; 64];
    let mut v = Cqe64::new_unchecked(&mut c);
    v.set_srqn_uidx(uidx & 0x00ff_ffff);
    v.set_wqe_counter(wqe_counter);
    v.set_opcode(opcode);
    fill(&mut v);
    c
}

/// A successful requester CQE (`REQ`) for the WQE of `wqe_opcode`.
pub(crate) fn req(uidx: u32, qpn: u32, wqe_opcode: u8, wqe_counter: u16, byte_cnt: u32) -> RawCqe {
    cqe(uidx, op::REQ, wqe_counter, |v| {
        v.set_byte_cnt(byte_cnt);
        v.set_sop_drop_qpn((u32::from(wqe_opcode) << 24) | qpn);
    })
}

/// A successful responder CQE (`RESP_SEND`, `RESP_SEND_IMM` or `RESP_WR_IMM`). Its
/// `flags_rqpn` stays 0 for an RC message (no RC message carries a GRH on this device); a UD
/// receive adds its fields with [`set_ud`].
pub(crate) fn resp(
    uidx: u32,
    qpn: u32,
    opcode: u8,
    wqe_counter: u16,
    byte_cnt: u32,
    imm: [u8; 4],
    solicited: bool,
) -> RawCqe {
    cqe(uidx, opcode, wqe_counter, |v| {
        v.set_imm_inval_pkey(u32::from_be_bytes(imm));
        v.set_byte_cnt(byte_cnt);
        v.set_sop_drop_qpn(qpn);
        v.set_se(solicited);
    })
}

/// What a UD receive CQE reports of its datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdInfo {
    /// The sending QP.
    pub(crate) src_qpn: u32,
    /// The sender's LID (with its path bits).
    pub(crate) slid: u16,
    /// The service level, 4 bits.
    pub(crate) sl: u8,
    /// The destination LID's path bits (below the receiving port's LMC).
    pub(crate) dlid_path_bits: u8,
    /// The datagram carried a GRH (written in the receive's first 40 bytes).
    pub(crate) grh: bool,
}

/// The `flags_rqpn` GRH type of an InfiniBand GRH (`MLX5_CQE_L3_HDR_TYPE_GRH`, bits 29..28).
const L3_GRH: u32 = 1 << 28;

/// Adds a UD receive's fields to a responder CQE: `flags_rqpn` (GRH type, SL, source QP),
/// `slid`, the path bits in `ml_path` and, when the message had no immediate (`pkey`), the
/// P_Key index in the low 16 bits of `imm_inval_pkey`, where libmlx5 reads it.
pub(crate) fn set_ud(c: &mut RawCqe, ud: &UdInfo, pkey: bool, pkey_index: u16) {
    let mut v = Cqe64::new_unchecked(c);
    let grh = if ud.grh { L3_GRH } else { 0 };
    v.set_flags_rqpn(grh | (u32::from(ud.sl & 0xf) << 24) | (ud.src_qpn & 0x00ff_ffff));
    v.set_slid(ud.slid);
    v.set_ml_path(ud.dlid_path_bits & 0x7f);
    if pkey {
        v.set_imm_inval_pkey(u32::from(pkey_index));
    }
}

/// An error CQE (`REQ_ERR` or `RESP_ERR`).
pub(crate) fn err(
    uidx: u32,
    qpn: u32,
    opcode: u8,
    wqe_opcode: u8,
    wqe_counter: u16,
    syndrome: u8,
    vendor: u8,
) -> RawCqe {
    cqe(uidx, opcode, wqe_counter, |v| {
        v.set_vendor_err_synd(vendor);
        v.set_syndrome(syndrome);
        v.set_s_wqe_opcode_qpn((u32::from(wqe_opcode) << 24) | qpn);
    })
}
