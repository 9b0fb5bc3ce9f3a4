/*
 * The C reference for zverbs' mlx5 layouts, built only from rdma-core's installed headers.
 *
 * - zv_facts: every sizeof / offsetof / constant the Rust side relies on.
 * - zv_set_*_seg: WQE segments written with mlx5dv.h's helpers or through its structs.
 * - zv_set_datagram_from_av / zv_read_av: the datagram segment of a UD send as libmlx5's
 *   `set_datagram_seg` fills it from an address handle's vector, and its fields read back.
 * - zv_read_cqe: a CQE read through struct mlx5_cqe64 / struct mlx5_err_cqe and the
 *   mlx5dv_get_cqe_* helpers, with libmlx5's syndrome -> ibv_wc_status mapping and its
 *   IBV_WC_GRH rule for receive completions.
 * - zv_post_send / zv_ring_db: a send queue that lays WQEs out the way libmlx5 (rdma-core 44,
 *   providers/mlx5/qp.c, `_mlx5_post_send` and `post_send_db`) does for an RC or a UD QP.
 * - zv_post_recv: a receive queue that lays receive WQEs out as libmlx5's `mlx5_post_recv`.
 * - zv_post_srq_recv / zv_srq_link: shared receive WQEs as libmlx5's `mlx5_post_srq_recv`
 *   writes them and its free list as `set_srq_buf_ll` links it.
 * - zv_srq_post / zv_srq_free: a shared receive queue as libmlx5 44 keeps one: posts taking
 *   the head of the free list (`mlx5_post_srq_recv`), frees linking a WQE behind the tail
 *   (`mlx5_free_srq_wqe`, before rdma-core 47 moved freed WQEs through a wait queue).
 */
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#include "probe.h"

/* ---------------------------------------------------------------------------------------- */
/* The fact table                                                                            */
/* ---------------------------------------------------------------------------------------- */

#define SIZE(T) { "sizeof(" #T ")", sizeof(T) }
#define ALIGN(T) { "alignof(" #T ")", _Alignof(T) }
#define OFF(T, m) { "offsetof(" #T ", " #m ")", offsetof(T, m) }
#define MSIZE(T, m) { "sizeof(" #T "." #m ")", sizeof(((T *)0)->m) }
/* A field: its offset and its size. */
#define FIELD(T, m) OFF(T, m), MSIZE(T, m)
#define CONST(c) { #c, (uint64_t)(c) }

static const struct zv_fact facts[] = {
	/* Send WQE segments. */
	SIZE(struct mlx5_wqe_ctrl_seg),
	FIELD(struct mlx5_wqe_ctrl_seg, opmod_idx_opcode),
	FIELD(struct mlx5_wqe_ctrl_seg, qpn_ds),
	FIELD(struct mlx5_wqe_ctrl_seg, signature),
	FIELD(struct mlx5_wqe_ctrl_seg, dci_stream_channel_id),
	FIELD(struct mlx5_wqe_ctrl_seg, fm_ce_se),
	FIELD(struct mlx5_wqe_ctrl_seg, imm),

	SIZE(struct mlx5_wqe_raddr_seg),
	FIELD(struct mlx5_wqe_raddr_seg, raddr),
	FIELD(struct mlx5_wqe_raddr_seg, rkey),
	FIELD(struct mlx5_wqe_raddr_seg, reserved),

	SIZE(struct mlx5_wqe_data_seg),
	FIELD(struct mlx5_wqe_data_seg, byte_count),
	FIELD(struct mlx5_wqe_data_seg, lkey),
	FIELD(struct mlx5_wqe_data_seg, addr),

	SIZE(struct mlx5_wqe_inl_data_seg),
	FIELD(struct mlx5_wqe_inl_data_seg, byte_count),

	SIZE(struct mlx5_wqe_atomic_seg),
	FIELD(struct mlx5_wqe_atomic_seg, swap_add),
	FIELD(struct mlx5_wqe_atomic_seg, compare),

	/* The address vector and the datagram segment of UD (and DC) sends. */
	SIZE(struct mlx5_wqe_av),
	FIELD(struct mlx5_wqe_av, key.qkey.qkey),
	FIELD(struct mlx5_wqe_av, key.qkey.reserved),
	FIELD(struct mlx5_wqe_av, key.dc_key),
	FIELD(struct mlx5_wqe_av, dqp_dct),
	FIELD(struct mlx5_wqe_av, stat_rate_sl),
	FIELD(struct mlx5_wqe_av, fl_mlid),
	FIELD(struct mlx5_wqe_av, rlid),
	FIELD(struct mlx5_wqe_av, reserved0),
	FIELD(struct mlx5_wqe_av, rmac),
	FIELD(struct mlx5_wqe_av, tclass),
	FIELD(struct mlx5_wqe_av, hop_limit),
	FIELD(struct mlx5_wqe_av, grh_gid_fl),
	FIELD(struct mlx5_wqe_av, rgid),
	SIZE(struct mlx5_wqe_datagram_seg),
	FIELD(struct mlx5_wqe_datagram_seg, av),
	/* A UD send's control and datagram segments, in 16-byte units: one basic block. */
	CONST((sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_datagram_seg)) / 16),

	/* The head of a shared receive WQE. */
	SIZE(struct mlx5_wqe_srq_next_seg),
	FIELD(struct mlx5_wqe_srq_next_seg, rsvd0),
	FIELD(struct mlx5_wqe_srq_next_seg, next_wqe_index),
	FIELD(struct mlx5_wqe_srq_next_seg, signature),
	FIELD(struct mlx5_wqe_srq_next_seg, rsvd1),

	/* CQEs. */
	SIZE(struct mlx5_cqe64),
	FIELD(struct mlx5_cqe64, wqe_id),
	FIELD(struct mlx5_cqe64, ml_path),
	FIELD(struct mlx5_cqe64, slid),
	FIELD(struct mlx5_cqe64, flags_rqpn),
	FIELD(struct mlx5_cqe64, hds_ip_ext),
	FIELD(struct mlx5_cqe64, l4_hdr_type_etc),
	FIELD(struct mlx5_cqe64, srqn_uidx),
	FIELD(struct mlx5_cqe64, imm_inval_pkey),
	FIELD(struct mlx5_cqe64, byte_cnt),
	FIELD(struct mlx5_cqe64, timestamp),
	FIELD(struct mlx5_cqe64, sop_drop_qpn),
	FIELD(struct mlx5_cqe64, wqe_counter),
	FIELD(struct mlx5_cqe64, signature),
	FIELD(struct mlx5_cqe64, op_own),

	SIZE(struct mlx5_err_cqe),
	FIELD(struct mlx5_err_cqe, srqn),
	FIELD(struct mlx5_err_cqe, vendor_err_synd),
	FIELD(struct mlx5_err_cqe, syndrome),
	FIELD(struct mlx5_err_cqe, s_wqe_opcode_qpn),
	FIELD(struct mlx5_err_cqe, wqe_counter),
	FIELD(struct mlx5_err_cqe, signature),
	FIELD(struct mlx5_err_cqe, op_own),

	/* What mlx5dv_init_obj fills. */
	SIZE(struct mlx5dv_qp),
	ALIGN(struct mlx5dv_qp),
	FIELD(struct mlx5dv_qp, dbrec),
	FIELD(struct mlx5dv_qp, sq),
	FIELD(struct mlx5dv_qp, sq.buf),
	FIELD(struct mlx5dv_qp, sq.wqe_cnt),
	FIELD(struct mlx5dv_qp, sq.stride),
	FIELD(struct mlx5dv_qp, rq),
	FIELD(struct mlx5dv_qp, rq.buf),
	FIELD(struct mlx5dv_qp, rq.wqe_cnt),
	FIELD(struct mlx5dv_qp, rq.stride),
	FIELD(struct mlx5dv_qp, bf),
	FIELD(struct mlx5dv_qp, bf.reg),
	FIELD(struct mlx5dv_qp, bf.size),
	FIELD(struct mlx5dv_qp, comp_mask),
	FIELD(struct mlx5dv_qp, uar_mmap_offset),
	FIELD(struct mlx5dv_qp, tirn),
	FIELD(struct mlx5dv_qp, tisn),
	FIELD(struct mlx5dv_qp, rqn),
	FIELD(struct mlx5dv_qp, sqn),
	FIELD(struct mlx5dv_qp, tir_icm_addr),

	SIZE(struct mlx5dv_cq),
	ALIGN(struct mlx5dv_cq),
	FIELD(struct mlx5dv_cq, buf),
	FIELD(struct mlx5dv_cq, dbrec),
	FIELD(struct mlx5dv_cq, cqe_cnt),
	FIELD(struct mlx5dv_cq, cqe_size),
	FIELD(struct mlx5dv_cq, cq_uar),
	FIELD(struct mlx5dv_cq, cqn),
	FIELD(struct mlx5dv_cq, comp_mask),

	SIZE(struct mlx5dv_srq),
	ALIGN(struct mlx5dv_srq),
	FIELD(struct mlx5dv_srq, buf),
	FIELD(struct mlx5dv_srq, dbrec),
	FIELD(struct mlx5dv_srq, stride),
	FIELD(struct mlx5dv_srq, head),
	FIELD(struct mlx5dv_srq, tail),
	FIELD(struct mlx5dv_srq, comp_mask),
	FIELD(struct mlx5dv_srq, srqn),
	CONST(MLX5DV_SRQ_MASK_SRQN),

	SIZE(struct mlx5dv_ah),
	ALIGN(struct mlx5dv_ah),
	FIELD(struct mlx5dv_ah, av),
	FIELD(struct mlx5dv_ah, comp_mask),

	/* zverbs-core's Sge is handed to libibverbs as a struct ibv_sge. */
	SIZE(struct ibv_sge),
	ALIGN(struct ibv_sge),
	FIELD(struct ibv_sge, addr),
	FIELD(struct ibv_sge, length),
	FIELD(struct ibv_sge, lkey),

	/* Send WQE opcodes. */
	CONST(MLX5_OPCODE_NOP),
	CONST(MLX5_OPCODE_RDMA_WRITE),
	CONST(MLX5_OPCODE_RDMA_WRITE_IMM),
	CONST(MLX5_OPCODE_SEND),
	CONST(MLX5_OPCODE_SEND_IMM),
	CONST(MLX5_OPCODE_RDMA_READ),
	CONST(MLX5_OPCODE_ATOMIC_CS),
	CONST(MLX5_OPCODE_ATOMIC_FA),

	/* fm_ce_se bits. */
	CONST(MLX5_WQE_CTRL_CQ_UPDATE),
	CONST(MLX5_WQE_CTRL_SOLICITED),
	CONST(MLX5_WQE_CTRL_FENCE),
	CONST(MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE),

	/* CQE opcodes. */
	CONST(MLX5_CQE_REQ),
	CONST(MLX5_CQE_RESP_WR_IMM),
	CONST(MLX5_CQE_RESP_SEND),
	CONST(MLX5_CQE_RESP_SEND_IMM),
	CONST(MLX5_CQE_RESP_SEND_INV),
	CONST(MLX5_CQE_RESIZE_CQ),
	CONST(MLX5_CQE_NO_PACKET),
	CONST(MLX5_CQE_SIG_ERR),
	CONST(MLX5_CQE_REQ_ERR),
	CONST(MLX5_CQE_RESP_ERR),
	CONST(MLX5_CQE_INVALID),

	/* Error syndromes. */
	CONST(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR),
	CONST(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR),
	CONST(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR),
	CONST(MLX5_CQE_SYNDROME_WR_FLUSH_ERR),
	CONST(MLX5_CQE_SYNDROME_MW_BIND_ERR),
	CONST(MLX5_CQE_SYNDROME_BAD_RESP_ERR),
	CONST(MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR),
	CONST(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR),
	CONST(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR),
	CONST(MLX5_CQE_SYNDROME_REMOTE_OP_ERR),
	CONST(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR),
	CONST(MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR),
	CONST(MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR),

	/* Other mlx5 constants. */
	CONST(MLX5_INLINE_SEG),
	CONST(MLX5_INVALID_LKEY),
	CONST(MLX5_EXTENDED_UD_AV),
	CONST(MLX5_RCV_DBR),
	CONST(MLX5_SND_DBR),
	CONST(MLX5_SEND_WQE_BB),
	CONST(MLX5_INLINE_SCATTER_32),
	CONST(MLX5_INLINE_SCATTER_64),
	CONST(MLX5_CQE_OWNER_MASK),
	CONST(MLX5_CQ_DOORBELL),
	CONST(MLX5_CQ_DB_REQ_NOT_SOL),
	CONST(MLX5_CQ_DB_REQ_NOT),

	/* libibverbs: completion statuses, opcodes and flags, send flags. */
	CONST(IBV_WC_SUCCESS),
	CONST(IBV_WC_LOC_LEN_ERR),
	CONST(IBV_WC_LOC_QP_OP_ERR),
	CONST(IBV_WC_LOC_EEC_OP_ERR),
	CONST(IBV_WC_LOC_PROT_ERR),
	CONST(IBV_WC_WR_FLUSH_ERR),
	CONST(IBV_WC_MW_BIND_ERR),
	CONST(IBV_WC_BAD_RESP_ERR),
	CONST(IBV_WC_LOC_ACCESS_ERR),
	CONST(IBV_WC_REM_INV_REQ_ERR),
	CONST(IBV_WC_REM_ACCESS_ERR),
	CONST(IBV_WC_REM_OP_ERR),
	CONST(IBV_WC_RETRY_EXC_ERR),
	CONST(IBV_WC_RNR_RETRY_EXC_ERR),
	CONST(IBV_WC_LOC_RDD_VIOL_ERR),
	CONST(IBV_WC_REM_INV_RD_REQ_ERR),
	CONST(IBV_WC_REM_ABORT_ERR),
	CONST(IBV_WC_INV_EECN_ERR),
	CONST(IBV_WC_INV_EEC_STATE_ERR),
	CONST(IBV_WC_FATAL_ERR),
	CONST(IBV_WC_RESP_TIMEOUT_ERR),
	CONST(IBV_WC_GENERAL_ERR),
	CONST(IBV_WC_TM_ERR),
	CONST(IBV_WC_TM_RNDV_INCOMPLETE),
	CONST(IBV_WC_SEND),
	CONST(IBV_WC_RDMA_WRITE),
	CONST(IBV_WC_RDMA_READ),
	CONST(IBV_WC_COMP_SWAP),
	CONST(IBV_WC_FETCH_ADD),
	CONST(IBV_WC_RECV),
	CONST(IBV_WC_RECV_RDMA_WITH_IMM),
	CONST(IBV_WC_GRH),
	CONST(IBV_WC_WITH_IMM),
	CONST(IBV_SEND_FENCE),
	CONST(IBV_SEND_SIGNALED),
	CONST(IBV_SEND_SOLICITED),
	CONST(IBV_SEND_INLINE),

	/* This probe's own structs, mirrored in Rust. */
	SIZE(struct zv_cqe_fields),
	ALIGN(struct zv_cqe_fields),
	SIZE(struct zv_av_fields),
	ALIGN(struct zv_av_fields),
	SIZE(struct zv_dgram_args),
	ALIGN(struct zv_dgram_args),
	SIZE(struct zv_wr),
	ALIGN(struct zv_wr),
	SIZE(struct zv_sq),
	ALIGN(struct zv_sq),
	SIZE(struct zv_rq),
	ALIGN(struct zv_rq),
	SIZE(struct zv_srq),
	ALIGN(struct zv_srq),
	CONST(ZV_QPT_RC),
	CONST(ZV_QPT_UD),
	CONST(ZV_QPT_RAW),
	CONST(ZV_OP_WRITE),
	CONST(ZV_OP_WRITE_IMM),
	CONST(ZV_OP_SEND),
	CONST(ZV_OP_SEND_IMM),
	CONST(ZV_OP_READ),
	CONST(ZV_OP_CS),
	CONST(ZV_OP_FA),
	CONST(ZV_OP_NOP),
};

const struct zv_fact *zv_facts(size_t *len)
{
	*len = sizeof(facts) / sizeof(facts[0]);
	return facts;
}

/* ---------------------------------------------------------------------------------------- */
/* Segments                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/*
 * `imm` is the host value; mlx5dv_set_ctrl_seg stores its argument as given, and a verbs
 * caller hands it the big-endian imm_data, so the helper gets htobe32(imm).
 */
void zv_set_ctrl_seg(void *buf, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn,
		     uint8_t fm_ce_se, uint8_t ds, uint8_t signature, uint32_t imm)
{
	mlx5dv_set_ctrl_seg(buf, pi, opcode, opmod, qpn, fm_ce_se, ds, signature, htobe32(imm));
}

void zv_set_data_seg(void *buf, uint32_t length, uint32_t lkey, uint64_t addr)
{
	mlx5dv_set_data_seg(buf, length, lkey, (uintptr_t)addr);
}

void zv_set_raddr_seg(void *buf, uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *seg = buf;

	seg->raddr = htobe64(raddr);
	seg->rkey = htobe32(rkey);
	seg->reserved = 0;
}

void zv_set_atomic_seg(void *buf, uint64_t swap_add, uint64_t compare)
{
	struct mlx5_wqe_atomic_seg *seg = buf;

	seg->swap_add = htobe64(swap_add);
	seg->compare = htobe64(compare);
}

/* mlx5dv_set_dgram_seg: every field but reserved0, which it leaves as it was. */
void zv_set_dgram_seg(void *buf, const struct zv_dgram_args *a)
{
	uint8_t rmac[6], rgid[16];

	memcpy(rmac, a->rmac, sizeof(rmac));
	memcpy(rgid, a->rgid, sizeof(rgid));
	mlx5dv_set_dgram_seg(buf, a->key, a->dqp_dct, a->ext, a->stat_rate_sl, a->fl_mlid, a->rlid,
			     rmac, a->tclass, a->hop_limit, a->grh_gid_fl, rgid);
}

/*
 * The datagram segment of a UD send, as libmlx5's `set_datagram_seg` (qp.c) fills it: the
 * address handle's vector copied whole, then the destination QP with MLX5_EXTENDED_UD_AV and
 * the Q_Key written over it through struct mlx5_wqe_av.
 */
void zv_set_datagram_from_av(void *buf, const void *av, uint32_t remote_qpn, uint32_t qkey)
{
	struct mlx5_wqe_datagram_seg *dseg = buf;

	memcpy(&dseg->av, av, sizeof(dseg->av));
	dseg->av.dqp_dct = htobe32(remote_qpn | MLX5_EXTENDED_UD_AV);
	dseg->av.key.qkey.qkey = htobe32(qkey);
}

/* The datagram segment of a DC initiator's send, as libmlx5's `mlx5_send_wr_set_dc_addr`
 * (behind mlx5dv_wr_set_dc_addr) fills it: the address handle's vector, the DCT number and the
 * extended-AV flag or-ed into its dqp_dct, the whole 8-byte access key over the key. */
void zv_set_dc_datagram_from_av(void *buf, const void *av, uint32_t dctn, uint64_t dc_key)
{
	struct mlx5_wqe_datagram_seg *dseg = buf;

	memcpy(&dseg->av, av, sizeof(dseg->av));
	dseg->av.dqp_dct |= htobe32(dctn | MLX5_EXTENDED_UD_AV);
	dseg->av.key.dc_key = htobe64(dc_key);
}

void zv_read_av(const void *buf, struct zv_av_fields *out)
{
	const struct mlx5_wqe_av *av = buf;

	memset(out, 0, sizeof(*out));
	out->dc_key = be64toh(av->key.dc_key);
	out->qkey = be32toh(av->key.qkey.qkey);
	out->qkey_reserved = be32toh(av->key.qkey.reserved);
	out->dqp_dct = be32toh(av->dqp_dct);
	out->grh_gid_fl = be32toh(av->grh_gid_fl);
	out->rlid = be16toh(av->rlid);
	out->stat_rate_sl = av->stat_rate_sl;
	out->fl_mlid = av->fl_mlid;
	out->tclass = av->tclass;
	out->hop_limit = av->hop_limit;
	memcpy(out->rmac, av->rmac, sizeof(out->rmac));
	memcpy(out->rgid, av->rgid, sizeof(out->rgid));
}

/* ---------------------------------------------------------------------------------------- */
/* CQEs                                                                                      */
/* ---------------------------------------------------------------------------------------- */

void zv_read_cqe(const void *buf, struct zv_cqe_fields *out)
{
	/* The helpers take a non-const pointer; they only read. */
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)buf;
	const struct mlx5_err_cqe *ecqe = buf;

	memset(out, 0, sizeof(*out));
	out->timestamp = be64toh(cqe->timestamp);
	out->srqn_uidx = be32toh(cqe->srqn_uidx);
	out->imm_inval_pkey = be32toh(cqe->imm_inval_pkey);
	out->byte_cnt = be32toh(cqe->byte_cnt);
	out->sop_drop_qpn = be32toh(cqe->sop_drop_qpn);
	out->flags_rqpn = be32toh(cqe->flags_rqpn);
	/* libmlx5 (cq.c, handle_responder and mlx5_cq_read_wc_flags): a receive completion has
	 * IBV_WC_GRH when the two bits above the SL in flags_rqpn are not both zero. */
	out->wc_grh = ((be32toh(cqe->flags_rqpn) >> 28) & 3) ? IBV_WC_GRH : 0;
	/* The fields of a UD receive, as libmlx5 (cq.c, handle_responder and the
	 * mlx5_cq_read_wc_* readers) takes them; the SRQ number as its poller looks it up. */
	out->src_qp = be32toh(cqe->flags_rqpn) & 0xffffff;
	out->sl = (be32toh(cqe->flags_rqpn) >> 24) & 0xf;
	out->slid = be16toh(cqe->slid);
	out->ml_path = cqe->ml_path;
	out->dlid_path_bits = cqe->ml_path & 0x7f;
	out->pkey_index = be32toh(cqe->imm_inval_pkey) & 0xffff;
	out->srqn = be32toh(cqe->srqn_uidx) & 0xffffff;
	out->wqe_counter = be16toh(cqe->wqe_counter);
	out->signature = cqe->signature;
	out->op_own = cqe->op_own;
	out->owner = mlx5dv_get_cqe_owner(cqe);
	out->se = mlx5dv_get_cqe_se(cqe);
	out->format = mlx5dv_get_cqe_format(cqe);
	out->opcode = mlx5dv_get_cqe_opcode(cqe);

	/* struct mlx5_err_cqe declares its words as host integers; libmlx5 swaps them. */
	out->err_srqn = be32toh(ecqe->srqn);
	out->err_s_wqe_opcode_qpn = be32toh(ecqe->s_wqe_opcode_qpn);
	out->err_wqe_counter = be16toh(ecqe->wqe_counter);
	out->syndrome = ecqe->syndrome;
	out->vendor_err_synd = ecqe->vendor_err_synd;
	out->err_signature = ecqe->signature;
	out->err_op_own = ecqe->op_own;
	out->wc_status = zv_wc_status_of_syndrome(ecqe->syndrome);
}

/* The status libmlx5 (cq.c, mlx5_handle_error_cqe) reports for an error CQE's syndrome. */
uint32_t zv_wc_status_of_syndrome(uint8_t syndrome)
{
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
		return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
		return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
		return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR:
		return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
		return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
		return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
		return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
		return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
		return IBV_WC_REM_ABORT_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}

/* ---------------------------------------------------------------------------------------- */
/* Whole WQEs                                                                                */
/* ---------------------------------------------------------------------------------------- */

static uint8_t *sq_end(const struct zv_sq *sq)
{
	return sq->buf + (size_t)sq->wqe_cnt * MLX5_SEND_WQE_BB;
}

/* Records that `len` bytes at `p` (not crossing the end of the ring) were stored. */
static void wrote(struct zv_sq *sq, const void *p, size_t len)
{
	memset(sq->written + ((const uint8_t *)p - sq->buf), 1, len);
}

/* Copies `len` bytes to `dst`, continuing at the start of the ring when it meets the end. */
static uint8_t *copy_wrapping(struct zv_sq *sq, uint8_t *dst, const uint8_t *src, size_t len)
{
	uint8_t *end = sq_end(sq);

	if (dst + len > end) {
		size_t first = (size_t)(end - dst);

		memcpy(dst, src, first);
		wrote(sq, dst, first);
		src += first;
		len -= first;
		dst = sq->buf;
	}
	memcpy(dst, src, len);
	wrote(sq, dst, len);
	return dst + len;
}

static int to_ibv_wr(const struct zv_wr *in, struct ibv_send_wr *wr)
{
	memset(wr, 0, sizeof(*wr));
	wr->sg_list = (struct ibv_sge *)in->sg_list;
	wr->num_sge = (int)in->num_sge;
	wr->send_flags = in->send_flags;
	switch (in->op) {
	case ZV_OP_WRITE:
		wr->opcode = IBV_WR_RDMA_WRITE;
		break;
	case ZV_OP_WRITE_IMM:
		wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr->imm_data = htobe32(in->imm);
		break;
	case ZV_OP_SEND:
		wr->opcode = IBV_WR_SEND;
		break;
	case ZV_OP_SEND_IMM:
		wr->opcode = IBV_WR_SEND_WITH_IMM;
		wr->imm_data = htobe32(in->imm);
		break;
	case ZV_OP_READ:
		wr->opcode = IBV_WR_RDMA_READ;
		break;
	case ZV_OP_CS:
		wr->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		break;
	case ZV_OP_FA:
		wr->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		break;
	default:
		return EINVAL;
	}
	if (in->op == ZV_OP_CS || in->op == ZV_OP_FA) {
		wr->wr.atomic.remote_addr = in->remote_addr;
		wr->wr.atomic.rkey = in->rkey;
		wr->wr.atomic.compare_add = in->compare_add;
		wr->wr.atomic.swap = in->swap;
	} else {
		wr->wr.rdma.remote_addr = in->remote_addr;
		wr->wr.rdma.rkey = in->rkey;
	}
	return 0;
}

static uint8_t mlx5_opcode_of(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		return MLX5_OPCODE_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return MLX5_OPCODE_RDMA_WRITE_IMM;
	case IBV_WR_SEND:
		return MLX5_OPCODE_SEND;
	case IBV_WR_SEND_WITH_IMM:
		return MLX5_OPCODE_SEND_IMM;
	case IBV_WR_RDMA_READ:
		return MLX5_OPCODE_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return MLX5_OPCODE_ATOMIC_CS;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return MLX5_OPCODE_ATOMIC_FA;
	default:
		return MLX5_OPCODE_NOP;
	}
}

/*
 * The inline segment: a byte count with MLX5_INLINE_SEG, then the gathered bytes, wrapping at
 * the end of the ring. libmlx5 leaves the padding up to the next 16 bytes as it was. Returns
 * the segment's size in 16-byte units (0 and nothing written when there are no bytes).
 */
static int put_inline(struct zv_sq *sq, const struct ibv_send_wr *wr, uint8_t *seg,
		      unsigned *units, int first, uint32_t off)
{
	struct mlx5_wqe_inl_data_seg *hdr = (struct mlx5_wqe_inl_data_seg *)seg;
	uint8_t *dst = seg + sizeof(*hdr);
	uint32_t total = 0;
	int i;

	/* From entry `first`, byte `off` (a raw packet QP's frame resumes after its inlined
	 * header bytes, as `set_data_inl_seg` does from `sg_copy_ptr`). */
	for (i = first; i < wr->num_sge; i++) {
		const struct ibv_sge *sge = &wr->sg_list[i];
		uint32_t o = i == first ? off : 0;

		total += sge->length - o;
		if (total > sq->max_inline_data)
			return ENOMEM;
		dst = copy_wrapping(sq, dst, (const uint8_t *)(uintptr_t)sge->addr + o,
				    sge->length - o);
	}
	if (total == 0) {
		*units = 0;
		return 0;
	}
	hdr->byte_count = htobe32(total | MLX5_INLINE_SEG);
	wrote(sq, hdr, sizeof(*hdr));
	*units = (total + sizeof(*hdr) + 15) / 16;
	return 0;
}

/*
 * A raw packet QP's Ethernet segment at `seg` (after the control segment, so never across the
 * end of the ring), as `_mlx5_post_send`'s IBV_QPT_RAW_PACKET branch writes it: the 32 bytes
 * of `struct mlx5_wqe_eth_seg` zeroed, `cs_flags` L3|L4 for IBV_SEND_IP_CSUM, then
 * `copy_eth_inline_headers`: the frame's first `eth_min_inline` bytes gathered across the
 * entries into `inline_hdr_start` (EINVAL when the list is shorter), `inline_hdr_sz`. The
 * gather resumes at entry `*idx`, byte `*off` (an entry consumed exactly is skipped). Adds
 * the segment's units to `*size`; returns where the next segment goes.
 */
static uint8_t *put_eth(struct zv_sq *sq, const struct ibv_send_wr *wr, uint8_t *seg,
			unsigned *size, int *idx, uint32_t *off, int *err)
{
	struct mlx5_wqe_eth_seg *eth = (struct mlx5_wqe_eth_seg *)seg;
	uint32_t inl = sq->eth_min_inline, copied = 0;
	int i = 0;
	uint32_t o = 0;

	memset(eth, 0, sizeof(*eth));
	wrote(sq, eth, sizeof(*eth));
	if (wr->send_flags & IBV_SEND_IP_CSUM)
		eth->cs_flags = MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM;
	while (copied < inl && i < wr->num_sge) {
		const struct ibv_sge *sge = &wr->sg_list[i];
		uint32_t n = sge->length - o;

		if (n > inl - copied)
			n = inl - copied;
		memcpy(eth->inline_hdr_start + copied, (const uint8_t *)(uintptr_t)sge->addr + o, n);
		copied += n;
		o += n;
		if (o == sge->length) {
			i++;
			o = 0;
		}
	}
	if (copied < inl) {
		*err = EINVAL;
		return seg;
	}
	eth->inline_hdr_sz = htobe16(inl);
	*idx = i;
	*off = o;
	*size += (offsetof(struct mlx5_wqe_eth_seg, inline_hdr) + inl) >> 4;
	seg += (offsetof(struct mlx5_wqe_eth_seg, inline_hdr) + inl) & ~0xfu;
	*err = 0;
	return seg == sq_end(sq) ? sq->buf : seg;
}

/*
 * The datagram segment of a UD request at `seg` (the 48 bytes after the control segment, so
 * never across the end of the ring), as `_mlx5_post_send`'s IBV_QPT_UD branch writes it with
 * `set_datagram_seg`: the address handle's vector, then the remote QPN (with
 * MLX5_EXTENDED_UD_AV) and the Q_Key over it. Returns where the next segment goes: the start
 * of the ring when the datagram segment ends it.
 */
static uint8_t *put_datagram(struct zv_sq *sq, const struct zv_wr *in, uint8_t *seg)
{
	zv_set_datagram_from_av(seg, in->av, in->remote_qpn, in->qkey);
	wrote(sq, seg, sizeof(struct mlx5_wqe_datagram_seg));
	seg += sizeof(struct mlx5_wqe_datagram_seg);
	return seg == sq_end(sq) ? sq->buf : seg;
}

/*
 * The segments of an RC request between the control segment and the data, as
 * `_mlx5_post_send`'s IBV_QPT_RC branch writes them: a remote address segment for WRITE and
 * READ; a remote address and an atomic segment for the atomics.
 */
static void put_rc_head(struct zv_sq *sq, const struct ibv_send_wr *wr, uint8_t **seg,
			unsigned *size)
{
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ: {
		struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)*seg;

		r->raddr = htobe64(wr->wr.rdma.remote_addr);
		r->rkey = htobe32(wr->wr.rdma.rkey);
		r->reserved = 0;
		wrote(sq, r, sizeof(*r));
		*seg += sizeof(*r);
		*size += sizeof(*r) / 16;
		break;
	}
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		struct mlx5_wqe_raddr_seg *r = (struct mlx5_wqe_raddr_seg *)*seg;
		struct mlx5_wqe_atomic_seg *a = (struct mlx5_wqe_atomic_seg *)(r + 1);

		r->raddr = htobe64(wr->wr.atomic.remote_addr);
		r->rkey = htobe32(wr->wr.atomic.rkey);
		r->reserved = 0;
		wrote(sq, r, sizeof(*r));
		/* Fetch-and-add carries only the addend; `compare` keeps what was there. */
		if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
			a->swap_add = htobe64(wr->wr.atomic.swap);
			a->compare = htobe64(wr->wr.atomic.compare_add);
			wrote(sq, a, sizeof(*a));
		} else {
			a->swap_add = htobe64(wr->wr.atomic.compare_add);
			wrote(sq, &a->swap_add, sizeof(a->swap_add));
		}
		*seg += sizeof(*r) + sizeof(*a);
		*size += (sizeof(*r) + sizeof(*a)) / 16;
		break;
	}
	default:
		break;
	}
}

/*
 * One WQE at the producer counter, laid out as libmlx5's `_mlx5_post_send` lays out an RC
 * request (control, [remote address], [atomic]) or a UD one (control, datagram), then data
 * segments (zero-length entries skipped, continuing at the start of the ring when they meet
 * its end) or the inline segment. The control segment is written last through
 * mlx5dv_set_ctrl_seg, after the word at byte 8 (signature, dci_stream_channel_id, fm_ce_se)
 * was cleared, as libmlx5 clears it.
 *
 * Refusals, as libmlx5's: more entries than sq->max_gs (ENOMEM, before anything is written);
 * more inline bytes than sq->max_inline_data (ENOMEM, after the segments before the inline
 * data and the inline bytes up to the limit were stored: unpublished, as the producer counter
 * does not move). libmlx5 does not compare a UD request with the path MTU: the device
 * completes an over-long datagram with an error.
 */
int zv_post_send(struct zv_sq *sq, const struct zv_wr *in, uint32_t *ds)
{
	struct ibv_send_wr wr;
	unsigned idx = sq->cur_post & (sq->wqe_cnt - 1);
	uint8_t *ctrl = sq->buf + (size_t)idx * MLX5_SEND_WQE_BB;
	uint8_t *seg = ctrl + sizeof(struct mlx5_wqe_ctrl_seg);
	unsigned size = sizeof(struct mlx5_wqe_ctrl_seg) / 16;
	uint8_t opcode = MLX5_OPCODE_NOP;
	uint32_t imm = 0;
	uint8_t fm_ce_se;
	int err;

	if (in->num_sge > sq->max_gs)
		return ENOMEM;
	if (in->op == ZV_OP_NOP) {
		memset(&wr, 0, sizeof(wr));
		wr.send_flags = in->send_flags;
	} else {
		err = to_ibv_wr(in, &wr);
		if (err)
			return err;
		opcode = mlx5_opcode_of(wr.opcode);
		if (wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			imm = wr.imm_data;
	}

	fm_ce_se = (sq->sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
		   (wr.send_flags & IBV_SEND_FENCE ? MLX5_WQE_CTRL_FENCE : 0) |
		   (wr.send_flags & IBV_SEND_SIGNALED ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
		   (wr.send_flags & IBV_SEND_SOLICITED ? MLX5_WQE_CTRL_SOLICITED : 0);

	if (in->op != ZV_OP_NOP) {
		/* Where the data starts: a raw frame's after its inlined header bytes. */
		int first = 0;
		uint32_t off = 0;

		if (sq->qp_type == ZV_QPT_UD) {
			seg = put_datagram(sq, in, seg);
			size += sizeof(struct mlx5_wqe_datagram_seg) / 16;
		} else if (sq->qp_type == ZV_QPT_RAW) {
			seg = put_eth(sq, &wr, seg, &size, &first, &off, &err);
			if (err)
				return err;
		} else {
			put_rc_head(sq, &wr, &seg, &size);
		}

		if ((wr.send_flags & IBV_SEND_INLINE) && wr.num_sge) {
			unsigned units;

			err = put_inline(sq, &wr, seg, &units, first, off);
			if (err)
				return err;
			size += units;
		} else {
			struct mlx5_wqe_data_seg *d = (struct mlx5_wqe_data_seg *)seg;
			int atomic = wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
				     wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
			int i;

			for (i = first; i < wr.num_sge; i++) {
				const struct ibv_sge *sge = &wr.sg_list[i];
				/* `set_data_ptr_seg(dseg, sge, offset)`: the rest of the entry. */
				uint32_t o = i == first ? off : 0;

				if ((uint8_t *)d == sq_end(sq))
					d = (struct mlx5_wqe_data_seg *)sq->buf;
				if (sge->length - o == 0)
					continue;
				/* An atomic's local buffer is always 8 bytes. */
				mlx5dv_set_data_seg(d, atomic ? 8 : sge->length - o, sge->lkey,
						    (uintptr_t)sge->addr + o);
				wrote(sq, d, sizeof(*d));
				d++;
				size += sizeof(*d) / 16;
			}
		}
	}

	*(uint32_t *)(ctrl + 8) = 0;
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)ctrl, sq->cur_post & 0xffff, opcode, 0,
			    sq->qpn, fm_ce_se, size, 0, imm);
	wrote(sq, ctrl, sizeof(struct mlx5_wqe_ctrl_seg));

	sq->cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	*ds = size;
	return 0;
}

/* The doorbell record, as `post_send_db` writes it: the producer counter, 16 bits, big-endian. */
void zv_ring_db(struct zv_sq *sq)
{
	sq->dbrec[MLX5_SND_DBR] = htobe32(sq->cur_post & 0xffff);
}

/* ---------------------------------------------------------------------------------------- */
/* Receive WQEs                                                                              */
/* ---------------------------------------------------------------------------------------- */

/*
 * One receive WQE at `head`, as libmlx5's `mlx5_post_recv` writes it for a QP without WQE
 * signatures: a data segment per non-empty entry, then, if the entry has room left, a
 * terminating segment with byte count 0, MLX5_INVALID_LKEY and address 0; the rest of the
 * entry keeps what it held. Then the doorbell record: the receive counter, 16 bits,
 * big-endian.
 */
int zv_post_recv(struct zv_rq *rq, const struct ibv_sge *sg_list, uint32_t num_sge)
{
	uint32_t max_gs = rq->stride / sizeof(struct mlx5_wqe_data_seg);
	unsigned idx = rq->head & (rq->wqe_cnt - 1);
	struct mlx5_wqe_data_seg *scat =
		(struct mlx5_wqe_data_seg *)(rq->buf + (size_t)idx * rq->stride);
	uint32_t i, j;

	if (num_sge > max_gs)
		return EINVAL;
	for (i = 0, j = 0; i < num_sge; i++) {
		if (sg_list[i].length == 0)
			continue;
		mlx5dv_set_data_seg(&scat[j], sg_list[i].length, sg_list[i].lkey,
				    (uintptr_t)sg_list[i].addr);
		memset(rq->written + ((uint8_t *)&scat[j] - rq->buf), 1, sizeof(scat[j]));
		j++;
	}
	if (j < max_gs) {
		scat[j].byte_count = 0;
		scat[j].lkey = htobe32(MLX5_INVALID_LKEY);
		scat[j].addr = 0;
		memset(rq->written + ((uint8_t *)&scat[j] - rq->buf), 1, sizeof(scat[j]));
	}
	rq->head++;
	rq->dbrec[MLX5_RCV_DBR] = htobe32(rq->head & 0xffff);
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Shared receive WQEs                                                                       */
/* ---------------------------------------------------------------------------------------- */

/*
 * One receive into WQE `idx` of a shared receive ring of `stride`-byte WQEs, as libmlx5's
 * `mlx5_post_srq_recv` writes it: the WQE's next segment is read (its next_wqe_index is where
 * the following receive goes, returned in `*next`), then one data segment per entry (empty
 * entries included, unlike a QP's receive queue), then, if the WQE has room left, a
 * terminating segment with byte count 0, MLX5_INVALID_LKEY and address 0. Returns 0 or EINVAL.
 */
int zv_post_srq_recv(uint8_t *buf, uint32_t stride, uint32_t idx, const struct ibv_sge *sg_list,
		     uint32_t num_sge, uint16_t *next)
{
	struct mlx5_wqe_srq_next_seg *nseg =
		(struct mlx5_wqe_srq_next_seg *)(buf + (size_t)idx * stride);
	uint32_t max_gs = (stride - sizeof(*nseg)) / sizeof(struct mlx5_wqe_data_seg);
	struct mlx5_wqe_data_seg *scat;
	uint32_t i;

	if (num_sge > max_gs)
		return EINVAL;
	*next = be16toh(nseg->next_wqe_index);
	scat = (struct mlx5_wqe_data_seg *)(nseg + 1);
	for (i = 0; i < num_sge; i++) {
		scat[i].byte_count = htobe32(sg_list[i].length);
		scat[i].lkey = htobe32(sg_list[i].lkey);
		scat[i].addr = htobe64(sg_list[i].addr);
	}
	if (i < max_gs) {
		scat[i].byte_count = 0;
		scat[i].lkey = htobe32(MLX5_INVALID_LKEY);
		scat[i].addr = 0;
	}
	return 0;
}

/* The free list as libmlx5's `set_srq_buf_ll` links it: WQE i points to i + 1, start <= i < end. */
void zv_srq_link(uint8_t *buf, uint32_t stride, uint32_t start, uint32_t end)
{
	uint32_t i;

	for (i = start; i < end; i++) {
		struct mlx5_wqe_srq_next_seg *nseg =
			(struct mlx5_wqe_srq_next_seg *)(buf + (size_t)i * stride);

		nseg->next_wqe_index = htobe16(i + 1);
	}
}

void zv_read_srq_next(const void *buf, uint16_t *next_wqe_index, uint8_t *signature)
{
	const struct mlx5_wqe_srq_next_seg *nseg = buf;

	*next_wqe_index = be16toh(nseg->next_wqe_index);
	*signature = nseg->signature;
}

/*
 * One receive at the head of the free list of `srq`, as libmlx5 44's `mlx5_post_srq_recv`
 * takes it: refused with EINVAL for more entries than max_gs and with ENOMEM when the head
 * is the tail (the tail WQE is never taken); else the WQE's data segments as
 * zv_post_srq_recv writes them, the head moved along next_wqe_index, the counter (16 bits)
 * incremented and the doorbell record set to it, big-endian. `*idx` is the WQE used.
 */
int zv_srq_post(struct zv_srq *srq, const struct ibv_sge *sg_list, uint32_t num_sge,
		uint32_t *idx)
{
	uint8_t *wqe = srq->buf + (size_t)srq->head * srq->stride;
	uint32_t used = num_sge < srq->max_gs ? num_sge + 1 : num_sge;
	uint16_t next;
	int err;

	if (num_sge > srq->max_gs)
		return EINVAL;
	if (srq->head == srq->tail)
		return ENOMEM;
	err = zv_post_srq_recv(srq->buf, srq->stride, srq->head, sg_list, num_sge, &next);
	if (err)
		return err;
	memset(srq->written + (wqe - srq->buf) + sizeof(struct mlx5_wqe_srq_next_seg), 1,
	       used * sizeof(struct mlx5_wqe_data_seg));
	*idx = srq->head;
	srq->head = next;
	srq->counter = (srq->counter + 1) & 0xffff;
	srq->dbrec = htobe32(srq->counter);
	return 0;
}

/* A completed receive's WQE back on the free list, as libmlx5 44's `mlx5_free_srq_wqe`: the
 * tail WQE's next_wqe_index names it, and it becomes the tail. */
void zv_srq_free(struct zv_srq *srq, uint32_t ind)
{
	struct mlx5_wqe_srq_next_seg *tail =
		(struct mlx5_wqe_srq_next_seg *)(srq->buf + (size_t)srq->tail * srq->stride);

	tail->next_wqe_index = htobe16(ind);
	memset(srq->written + ((uint8_t *)&tail->next_wqe_index - srq->buf), 1,
	       sizeof(tail->next_wqe_index));
	srq->tail = ind;
}
