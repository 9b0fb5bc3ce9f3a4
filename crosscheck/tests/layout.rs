//! Every size, offset and constant zverbs copies from rdma-core's headers equals the C
//! compiler's answer from those headers.
//!
//! The C probe's table names each fact by its C expression; this file lists the Rust value
//! that must equal it. Both directions are checked: a C fact with no Rust counterpart, or a
//! Rust entry naming no C fact, fails as surely as a wrong value.

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};

use zverbs_core::{SendFlags, Sge, WcFlags, WcOpcode, WcStatus};
use zverbs_crosscheck::ffi::{self, ZvAvFields, ZvCqeFields, ZvDgramArgs, ZvRq, ZvSq, ZvSrq, ZvWr};
use zverbs_crosscheck::probe;
use zverbs_mlx5dv::prm::cqe::{self, Cqe64, CqeOpcode, Syndrome, err_field, field as cqe_field};
use zverbs_mlx5dv::prm::dv::{self, mlx5dv_ah, mlx5dv_cq, mlx5dv_qp, mlx5dv_srq};
use zverbs_mlx5dv::prm::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, SrqNextSeg,
};
use zverbs_mlx5dv::prm::{self, Field};

/// The size of the field that `f` projects to (never called).
fn field_size<T, F>(_f: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// A one-byte field at `off`.
fn byte(off: usize) -> Field {
    off..off + 1
}

/// The Rust side of the fact table.
#[derive(Default)]
struct Ours(Vec<(String, u64, &'static str)>);

impl Ours {
    /// `name` (a C expression) must equal `value`, which the Rust expression `what` gave.
    fn fact(&mut self, name: impl Into<String>, value: u64, what: &'static str) {
        self.0.push((name.into(), value, what));
    }

    /// The offset and size of C field `ty.member` equal the Rust range `f`.
    fn field(&mut self, ty: &str, member: &str, f: Field, what: &'static str) {
        self.fact(format!("offsetof({ty}, {member})"), f.start as u64, what);
        self.fact(format!("sizeof({ty}.{member})"), f.len() as u64, what);
    }
}

macro_rules! fact {
    ($ours:expr, $name:expr, $value:expr) => {
        $ours.fact($name, ($value) as u64, stringify!($value))
    };
}

macro_rules! field {
    ($ours:expr, $ty:expr, $member:expr, $range:expr) => {
        $ours.field($ty, $member, $range, stringify!($range))
    };
}

/// A `repr(C)` mirror's member: offset and size, as C's `offsetof` and `sizeof`.
macro_rules! member {
    ($ours:expr, $cty:literal, $rty:ty, $($m:ident).+) => {{
        let off = offset_of!($rty, $($m).+);
        let size = field_size(|x: &$rty| &x.$($m).+);
        $ours.field(
            $cty,
            stringify!($($m).+),
            off..off + size,
            concat!("offset_of!(", stringify!($rty), ", ", stringify!($($m).+), ")"),
        )
    }};
}

fn ours() -> Ours {
    let mut o = Ours::default();

    // Control segment (packed: dci_stream_channel_id sits at the odd offset 9).
    let t = "struct mlx5_wqe_ctrl_seg";
    fact!(o, format!("sizeof({t})"), wqe::ctrl::LEN);
    fact!(o, format!("sizeof({t})"), CtrlSeg::<[u8; 16]>::LEN);
    fact!(o, format!("sizeof({t})"), prm::WQE_SEG);
    field!(o, t, "opmod_idx_opcode", wqe::ctrl::OPMOD_IDX_OPCODE);
    field!(o, t, "qpn_ds", wqe::ctrl::QPN_DS);
    field!(o, t, "signature", byte(wqe::ctrl::SIGNATURE));
    field!(
        o,
        t,
        "dci_stream_channel_id",
        wqe::ctrl::DCI_STREAM_CHANNEL_ID
    );
    field!(o, t, "fm_ce_se", byte(wqe::ctrl::FM_CE_SE));
    field!(o, t, "imm", wqe::ctrl::IMM);

    let t = "struct mlx5_wqe_raddr_seg";
    fact!(o, format!("sizeof({t})"), wqe::raddr::LEN);
    fact!(o, format!("sizeof({t})"), RaddrSeg::<[u8; 16]>::LEN);
    field!(o, t, "raddr", wqe::raddr::RADDR);
    field!(o, t, "rkey", wqe::raddr::RKEY);
    field!(o, t, "reserved", wqe::raddr::RESERVED);

    let t = "struct mlx5_wqe_data_seg";
    fact!(o, format!("sizeof({t})"), wqe::data::LEN);
    fact!(o, format!("sizeof({t})"), DataSeg::<[u8; 16]>::LEN);
    field!(o, t, "byte_count", wqe::data::BYTE_COUNT);
    field!(o, t, "lkey", wqe::data::LKEY);
    field!(o, t, "addr", wqe::data::ADDR);

    let t = "struct mlx5_wqe_inl_data_seg";
    fact!(o, format!("sizeof({t})"), wqe::inline::HEADER_LEN);
    fact!(o, format!("sizeof({t})"), wqe::inline::DATA);
    field!(o, t, "byte_count", wqe::inline::BYTE_COUNT);

    let t = "struct mlx5_wqe_atomic_seg";
    fact!(o, format!("sizeof({t})"), wqe::atomic::LEN);
    fact!(o, format!("sizeof({t})"), AtomicSeg::<[u8; 16]>::LEN);
    field!(o, t, "swap_add", wqe::atomic::SWAP_ADD);
    field!(o, t, "compare", wqe::atomic::COMPARE);

    // The address vector, the whole of the datagram segment.
    let t = "struct mlx5_wqe_av";
    fact!(o, format!("sizeof({t})"), wqe::av::LEN);
    fact!(o, format!("sizeof({t})"), DatagramSeg::<[u8; 48]>::LEN);
    field!(o, t, "key.qkey.qkey", wqe::av::QKEY);
    field!(o, t, "key.qkey.reserved", wqe::av::QKEY_RESERVED);
    field!(o, t, "key.dc_key", wqe::av::DC_KEY);
    field!(o, t, "dqp_dct", wqe::av::DQP_DCT);
    field!(o, t, "stat_rate_sl", byte(wqe::av::STAT_RATE_SL));
    field!(o, t, "fl_mlid", byte(wqe::av::FL_MLID));
    field!(o, t, "rlid", wqe::av::RLID);
    field!(o, t, "reserved0", wqe::av::RESERVED0);
    field!(o, t, "rmac", wqe::av::RMAC);
    field!(o, t, "tclass", byte(wqe::av::TCLASS));
    field!(o, t, "hop_limit", byte(wqe::av::HOP_LIMIT));
    field!(o, t, "grh_gid_fl", wqe::av::GRH_GID_FL);
    field!(o, t, "rgid", wqe::av::RGID);
    let t = "struct mlx5_wqe_datagram_seg";
    fact!(o, format!("sizeof({t})"), wqe::av::LEN);
    field!(o, t, "av", 0..wqe::av::LEN);
    fact!(
        o,
        "(sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_datagram_seg)) / 16",
        wqe::UD_HEADER_DS
    );

    // The head of a shared receive WQE.
    let t = "struct mlx5_wqe_srq_next_seg";
    fact!(o, format!("sizeof({t})"), wqe::srq_next::LEN);
    fact!(o, format!("sizeof({t})"), SrqNextSeg::<[u8; 16]>::LEN);
    fact!(o, format!("sizeof({t})"), wqe::SRQ_DATA);
    field!(o, t, "rsvd0", wqe::srq_next::RSVD0);
    field!(o, t, "next_wqe_index", wqe::srq_next::NEXT_WQE_INDEX);
    field!(o, t, "signature", byte(wqe::srq_next::SIGNATURE));
    field!(o, t, "rsvd1", wqe::srq_next::RSVD1);

    // CQEs.
    let t = "struct mlx5_cqe64";
    fact!(o, format!("sizeof({t})"), cqe_field::LEN);
    fact!(o, format!("sizeof({t})"), Cqe64::<[u8; 64]>::LEN);
    field!(o, t, "wqe_id", cqe_field::WQE_ID);
    field!(o, t, "ml_path", byte(cqe_field::ML_PATH));
    field!(o, t, "slid", cqe_field::SLID);
    field!(o, t, "flags_rqpn", cqe_field::FLAGS_RQPN);
    field!(o, t, "hds_ip_ext", byte(cqe_field::HDS_IP_EXT));
    field!(o, t, "l4_hdr_type_etc", byte(cqe_field::L4_L3_HDR_TYPE));
    field!(o, t, "srqn_uidx", cqe_field::SRQN_UIDX);
    field!(o, t, "imm_inval_pkey", cqe_field::IMM_INVAL_PKEY);
    field!(o, t, "byte_cnt", cqe_field::BYTE_CNT);
    field!(o, t, "timestamp", cqe_field::TIMESTAMP);
    field!(o, t, "sop_drop_qpn", cqe_field::SOP_DROP_QPN);
    field!(o, t, "wqe_counter", cqe_field::WQE_COUNTER);
    field!(o, t, "signature", byte(cqe_field::SIGNATURE));
    field!(o, t, "op_own", byte(cqe_field::OP_OWN));

    let t = "struct mlx5_err_cqe";
    fact!(o, format!("sizeof({t})"), cqe_field::LEN);
    field!(o, t, "srqn", err_field::SRQN);
    field!(o, t, "vendor_err_synd", byte(err_field::VENDOR_ERR_SYND));
    field!(o, t, "syndrome", byte(err_field::SYNDROME));
    field!(o, t, "s_wqe_opcode_qpn", err_field::S_WQE_OPCODE_QPN);
    field!(o, t, "wqe_counter", err_field::WQE_COUNTER);
    field!(o, t, "signature", byte(cqe_field::SIGNATURE));
    field!(o, t, "op_own", byte(cqe_field::OP_OWN));

    // What mlx5dv_init_obj fills, mirrored in prm::dv.
    let t = "struct mlx5dv_qp";
    fact!(o, format!("sizeof({t})"), size_of::<mlx5dv_qp>());
    fact!(o, format!("alignof({t})"), align_of::<mlx5dv_qp>());
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, dbrec);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, sq);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, sq.buf);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, sq.wqe_cnt);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, sq.stride);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, rq);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, rq.buf);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, rq.wqe_cnt);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, rq.stride);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, bf);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, bf.reg);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, bf.size);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, comp_mask);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, uar_mmap_offset);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, tirn);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, tisn);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, rqn);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, sqn);
    member!(o, "struct mlx5dv_qp", mlx5dv_qp, tir_icm_addr);

    let t = "struct mlx5dv_cq";
    fact!(o, format!("sizeof({t})"), size_of::<mlx5dv_cq>());
    fact!(o, format!("alignof({t})"), align_of::<mlx5dv_cq>());
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, buf);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, dbrec);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, cqe_cnt);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, cqe_size);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, cq_uar);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, cqn);
    member!(o, "struct mlx5dv_cq", mlx5dv_cq, comp_mask);

    let t = "struct mlx5dv_srq";
    fact!(o, format!("sizeof({t})"), size_of::<mlx5dv_srq>());
    fact!(o, format!("alignof({t})"), align_of::<mlx5dv_srq>());
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, buf);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, dbrec);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, stride);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, head);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, tail);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, comp_mask);
    member!(o, "struct mlx5dv_srq", mlx5dv_srq, srqn);
    fact!(o, "MLX5DV_SRQ_MASK_SRQN", dv::MLX5DV_SRQ_MASK_SRQN);

    let t = "struct mlx5dv_ah";
    fact!(o, format!("sizeof({t})"), size_of::<mlx5dv_ah>());
    fact!(o, format!("alignof({t})"), align_of::<mlx5dv_ah>());
    member!(o, "struct mlx5dv_ah", mlx5dv_ah, av);
    member!(o, "struct mlx5dv_ah", mlx5dv_ah, comp_mask);

    // zverbs-core's Sge is handed to libibverbs as a struct ibv_sge.
    let t = "struct ibv_sge";
    fact!(o, format!("sizeof({t})"), size_of::<Sge>());
    fact!(o, format!("alignof({t})"), align_of::<Sge>());
    member!(o, "struct ibv_sge", Sge, addr);
    member!(o, "struct ibv_sge", Sge, length);
    member!(o, "struct ibv_sge", Sge, lkey);

    // Send WQE opcodes and fm_ce_se bits.
    fact!(o, "MLX5_OPCODE_NOP", prm::opcode::NOP);
    fact!(o, "MLX5_OPCODE_RDMA_WRITE", prm::opcode::RDMA_WRITE);
    fact!(o, "MLX5_OPCODE_RDMA_WRITE_IMM", prm::opcode::RDMA_WRITE_IMM);
    fact!(o, "MLX5_OPCODE_SEND", prm::opcode::SEND);
    fact!(o, "MLX5_OPCODE_SEND_IMM", prm::opcode::SEND_IMM);
    fact!(o, "MLX5_OPCODE_RDMA_READ", prm::opcode::RDMA_READ);
    fact!(o, "MLX5_OPCODE_ATOMIC_CS", prm::opcode::ATOMIC_CS);
    fact!(o, "MLX5_OPCODE_ATOMIC_FA", prm::opcode::ATOMIC_FA);
    fact!(o, "MLX5_WQE_CTRL_CQ_UPDATE", prm::fm_ce_se::CQ_UPDATE);
    fact!(o, "MLX5_WQE_CTRL_SOLICITED", prm::fm_ce_se::SOLICITED);
    fact!(o, "MLX5_WQE_CTRL_FENCE", prm::fm_ce_se::FENCE);
    fact!(
        o,
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE",
        prm::fm_ce_se::INITIATOR_SMALL_FENCE
    );

    // CQE opcodes.
    fact!(o, "MLX5_CQE_REQ", CqeOpcode::Req.to_raw());
    fact!(o, "MLX5_CQE_RESP_WR_IMM", CqeOpcode::RespWrImm.to_raw());
    fact!(o, "MLX5_CQE_RESP_SEND", CqeOpcode::RespSend.to_raw());
    fact!(o, "MLX5_CQE_RESP_SEND_IMM", CqeOpcode::RespSendImm.to_raw());
    fact!(o, "MLX5_CQE_RESP_SEND_INV", CqeOpcode::RespSendInv.to_raw());
    fact!(o, "MLX5_CQE_RESIZE_CQ", CqeOpcode::ResizeCq.to_raw());
    fact!(o, "MLX5_CQE_NO_PACKET", CqeOpcode::NoPacket.to_raw());
    fact!(o, "MLX5_CQE_SIG_ERR", CqeOpcode::SigErr.to_raw());
    fact!(o, "MLX5_CQE_REQ_ERR", CqeOpcode::ReqErr.to_raw());
    fact!(o, "MLX5_CQE_RESP_ERR", CqeOpcode::RespErr.to_raw());
    fact!(o, "MLX5_CQE_INVALID", CqeOpcode::Invalid.to_raw());
    fact!(o, "MLX5_CQE_INVALID", cqe::CQE_INVALID);

    // Error syndromes.
    use Syndrome as S;
    fact!(
        o,
        "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
        S::LocalLengthErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR",
        S::LocalQpOpErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR",
        S::LocalProtErr.to_raw()
    );
    fact!(o, "MLX5_CQE_SYNDROME_WR_FLUSH_ERR", S::WrFlushErr.to_raw());
    fact!(o, "MLX5_CQE_SYNDROME_MW_BIND_ERR", S::MwBindErr.to_raw());
    fact!(o, "MLX5_CQE_SYNDROME_BAD_RESP_ERR", S::BadRespErr.to_raw());
    fact!(
        o,
        "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR",
        S::LocalAccessErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR",
        S::RemoteInvalReqErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR",
        S::RemoteAccessErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_REMOTE_OP_ERR",
        S::RemoteOpErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
        S::TransportRetryExcErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR",
        S::RnrRetryExcErr.to_raw()
    );
    fact!(
        o,
        "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR",
        S::RemoteAbortedErr.to_raw()
    );

    // Other mlx5 constants.
    fact!(o, "MLX5_INLINE_SEG", prm::INLINE_SEG);
    fact!(o, "MLX5_INVALID_LKEY", prm::INVALID_LKEY);
    fact!(o, "MLX5_EXTENDED_UD_AV", prm::EXTENDED_UD_AV);
    fact!(o, "MLX5_RCV_DBR", prm::RCV_DBR);
    fact!(o, "MLX5_SND_DBR", prm::SND_DBR);
    fact!(o, "MLX5_SEND_WQE_BB", prm::SEND_WQE_BB);
    fact!(o, "MLX5_INLINE_SCATTER_32", cqe::INLINE_SCATTER_32);
    fact!(o, "MLX5_INLINE_SCATTER_64", cqe::INLINE_SCATTER_64);
    fact!(o, "MLX5_CQE_OWNER_MASK", cqe::OWNER_MASK);
    fact!(o, "MLX5_CQ_DOORBELL", prm::CQ_DOORBELL);
    fact!(o, "MLX5_CQ_DB_REQ_NOT_SOL", prm::cq_arm::REQ_NOT_SOL);
    fact!(o, "MLX5_CQ_DB_REQ_NOT", prm::cq_arm::REQ_NOT);

    // libibverbs numbers that zverbs-core copies.
    use WcStatus as W;
    fact!(o, "IBV_WC_SUCCESS", W::Success.to_raw());
    fact!(o, "IBV_WC_LOC_LEN_ERR", W::LocLenErr.to_raw());
    fact!(o, "IBV_WC_LOC_QP_OP_ERR", W::LocQpOpErr.to_raw());
    fact!(o, "IBV_WC_LOC_EEC_OP_ERR", W::LocEecOpErr.to_raw());
    fact!(o, "IBV_WC_LOC_PROT_ERR", W::LocProtErr.to_raw());
    fact!(o, "IBV_WC_WR_FLUSH_ERR", W::WrFlushErr.to_raw());
    fact!(o, "IBV_WC_MW_BIND_ERR", W::MwBindErr.to_raw());
    fact!(o, "IBV_WC_BAD_RESP_ERR", W::BadRespErr.to_raw());
    fact!(o, "IBV_WC_LOC_ACCESS_ERR", W::LocAccessErr.to_raw());
    fact!(o, "IBV_WC_REM_INV_REQ_ERR", W::RemInvReqErr.to_raw());
    fact!(o, "IBV_WC_REM_ACCESS_ERR", W::RemAccessErr.to_raw());
    fact!(o, "IBV_WC_REM_OP_ERR", W::RemOpErr.to_raw());
    fact!(o, "IBV_WC_RETRY_EXC_ERR", W::RetryExcErr.to_raw());
    fact!(o, "IBV_WC_RNR_RETRY_EXC_ERR", W::RnrRetryExcErr.to_raw());
    fact!(o, "IBV_WC_LOC_RDD_VIOL_ERR", W::LocRddViolErr.to_raw());
    fact!(o, "IBV_WC_REM_INV_RD_REQ_ERR", W::RemInvRdReqErr.to_raw());
    fact!(o, "IBV_WC_REM_ABORT_ERR", W::RemAbortErr.to_raw());
    fact!(o, "IBV_WC_INV_EECN_ERR", W::InvEecnErr.to_raw());
    fact!(o, "IBV_WC_INV_EEC_STATE_ERR", W::InvEecStateErr.to_raw());
    fact!(o, "IBV_WC_FATAL_ERR", W::FatalErr.to_raw());
    fact!(o, "IBV_WC_RESP_TIMEOUT_ERR", W::RespTimeoutErr.to_raw());
    fact!(o, "IBV_WC_GENERAL_ERR", W::GeneralErr.to_raw());
    fact!(o, "IBV_WC_TM_ERR", W::TmErr.to_raw());
    fact!(o, "IBV_WC_TM_RNDV_INCOMPLETE", W::TmRndvIncomplete.to_raw());
    fact!(o, "IBV_WC_SEND", WcOpcode::Send.to_raw());
    fact!(o, "IBV_WC_RDMA_WRITE", WcOpcode::RdmaWrite.to_raw());
    fact!(o, "IBV_WC_RDMA_READ", WcOpcode::RdmaRead.to_raw());
    fact!(o, "IBV_WC_COMP_SWAP", WcOpcode::CompSwap.to_raw());
    fact!(o, "IBV_WC_FETCH_ADD", WcOpcode::FetchAdd.to_raw());
    fact!(o, "IBV_WC_RECV", WcOpcode::Recv.to_raw());
    fact!(
        o,
        "IBV_WC_RECV_RDMA_WITH_IMM",
        WcOpcode::RecvRdmaWithImm.to_raw()
    );
    fact!(o, "IBV_WC_GRH", WcFlags::GRH.bits());
    fact!(o, "IBV_WC_WITH_IMM", WcFlags::WITH_IMM.bits());
    fact!(o, "IBV_SEND_FENCE", SendFlags::FENCE.bits());
    fact!(o, "IBV_SEND_SIGNALED", SendFlags::SIGNALED.bits());
    fact!(o, "IBV_SEND_SOLICITED", SendFlags::SOLICITED.bits());
    fact!(o, "IBV_SEND_INLINE", SendFlags::INLINE.bits());

    // The probe's own structs, mirrored in zverbs_crosscheck::ffi.
    fact!(o, "sizeof(struct zv_cqe_fields)", size_of::<ZvCqeFields>());
    fact!(
        o,
        "alignof(struct zv_cqe_fields)",
        align_of::<ZvCqeFields>()
    );
    fact!(o, "sizeof(struct zv_av_fields)", size_of::<ZvAvFields>());
    fact!(o, "alignof(struct zv_av_fields)", align_of::<ZvAvFields>());
    fact!(o, "sizeof(struct zv_dgram_args)", size_of::<ZvDgramArgs>());
    fact!(
        o,
        "alignof(struct zv_dgram_args)",
        align_of::<ZvDgramArgs>()
    );
    fact!(o, "sizeof(struct zv_wr)", size_of::<ZvWr>());
    fact!(o, "alignof(struct zv_wr)", align_of::<ZvWr>());
    fact!(o, "sizeof(struct zv_sq)", size_of::<ZvSq>());
    fact!(o, "alignof(struct zv_sq)", align_of::<ZvSq>());
    fact!(o, "sizeof(struct zv_rq)", size_of::<ZvRq>());
    fact!(o, "alignof(struct zv_rq)", align_of::<ZvRq>());
    fact!(o, "sizeof(struct zv_srq)", size_of::<ZvSrq>());
    fact!(o, "alignof(struct zv_srq)", align_of::<ZvSrq>());
    fact!(o, "ZV_QPT_RC", ffi::qpt::RC);
    fact!(o, "ZV_QPT_UD", ffi::qpt::UD);
    fact!(o, "ZV_QPT_RAW", ffi::qpt::RAW);
    fact!(o, "ZV_OP_WRITE", ffi::op::WRITE);
    fact!(o, "ZV_OP_WRITE_IMM", ffi::op::WRITE_IMM);
    fact!(o, "ZV_OP_SEND", ffi::op::SEND);
    fact!(o, "ZV_OP_SEND_IMM", ffi::op::SEND_IMM);
    fact!(o, "ZV_OP_READ", ffi::op::READ);
    fact!(o, "ZV_OP_CS", ffi::op::CS);
    fact!(o, "ZV_OP_FA", ffi::op::FA);
    fact!(o, "ZV_OP_NOP", ffi::op::NOP);

    o
}

#[test]
fn sizes_offsets_and_constants_match_the_header() {
    let c: BTreeMap<&str, u64> = probe::facts().into_iter().collect();
    let ours = ours();
    let mut errors = Vec::new();

    for (name, value, what) in &ours.0 {
        match c.get(name.as_str()) {
            None => errors.push(format!(
                "{name}: no such fact in the C probe (Rust: {what})"
            )),
            Some(&cv) if cv != *value => {
                errors.push(format!("{name}: C says {cv}, Rust `{what}` says {value}"))
            }
            Some(_) => {}
        }
    }
    let covered: std::collections::BTreeSet<&str> =
        ours.0.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in c.keys() {
        if !covered.contains(name) {
            errors.push(format!("{name}: C fact with no Rust counterpart"));
        }
    }

    eprintln!(
        "layout: {} C facts, {} Rust values compared",
        c.len(),
        ours.0.len()
    );
    assert!(
        errors.is_empty(),
        "{} mismatches:\n  {}",
        errors.len(),
        errors.join("\n  ")
    );
}

#[test]
fn fact_names_are_unique() {
    let facts = probe::facts();
    let mut seen = std::collections::BTreeSet::new();
    for (name, _) in &facts {
        assert!(seen.insert(*name), "fact {name} listed twice");
    }
}
