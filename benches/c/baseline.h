/*
 * The C baselines the zverbs direct path is measured against: a send queue and a CQ poller
 * written the way rdma-core's mlx5 provider drives a ConnectX, with mlx5dv.h's own helpers.
 *
 * The structures are plain data, laid out identically in `src/ffi.rs`; the Rust fixtures
 * allocate the rings and fill these in.
 */
#ifndef ZVB_BASELINE_H
#define ZVB_BASELINE_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* A send queue, with the fields libmlx5 keeps for one (`struct mlx5_wq` + `struct mlx5_bf`). */
struct zvb_sq {
	uint8_t *buf;         /* first basic block of the ring */
	uint8_t *qend;        /* one past the last basic block */
	uint64_t *wrid;       /* per basic block: the wr_id of the WQE starting there */
	uint32_t *wqe_head;   /* per basic block: `head` when that WQE was posted */
	uint32_t *wr_data;    /* per basic block: the ibv_wc_opcode of a NOP */
	uint32_t *dbrec;      /* doorbell record: [1] is MLX5_SND_DBR */
	uint8_t *bf_reg;      /* BlueFlame register: two buffers of bf_size bytes */
	uint32_t bf_size;     /* 0: doorbell only */
	uint32_t bf_offset;   /* 0 or bf_size */
	uint32_t wqe_cnt;     /* basic blocks, a power of two */
	uint32_t max_post;    /* requests that may be outstanding */
	uint32_t max_gs;      /* gather entries per request */
	uint32_t max_inline;  /* inline bytes per request */
	uint32_t cur_post;    /* producer counter, basic blocks */
	uint32_t head;        /* requests posted */
	uint32_t tail;        /* requests completed (written by the poller) */
	uint32_t qpn;
	/* The receive side, for responder CQEs. */
	uint64_t *rq_wrid;
	uint32_t rq_wqe_cnt;
	uint32_t rq_tail;
	uint8_t *rq_buf;       /* the receive ring: WQEs of data segments */
	uint32_t rq_wqe_shift; /* log2 of a receive WQE's bytes */
	uint32_t rq_max_gs;    /* data segments per receive WQE */
};

/* QP lookup by number, two levels as libmlx5's context keeps it. */
#define ZVB_QP_TABLE_SHIFT 12
#define ZVB_QP_TABLE_MASK ((1 << ZVB_QP_TABLE_SHIFT) - 1)
#define ZVB_QP_TABLE_SIZE (1 << (24 - ZVB_QP_TABLE_SHIFT))

struct zvb_qp_table {
	struct {
		struct zvb_sq **table;
		int refcnt;
	} t[ZVB_QP_TABLE_SIZE];
};

struct zvb_cq {
	uint8_t *buf;                /* first CQE */
	uint32_t *dbrec;             /* [0] is MLX5_CQ_SET_CI */
	struct zvb_qp_table *qps;
	uint32_t cqe_mask;           /* cqe_cnt - 1 (libmlx5 keeps it as ibv_cq.cqe) */
	uint32_t cqe_sz;             /* 64 or 128 */
	uint32_t cons_index;
};

/* QP table: allocation and registration (not timed). 0 or -1. */
struct zvb_qp_table *zvb_qp_table_new(void);
int zvb_qp_table_add(struct zvb_qp_table *t, struct zvb_sq *sq);
void zvb_qp_table_free(struct zvb_qp_table *t);

/* Requests that may be posted now (`max_post - (head - tail)`). */
uint32_t zvb_sq_room(const struct zvb_sq *sq);

/*
 * One request, posted and rung (BlueFlame when the buffer holds it, else the doorbell).
 * The operation is known here, its operands are not. 0 or an errno (ENOMEM: queue full,
 * EINVAL: too large).
 */
int zvb_post_write(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int zvb_post_write_inline(struct zvb_sq *sq, const void *data, uint32_t len,
			  uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int zvb_post_send(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
		  uint64_t wr_id);
int zvb_post_read(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
		  uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int zvb_post_cas(struct zvb_sq *sq, uint64_t addr, uint32_t lkey, uint64_t raddr,
		 uint32_t rkey, uint64_t compare, uint64_t swap, uint64_t wr_id);
int zvb_post_faa(struct zvb_sq *sq, uint64_t addr, uint32_t lkey, uint64_t raddr,
		 uint32_t rkey, uint64_t add, uint64_t wr_id);

/*
 * Raw Ethernet (a raw packet QP; `qpn` is its SQN). `zvb_post_eth`: a signaled SEND of one
 * frame with IBV_SEND_IP_CSUM, its first ZVB_ETH_INLINE bytes inlined (libmlx5 on a device
 * whose minimum inline is L2), the rest by one data segment; EINVAL for a shorter frame.
 * `zvb_post_eth_frame`: a prepared frame of ZVB_ETH_FRAME_HEADERS header bytes (Ethernet,
 * IPv4, UDP: `zvb_prepare_eth_frame`, not timed), all of them inlined, the IPv4 total length
 * and UDP length set for the payload, the payload by one data segment; signaled, IP_CSUM.
 */
#define ZVB_ETH_INLINE 18
#define ZVB_ETH_FRAME_HEADERS 42

struct zvb_eth_frame {
	uint8_t segs[64];   /* the Ethernet segment and the headers: WQE units 1..4 */
	uint16_t ip_base;   /* IPv4 total length of an empty payload */
	uint16_t udp_base;  /* UDP length of an empty payload */
	uint8_t ip_at;      /* where in `segs` the IPv4 total length goes */
	uint8_t udp_at;     /* where the UDP length goes */
};

int zvb_post_eth(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id);
void zvb_prepare_eth_frame(struct zvb_eth_frame *f, const uint8_t *headers,
			   uint32_t ip_total_at, uint32_t udp_len_at);
int zvb_post_eth_frame(struct zvb_sq *sq, const struct zvb_eth_frame *f, uint64_t addr,
		       uint32_t len, uint32_t lkey, uint64_t wr_id);

/*
 * A chain of verbs requests, as `ibv_post_send` takes it (RC: WRITE, WRITE_WITH_IMM, SEND,
 * SEND_WITH_IMM, READ, the two atomics; flags SIGNALED, SOLICITED, FENCE, INLINE). Stops at
 * the first bad request (`*bad_wr`), rings once for the ones before it.
 */
int zvb_post_send_wr(struct zvb_sq *sq, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

/* Polls up to `ne` completions. `_lfence`: rdma-core's x86 barrier after the owner check. */
int zvb_poll_cq(struct zvb_cq *cq, int ne, struct ibv_wc *wc);
int zvb_poll_cq_lfence(struct zvb_cq *cq, int ne, struct ibv_wc *wc);
/*
 * As zvb_poll_cq, also reading each completion's timestamp into `ts` (what libmlx5's
 * `ibv_wc_read_completion_ts` returns: the CQE's 64-bit timestamp, host order).
 */
int zvb_poll_cq_ts(struct zvb_cq *cq, int ne, struct ibv_wc *wc, uint64_t *ts);
/*
 * As zvb_poll_cq, for a QP created allowing scatter-to-CQE: a receive whose data the device
 * wrote into the CQE has it copied into the receive WQE's buffers, as libmlx5's poller does.
 */
int zvb_poll_cq_scatter(struct zvb_cq *cq, int ne, struct ibv_wc *wc);

/*
 * A striding ("multi-packet") receive work queue, as DPDK's mlx5 receive path keeps one
 * (`struct mlx5_rxq_data` with `strd_num_n`, `strd_sz_n`, `consumed_strd`): the stride buffer
 * (WQE i's strides at `buf + (i << (log_num + log_stride))`, its data segment never rewritten),
 * the WQ's doorbell record, per WQE the strides given back.
 */
struct zvb_mprq {
	uint8_t *buf;          /* the stride buffer */
	uint32_t *dbrec;       /* the WQ's doorbell record: [0], WQEs posted */
	uint32_t *released;    /* per WQE: strides given back */
	uint32_t wqe_mask;     /* WQEs - 1 */
	uint32_t log_stride;   /* log2 of a stride's bytes */
	uint32_t log_num;      /* log2 of the strides of a WQE */
	uint32_t head;         /* WQEs posted */
	uint32_t tail;         /* the oldest WQE not posted again */
	uint32_t malformed;    /* CQEs naming strides outside their WQE */
};

/*
 * Receives up to `max` packets of the striding queue `rq` from `cq` in place: each packet's
 * first 8 bytes (0 for a shorter one) and length added to `*sum` (the touch), its strides
 * given back, every WQE whose strides are all back posted again in ring order. Checks what
 * the zverbs queue checks (a receive CQE, not a compressed session's title, its strides
 * inside its WQE, its length inside its strides). Returns the packets.
 */
int zvb_rx_stride(struct zvb_cq *cq, struct zvb_mprq *rq, int max, uint64_t *sum);

/* Fixtures, not timed: verbs request chains (`n` requests of one gather entry each). */
struct zvb_wr_desc {
	uint64_t wr_id;
	uint64_t addr;
	uint64_t raddr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t len;
	uint32_t lkey;
	uint32_t rkey;
	uint32_t imm;          /* as verbs takes it: already big-endian */
	uint32_t opcode;       /* enum ibv_wr_opcode */
	uint32_t send_flags;   /* enum ibv_send_flags */
};

struct ibv_send_wr *zvb_wrs_new(uint32_t n);
void zvb_wrs_set(struct ibv_send_wr *wrs, uint32_t i, const struct zvb_wr_desc *d);
void zvb_wrs_free(struct ibv_send_wr *wrs);

/* sizeof of 0: zvb_sq, 1: zvb_cq, 2: ibv_wc, 3: zvb_wr_desc (checked against the Rust side). */
size_t zvb_sizeof(int which);

#endif
