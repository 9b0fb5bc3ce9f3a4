/*
 * The C side of zverbs' cross-checks: plain functions over rdma-core's own <infiniband/mlx5dv.h>
 * and <infiniband/verbs.h>, called from Rust through `extern "C"` (see src/ffi.rs, which mirrors
 * every struct below; their sizes are in the fact table, so a drifting mirror fails a test).
 */
#ifndef ZVERBS_CROSSCHECK_PROBE_H
#define ZVERBS_CROSSCHECK_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* One entry of the fact table: a C expression and its value. */
struct zv_fact {
	const char *name;
	uint64_t value;
};

/* Every field of a 64-byte CQE, read the way rdma-core reads it. */
struct zv_cqe_fields {
	uint64_t timestamp;
	uint32_t srqn_uidx;
	uint32_t imm_inval_pkey;
	uint32_t byte_cnt;
	uint32_t sop_drop_qpn;
	uint32_t err_srqn;
	uint32_t err_s_wqe_opcode_qpn;
	uint32_t wc_status;
	uint32_t flags_rqpn;
	uint32_t wc_grh; /* IBV_WC_GRH or 0, as libmlx5 reports a receive with these bytes */
	uint32_t src_qp; /* libmlx5's wc->src_qp */
	uint32_t srqn; /* the SRQ number (or user index) libmlx5 looks up */
	uint16_t wqe_counter;
	uint16_t err_wqe_counter;
	uint16_t slid;
	uint16_t pkey_index; /* libmlx5's wc->pkey_index */
	uint8_t signature;
	uint8_t op_own;
	uint8_t owner;
	uint8_t se;
	uint8_t format;
	uint8_t opcode;
	uint8_t syndrome;
	uint8_t vendor_err_synd;
	uint8_t err_signature;
	uint8_t err_op_own;
	uint8_t ml_path;
	uint8_t sl; /* libmlx5's wc->sl */
	uint8_t dlid_path_bits; /* libmlx5's wc->dlid_path_bits */
	uint8_t pad[7];
};

/* Every field of an address vector (struct mlx5_wqe_av), read the way rdma-core reads it. */
struct zv_av_fields {
	uint64_t dc_key;
	uint32_t qkey;
	uint32_t qkey_reserved;
	uint32_t dqp_dct;
	uint32_t grh_gid_fl;
	uint16_t rlid;
	uint8_t stat_rate_sl;
	uint8_t fl_mlid;
	uint8_t tclass;
	uint8_t hop_limit;
	uint8_t rmac[6];
	uint8_t rgid[16];
	uint8_t pad[4];
};

/* The arguments of mlx5dv_set_dgram_seg. */
struct zv_dgram_args {
	uint64_t key;
	uint32_t dqp_dct;
	uint32_t grh_gid_fl;
	uint16_t rlid;
	uint8_t ext;
	uint8_t stat_rate_sl;
	uint8_t fl_mlid;
	uint8_t tclass;
	uint8_t hop_limit;
	uint8_t rmac[6];
	uint8_t rgid[16];
	uint8_t pad[11];
};

/* The operations the WQE builder knows; NOP has no IBV_WR_* number. */
enum zv_op {
	ZV_OP_WRITE = 0,
	ZV_OP_WRITE_IMM = 1,
	ZV_OP_SEND = 2,
	ZV_OP_SEND_IMM = 3,
	ZV_OP_READ = 4,
	ZV_OP_CS = 5,
	ZV_OP_FA = 6,
	ZV_OP_NOP = 7,
};

/* A send request in flat form; the builder turns it into a struct ibv_send_wr. */
struct zv_wr {
	const struct ibv_sge *sg_list;
	const void *av; /* UD: the destination's 48-byte address vector (struct mlx5_wqe_av) */
	uint64_t remote_addr;
	uint64_t compare_add; /* CS: the compare value; FA: the addend */
	uint64_t swap;
	uint32_t op; /* enum zv_op */
	uint32_t num_sge;
	uint32_t send_flags; /* IBV_SEND_* */
	uint32_t rkey;
	uint32_t imm; /* host order; goes to imm_data as htobe32(imm), as a verbs caller does */
	uint32_t remote_qpn; /* UD: wr.ud.remote_qpn */
	uint32_t qkey; /* UD: wr.ud.remote_qkey */
	uint32_t pad;
};

/* The QP types the send queue model knows. */
enum zv_qpt {
	ZV_QPT_RC = 0,
	ZV_QPT_UD = 1,
	ZV_QPT_RAW = 2, /* IBV_QPT_RAW_PACKET on an Ethernet port */
};

/* A send queue modelled the way libmlx5 keeps one. */
struct zv_sq {
	uint8_t *buf; /* wqe_cnt * MLX5_SEND_WQE_BB bytes */
	uint8_t *written; /* as large as buf: the builder sets 1 for every byte it stores */
	uint32_t wqe_cnt; /* a power of two */
	uint32_t cur_post; /* producer counter in basic blocks */
	uint32_t qpn;
	uint32_t sig_all; /* sq_sig_all: every WQE asks for a CQE */
	uint32_t max_inline_data;
	uint32_t dbrec[2]; /* the doorbell record, [MLX5_RCV_DBR] and [MLX5_SND_DBR] */
	uint32_t qp_type; /* enum zv_qpt */
	uint32_t max_gs; /* libmlx5's sq.max_gs: requests with more entries are refused */
	uint32_t eth_min_inline; /* RAW: the context's eth_min_inline_size, 0 or 18 */
};

/* A receive queue modelled the way libmlx5 keeps one (no WQE signature). */
struct zv_rq {
	uint8_t *buf; /* wqe_cnt * stride bytes */
	uint8_t *written; /* as large as buf: the builder sets 1 for every byte it stores */
	uint32_t wqe_cnt; /* a power of two */
	uint32_t stride; /* a power of two >= 16: stride / 16 scatter entries */
	uint32_t head; /* receives posted */
	uint32_t dbrec[2]; /* the doorbell record, [MLX5_RCV_DBR] and [MLX5_SND_DBR] */
	uint32_t pad;
};

/* A shared receive queue modelled the way libmlx5 (rdma-core 44) keeps one: a free list from
 * head to tail through next_wqe_index, the tail never taken. */
struct zv_srq {
	uint8_t *buf; /* nwqes * stride bytes */
	uint8_t *written; /* as large as buf: the builder sets 1 for every byte it stores */
	uint32_t stride; /* a power of two >= 32 */
	uint32_t nwqes; /* a power of two */
	uint32_t max_gs; /* (stride - 16) / 16 */
	uint32_t head;
	uint32_t tail;
	uint32_t counter; /* receives posted, 16 bits as libmlx5's uint16_t counter */
	uint32_t dbrec; /* the doorbell record, big-endian */
	uint32_t pad;
};

const struct zv_fact *zv_facts(size_t *len);

void zv_set_ctrl_seg(void *buf, uint16_t pi, uint8_t opcode, uint8_t opmod, uint32_t qpn,
		     uint8_t fm_ce_se, uint8_t ds, uint8_t signature, uint32_t imm);
void zv_set_data_seg(void *buf, uint32_t length, uint32_t lkey, uint64_t addr);
void zv_set_raddr_seg(void *buf, uint64_t raddr, uint32_t rkey);
void zv_set_atomic_seg(void *buf, uint64_t swap_add, uint64_t compare);

void zv_set_dgram_seg(void *buf, const struct zv_dgram_args *a);
void zv_set_datagram_from_av(void *buf, const void *av, uint32_t remote_qpn, uint32_t qkey);
void zv_set_dc_datagram_from_av(void *buf, const void *av, uint32_t dctn, uint64_t dc_key);
void zv_read_av(const void *buf, struct zv_av_fields *out);

int zv_post_srq_recv(uint8_t *buf, uint32_t stride, uint32_t idx, const struct ibv_sge *sg_list,
		     uint32_t num_sge, uint16_t *next);
void zv_srq_link(uint8_t *buf, uint32_t stride, uint32_t start, uint32_t end);
void zv_read_srq_next(const void *buf, uint16_t *next_wqe_index, uint8_t *signature);
int zv_srq_post(struct zv_srq *srq, const struct ibv_sge *sg_list, uint32_t num_sge,
		uint32_t *idx);
void zv_srq_free(struct zv_srq *srq, uint32_t ind);

void zv_read_cqe(const void *cqe, struct zv_cqe_fields *out);
uint32_t zv_wc_status_of_syndrome(uint8_t syndrome);

int zv_post_send(struct zv_sq *sq, const struct zv_wr *wr, uint32_t *ds);
void zv_ring_db(struct zv_sq *sq);

int zv_post_recv(struct zv_rq *rq, const struct ibv_sge *sg_list, uint32_t num_sge);

#endif
