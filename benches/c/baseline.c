/*
 * C baselines for the zverbs direct path: what a C programmer writing straight to the mlx5
 * rings with rdma-core's <infiniband/mlx5dv.h> would write, following the sequences of
 * rdma-core's mlx5 provider (providers/mlx5/qp.c `_mlx5_post_send` and `post_send_db`,
 * providers/mlx5/cq.c `mlx5_poll_one`) for an RC QP.
 *
 * Posting:
 * - room: `head - tail + nreq >= max_post` refuses the request (ENOMEM), as
 *   `mlx5_wq_overflow` does; the verbs chain also checks the opcode, `num_sge` against
 *   `max_gs` and the inline length against `max_inline`, as libmlx5 does;
 * - segments: `mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg` and the structs of mlx5dv.h for the
 *   remote-address, atomic and inline segments; bytes 8..12 of the control segment are zeroed
 *   first, as libmlx5 does; zero-length gather entries are skipped; inline data continues at the
 *   ring's start when it meets the end, and (unlike libmlx5) the padding after it is zeroed, so
 *   the WQE bytes are exactly zverbs' (which tests compare);
 * - bookkeeping per WQE: `wrid` and `wqe_head` at the WQE's first basic block;
 * - doorbell (`post_send_db`): compiler barrier, doorbell record, sfence, BlueFlame copy of one
 *   WQE of more than one segment that fits the buffer in ordered 64-bit stores (following the
 *   ring's wrap) or the 8-byte doorbell, sfence, buffer flip.
 *
 * Polling: owner and opcode check, the from-device barrier (a compiler barrier, or rdma-core's
 * `lfence`), QP lookup by number (a cached pointer per call, else the two-level table),
 * wqe_counter -> wr_id, the requester's tail update (`wqe_head + 1`), the send opcode decoded
 * into `struct ibv_wc` as libmlx5 does, and the CQ doorbell record after the loop. The CQ is
 * single-threaded (no lock), as with MLX5_SINGLE_THREADED.
 *
 * The operation-specific posters take their operands as arguments and are out of line, so that
 * they are timed and counted the same way as the Rust functions they are compared with.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

#include "baseline.h"

#define ALWAYS_INLINE inline __attribute__((always_inline))
#define NOINLINE __attribute__((noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define ZVB_CQ_SET_CI 0

/* ------------------------------------------------------------------------------------------ */
/* Barriers and MMIO                                                                           */
/* ------------------------------------------------------------------------------------------ */

#if defined(__x86_64__)
#define to_device_barrier() asm volatile("" ::: "memory")
#define from_device_barrier() asm volatile("" ::: "memory")
#define from_device_lfence() asm volatile("lfence" ::: "memory")
#define wc_start() asm volatile("sfence" ::: "memory")
#elif defined(__aarch64__)
#define to_device_barrier() asm volatile("dmb oshst" ::: "memory")
#define from_device_barrier() asm volatile("dmb oshld" ::: "memory")
#define from_device_lfence() asm volatile("dmb oshld" ::: "memory")
#define wc_start() asm volatile("dsb st" ::: "memory")
#else
#error "zverbs-benches: C baseline barriers are defined for x86_64 and aarch64 only"
#endif
#define wc_flush() wc_start()

/* One 64-bit store to device memory, as rdma-core's mmio_write64_be (a relaxed atomic store). */
static ALWAYS_INLINE void mmio_write64(void *addr, uint64_t value)
{
	__atomic_store_n((uint64_t *)addr, value, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------------ */
/* Send queue                                                                                  */
/* ------------------------------------------------------------------------------------------ */

uint32_t zvb_sq_room(const struct zvb_sq *sq)
{
	return sq->max_post - (sq->head - sq->tail);
}

static ALWAYS_INLINE int sq_full(const struct zvb_sq *sq, uint32_t nreq)
{
	return sq->head - sq->tail + nreq >= sq->max_post;
}

static ALWAYS_INLINE void *wqe_at(const struct zvb_sq *sq, uint32_t idx)
{
	return sq->buf + ((size_t)idx << 6);
}

/* The 16-byte unit after `seg`, at the ring's start when `seg` is the last one. */
static ALWAYS_INLINE void *next_unit(const struct zvb_sq *sq, void *seg)
{
	uint8_t *next = (uint8_t *)seg + 16;
	return next == sq->qend ? sq->buf : next;
}

/* The control segment of the WQE at `idx`, `ds` units long, and its bookkeeping. */
static ALWAYS_INLINE void finish_wqe(struct zvb_sq *sq, struct mlx5_wqe_ctrl_seg *ctrl,
				     uint32_t idx, uint32_t nreq, uint8_t opcode,
				     uint8_t fm_ce_se, uint32_t ds, uint32_t imm, uint64_t wr_id)
{
	*(uint32_t *)((uint8_t *)ctrl + 8) = 0;
	mlx5dv_set_ctrl_seg(ctrl, sq->cur_post & 0xffff, opcode, 0, sq->qpn, fm_ce_se, ds, 0,
			    imm);
	sq->wrid[idx] = wr_id;
	sq->wqe_head[idx] = sq->head + nreq;
	sq->cur_post += (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
}

static ALWAYS_INLINE void set_raddr(void *seg, uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *r = seg;

	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
}

static ALWAYS_INLINE void set_atomic(void *seg, uint64_t swap_add, uint64_t compare)
{
	struct mlx5_wqe_atomic_seg *a = seg;

	a->swap_add = htobe64(swap_add);
	a->compare = htobe64(compare);
}

/*
 * Copies `len` bytes of inline data into the ring after the inline header at `seg`, following
 * the wrap, and zeroes the padding to the end of the last unit. Returns the units used
 * (header included).
 */
static ALWAYS_INLINE uint32_t copy_inline(const struct zvb_sq *sq, void *seg,
					  const struct ibv_sge *sg, int num_sge, uint32_t len)
{
	struct mlx5_wqe_inl_data_seg *inl = seg;
	uint8_t *dst = (uint8_t *)(inl + 1);
	uint32_t units = (len + sizeof(*inl) + 15) / 16;
	uint32_t pad = units * 16 - sizeof(*inl) - len;
	int i;

	inl->byte_count = htobe32(len | MLX5_INLINE_SEG);
	for (i = 0; i < num_sge; i++) {
		const uint8_t *src = (const uint8_t *)(uintptr_t)sg[i].addr;
		uint32_t n = sg[i].length;
		uint32_t room = (uint32_t)(sq->qend - dst);

		if (unlikely(n > room)) {
			memcpy(dst, src, room);
			src += room;
			n -= room;
			dst = sq->buf;
		}
		memcpy(dst, src, n);
		dst += n;
	}
	if (pad) {
		uint32_t room = (uint32_t)(sq->qend - dst);

		if (unlikely(pad > room)) {
			memset(dst, 0, room);
			pad -= room;
			dst = sq->buf;
		}
		memset(dst, 0, pad);
	}
	return units;
}

/*
 * post_send_db: publishes `nreq` requests; `ctrl` is the last one's control segment and `ds`
 * its size in units.
 */
static ALWAYS_INLINE void ring_db(struct zvb_sq *sq, uint32_t nreq, uint32_t ds, void *ctrl)
{
	uint64_t *dst;

	if (unlikely(!nreq))
		return;
	sq->head += nreq;
	/* WQEs before the doorbell record. */
	to_device_barrier();
	sq->dbrec[MLX5_SND_DBR] = htobe32(sq->cur_post & 0xffff);
	/* The record before the write-combining stores. */
	wc_start();
	dst = (uint64_t *)(sq->bf_reg + sq->bf_offset);
	if (nreq == 1 && sq->bf_size && ds > 1 && ds * 16 <= sq->bf_size) {
		const uint64_t *src = ctrl;
		uint32_t bytes = (ds * 16 + 63) & ~63u;

		do {
			mmio_write64(dst + 0, src[0]);
			mmio_write64(dst + 1, src[1]);
			mmio_write64(dst + 2, src[2]);
			mmio_write64(dst + 3, src[3]);
			mmio_write64(dst + 4, src[4]);
			mmio_write64(dst + 5, src[5]);
			mmio_write64(dst + 6, src[6]);
			mmio_write64(dst + 7, src[7]);
			dst += 8;
			src += 8;
			bytes -= 64;
			if (unlikely((const uint8_t *)src == sq->qend))
				src = (const uint64_t *)sq->buf;
		} while (bytes);
	} else {
		mmio_write64(dst, *(const uint64_t *)ctrl);
	}
	/* Out of the write-combining buffer now, then the other buffer. */
	wc_flush();
	sq->bf_offset ^= sq->bf_size;
}

int NOINLINE zvb_post_write(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	uint8_t *seg;
	uint32_t idx, ds = 2;

	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	seg = (uint8_t *)(ctrl + 1);
	set_raddr(seg, raddr, rkey);
	seg += sizeof(struct mlx5_wqe_raddr_seg);
	if (likely(len)) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, len, lkey, addr);
		ds++;
	}
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

int NOINLINE zvb_post_write_inline(struct zvb_sq *sq, const void *data, uint32_t len,
				   uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	struct ibv_sge sge = { .addr = (uintptr_t)data, .length = len };
	uint8_t *seg;
	uint32_t idx, ds = 2;

	if (unlikely(len > sq->max_inline))
		return EINVAL;
	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	seg = (uint8_t *)(ctrl + 1);
	set_raddr(seg, raddr, rkey);
	seg += sizeof(struct mlx5_wqe_raddr_seg);
	if (likely(len))
		ds += copy_inline(sq, seg, &sge, 1, len);
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

int NOINLINE zvb_post_send(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
			   uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	uint32_t idx, ds = 1;

	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	if (likely(len)) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(ctrl + 1), len, lkey, addr);
		ds++;
	}
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

int NOINLINE zvb_post_read(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
			   uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	uint8_t *seg;
	uint32_t idx, ds = 2;

	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	seg = (uint8_t *)(ctrl + 1);
	set_raddr(seg, raddr, rkey);
	seg += sizeof(struct mlx5_wqe_raddr_seg);
	if (likely(len)) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, len, lkey, addr);
		ds++;
	}
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_RDMA_READ, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

static ALWAYS_INLINE int post_atomic(struct zvb_sq *sq, uint8_t opcode, uint64_t addr,
				     uint32_t lkey, uint64_t raddr, uint32_t rkey,
				     uint64_t swap_add, uint64_t compare, uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	uint8_t *seg;
	uint32_t idx;

	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	seg = (uint8_t *)(ctrl + 1);
	set_raddr(seg, raddr, rkey);
	seg += sizeof(struct mlx5_wqe_raddr_seg);
	set_atomic(seg, swap_add, compare);
	seg += sizeof(struct mlx5_wqe_atomic_seg);
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, 8, lkey, addr);
	finish_wqe(sq, ctrl, idx, 0, opcode, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, wr_id);
	ring_db(sq, 1, 4, ctrl);
	return 0;
}

int NOINLINE zvb_post_cas(struct zvb_sq *sq, uint64_t addr, uint32_t lkey, uint64_t raddr,
			  uint32_t rkey, uint64_t compare, uint64_t swap, uint64_t wr_id)
{
	return post_atomic(sq, MLX5_OPCODE_ATOMIC_CS, addr, lkey, raddr, rkey, swap, compare,
			   wr_id);
}

int NOINLINE zvb_post_faa(struct zvb_sq *sq, uint64_t addr, uint32_t lkey, uint64_t raddr,
			  uint32_t rkey, uint64_t add, uint64_t wr_id)
{
	return post_atomic(sq, MLX5_OPCODE_ATOMIC_FA, addr, lkey, raddr, rkey, add, 0, wr_id);
}

/*
 * A raw packet QP's SEND of one frame with IBV_SEND_IP_CSUM, as libmlx5's `_mlx5_post_send`
 * writes it for a device whose minimum inline is L2: the Ethernet segment zeroed, the
 * checksum flags, the frame's first 18 bytes inlined (`mlx5dv_set_eth_seg`; the segment lies
 * in the WQE's first basic block, so it never wraps), the rest of the frame as one data
 * segment.
 */
int NOINLINE zvb_post_eth(struct zvb_sq *sq, uint64_t addr, uint32_t len, uint32_t lkey,
			  uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	struct mlx5_wqe_eth_seg *eth;
	uint32_t idx, ds = 3;

	if (unlikely(len < ZVB_ETH_INLINE))
		return EINVAL;
	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	eth = (struct mlx5_wqe_eth_seg *)(ctrl + 1);
	memset(eth, 0, sizeof(*eth));
	mlx5dv_set_eth_seg(eth, MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM, 0, ZVB_ETH_INLINE,
			   (uint8_t *)(uintptr_t)addr);
	if (likely(len > ZVB_ETH_INLINE)) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(eth + 1), len - ZVB_ETH_INLINE,
				    lkey, addr + ZVB_ETH_INLINE);
		ds++;
	}
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

void zvb_prepare_eth_frame(struct zvb_eth_frame *f, const uint8_t *headers,
			   uint32_t ip_total_at, uint32_t udp_len_at)
{
	struct mlx5_wqe_eth_seg *eth = (struct mlx5_wqe_eth_seg *)f->segs;

	memset(f, 0, sizeof(*f));
	eth->cs_flags = MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM;
	eth->inline_hdr_sz = htobe16(ZVB_ETH_FRAME_HEADERS);
	memcpy(f->segs + offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start), headers,
	       ZVB_ETH_FRAME_HEADERS);
	f->ip_at = offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) + ip_total_at;
	f->udp_at = offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start) + udp_len_at;
	f->segs[f->ip_at] = f->segs[f->ip_at + 1] = 0;
	f->segs[f->udp_at] = f->segs[f->udp_at + 1] = 0;
	f->ip_base = ZVB_ETH_FRAME_HEADERS - (ip_total_at - 2);
	f->udp_base = ZVB_ETH_FRAME_HEADERS - (udp_len_at - 4);
}

/*
 * A prepared frame's SEND: the Ethernet segment and the headers copied from `f` (four units:
 * three in the WQE's first basic block, one in its second, which may be at the ring's
 * start), the two length fields set for the payload, one data segment for the payload.
 */
int NOINLINE zvb_post_eth_frame(struct zvb_sq *sq, const struct zvb_eth_frame *f,
				uint64_t addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct mlx5_wqe_ctrl_seg *ctrl;
	uint8_t segs[sizeof(f->segs)];
	uint8_t *second;
	uint32_t idx, ds = 5;
	uint16_t v;

	if (unlikely(sq_full(sq, 0)))
		return ENOMEM;
	idx = sq->cur_post & (sq->wqe_cnt - 1);
	ctrl = wqe_at(sq, idx);
	second = wqe_at(sq, (idx + 1) & (sq->wqe_cnt - 1));
	memcpy(segs, f->segs, sizeof(segs));
	v = htobe16(f->ip_base + len);
	memcpy(segs + f->ip_at, &v, 2);
	v = htobe16(f->udp_base + len);
	memcpy(segs + f->udp_at, &v, 2);
	memcpy(ctrl + 1, segs, 48);
	memcpy(second, segs + 48, 16);
	if (likely(len)) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(second + 16), len, lkey, addr);
		ds++;
	}
	finish_wqe(sq, ctrl, idx, 0, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, ds, 0, wr_id);
	ring_db(sq, 1, ds, ctrl);
	return 0;
}

/* mlx5 opcodes of the verbs opcodes an RC QP takes here; 0xff: not supported. */
static const uint8_t mlx5_opcode_of[] = {
	[IBV_WR_RDMA_WRITE] = MLX5_OPCODE_RDMA_WRITE,
	[IBV_WR_RDMA_WRITE_WITH_IMM] = MLX5_OPCODE_RDMA_WRITE_IMM,
	[IBV_WR_SEND] = MLX5_OPCODE_SEND,
	[IBV_WR_SEND_WITH_IMM] = MLX5_OPCODE_SEND_IMM,
	[IBV_WR_RDMA_READ] = MLX5_OPCODE_RDMA_READ,
	[IBV_WR_ATOMIC_CMP_AND_SWP] = MLX5_OPCODE_ATOMIC_CS,
	[IBV_WR_ATOMIC_FETCH_AND_ADD] = MLX5_OPCODE_ATOMIC_FA,
};

int NOINLINE zvb_post_send_wr(struct zvb_sq *sq, struct ibv_send_wr *wr,
			      struct ibv_send_wr **bad_wr)
{
	struct mlx5_wqe_ctrl_seg *ctrl = NULL;
	uint32_t nreq, ds = 0;
	int err = 0;

	for (nreq = 0; wr; ++nreq, wr = wr->next) {
		uint8_t *seg;
		uint32_t idx, imm = 0;
		uint8_t fm_ce_se, opcode;
		int i;

		if (unlikely((unsigned)wr->opcode >= sizeof(mlx5_opcode_of) ||
			     !mlx5_opcode_of[wr->opcode])) {
			err = EINVAL;
			*bad_wr = wr;
			goto out;
		}
		if (unlikely(sq_full(sq, nreq))) {
			err = ENOMEM;
			*bad_wr = wr;
			goto out;
		}
		if (unlikely(wr->num_sge < 0 || (uint32_t)wr->num_sge > sq->max_gs)) {
			err = ENOMEM;
			*bad_wr = wr;
			goto out;
		}
		opcode = mlx5_opcode_of[wr->opcode];
		fm_ce_se = (wr->send_flags & IBV_SEND_FENCE ? MLX5_WQE_CTRL_FENCE : 0) |
			   (wr->send_flags & IBV_SEND_SIGNALED ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
			   (wr->send_flags & IBV_SEND_SOLICITED ? MLX5_WQE_CTRL_SOLICITED : 0);
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_SEND_WITH_IMM)
			imm = wr->imm_data;
		idx = sq->cur_post & (sq->wqe_cnt - 1);
		ctrl = wqe_at(sq, idx);
		seg = (uint8_t *)(ctrl + 1);
		ds = 1;
		switch (wr->opcode) {
		case IBV_WR_RDMA_READ:
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			set_raddr(seg, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
			seg += sizeof(struct mlx5_wqe_raddr_seg);
			ds++;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			set_raddr(seg, wr->wr.atomic.remote_addr, wr->wr.atomic.rkey);
			seg += sizeof(struct mlx5_wqe_raddr_seg);
			if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
				set_atomic(seg, wr->wr.atomic.swap, wr->wr.atomic.compare_add);
			else
				set_atomic(seg, wr->wr.atomic.compare_add, 0);
			seg += sizeof(struct mlx5_wqe_atomic_seg);
			ds += 2;
			break;
		default:
			break;
		}
		if ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge) {
			uint32_t len = 0;

			if (unlikely(wr->opcode == IBV_WR_RDMA_READ ||
				     wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
				     wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)) {
				err = EINVAL;
				*bad_wr = wr;
				goto out;
			}
			for (i = 0; i < wr->num_sge; i++)
				len += wr->sg_list[i].length;
			if (unlikely(len > sq->max_inline)) {
				err = ENOMEM;
				*bad_wr = wr;
				goto out;
			}
			if (len)
				ds += copy_inline(sq, seg, wr->sg_list, wr->num_sge, len);
		} else {
			struct mlx5_wqe_data_seg *dseg = (struct mlx5_wqe_data_seg *)seg;

			for (i = 0; i < wr->num_sge; i++) {
				if (unlikely((uint8_t *)dseg == sq->qend))
					dseg = (struct mlx5_wqe_data_seg *)sq->buf;
				if (likely(wr->sg_list[i].length)) {
					uint32_t n = wr->sg_list[i].length;

					if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
					    wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
						n = 8;
					mlx5dv_set_data_seg(dseg, n, wr->sg_list[i].lkey,
							    wr->sg_list[i].addr);
					dseg++;
					ds++;
				}
			}
		}
		finish_wqe(sq, ctrl, idx, nreq, opcode, fm_ce_se, ds, imm, wr->wr_id);
	}
out:
	ring_db(sq, nreq, ds, ctrl);
	return err;
}

/* ------------------------------------------------------------------------------------------ */
/* QP table                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct zvb_qp_table *zvb_qp_table_new(void)
{
	return calloc(1, sizeof(struct zvb_qp_table));
}

int zvb_qp_table_add(struct zvb_qp_table *t, struct zvb_sq *sq)
{
	uint32_t tind = sq->qpn >> ZVB_QP_TABLE_SHIFT;

	if (sq->qpn >> 24)
		return -1;
	if (!t->t[tind].refcnt) {
		t->t[tind].table = calloc(ZVB_QP_TABLE_MASK + 1, sizeof(struct zvb_sq *));
		if (!t->t[tind].table)
			return -1;
	}
	t->t[tind].refcnt++;
	t->t[tind].table[sq->qpn & ZVB_QP_TABLE_MASK] = sq;
	return 0;
}

void zvb_qp_table_free(struct zvb_qp_table *t)
{
	int i;

	if (!t)
		return;
	for (i = 0; i < ZVB_QP_TABLE_SIZE; i++)
		free(t->t[i].table);
	free(t);
}

static ALWAYS_INLINE struct zvb_sq *find_qp(const struct zvb_qp_table *t, uint32_t qpn)
{
	uint32_t tind = qpn >> ZVB_QP_TABLE_SHIFT;

	if (likely(t->t[tind].refcnt))
		return t->t[tind].table[qpn & ZVB_QP_TABLE_MASK];
	return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Completion queue                                                                            */
/* ------------------------------------------------------------------------------------------ */

enum { CQ_OK = 0, CQ_EMPTY = -1, CQ_POLL_ERR = -2 };

static ALWAYS_INLINE struct mlx5_cqe64 *next_sw_cqe(const struct zvb_cq *cq)
{
	uint32_t n = cq->cons_index;
	uint8_t *cqe = cq->buf + (size_t)(n & cq->cqe_mask) * cq->cqe_sz;
	struct mlx5_cqe64 *cqe64 = (struct mlx5_cqe64 *)(cq->cqe_sz == 64 ? cqe : cqe + 64);

	if (likely(mlx5dv_get_cqe_opcode(cqe64) != MLX5_CQE_INVALID) &&
	    !((cqe64->op_own & MLX5_CQE_OWNER_MASK) ^ !!(n & (cq->cqe_mask + 1))))
		return cqe64;
	return NULL;
}

static enum ibv_wc_status status_of(uint8_t syndrome)
{
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR: return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR: return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR: return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR: return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR: return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR: return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR: return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR: return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR: return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR: return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR: return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR: return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR: return IBV_WC_REM_ABORT_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

/* Error CQEs: the WQE they name completes with the mapped status. */
static NOINLINE int handle_error_cqe(struct mlx5_cqe64 *cqe64, struct zvb_sq *qp, uint8_t opcode,
				     uint16_t wqe_ctr, struct ibv_wc *wc)
{
	struct mlx5_err_cqe *ecqe = (struct mlx5_err_cqe *)cqe64;

	wc->status = status_of(ecqe->syndrome);
	wc->vendor_err = ecqe->vendor_err_synd;
	if (opcode == MLX5_CQE_REQ_ERR) {
		uint32_t idx = wqe_ctr & (qp->wqe_cnt - 1);

		wc->wr_id = qp->wrid[idx];
		qp->tail = qp->wqe_head[idx] + 1;
	} else {
		wc->wr_id = qp->rq_wrid[qp->rq_tail & (qp->rq_wqe_cnt - 1)];
		qp->rq_tail++;
	}
	return CQ_OK;
}

/*
 * Copies `size` bytes the device scattered into a CQE to the buffers of receive WQE `idx`,
 * gather entry by entry, as libmlx5's poller does for a QP created allowing scatter-to-CQE.
 * IBV_WC_SUCCESS, or IBV_WC_LOC_LEN_ERR when the buffers are too small.
 */
static ALWAYS_INLINE enum ibv_wc_status copy_to_recv_wqe(const struct zvb_sq *qp, uint32_t idx,
							 const uint8_t *src, uint32_t size)
{
	const struct mlx5_wqe_data_seg *seg =
		(const struct mlx5_wqe_data_seg *)(qp->rq_buf + ((size_t)idx << qp->rq_wqe_shift));
	uint32_t i;

	for (i = 0; i < qp->rq_max_gs && size; i++) {
		uint32_t len = be32toh(seg[i].byte_count);
		uint32_t n = size < len ? size : len;

		if (seg[i].lkey == htobe32(MLX5_INVALID_LKEY))
			break;
		memcpy((void *)(uintptr_t)be64toh(seg[i].addr), src, n);
		src += n;
		size -= n;
	}
	return size ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
}

/*
 * One completion. `ts`: where its timestamp goes (NULL: not read); `scatter`: the QPs may
 * have receives scattered into their CQEs. Both are constants at every call, so the variants
 * compile to what they use.
 */
static ALWAYS_INLINE int poll_one(struct zvb_cq *cq, struct zvb_sq **cur, struct ibv_wc *wc,
				  int lfence, uint64_t *ts, int scatter)
{
	struct mlx5_cqe64 *cqe64 = next_sw_cqe(cq);
	struct zvb_sq *qp;
	uint32_t qpn, idx;
	uint16_t wqe_ctr;
	uint8_t opcode;

	if (!cqe64)
		return CQ_EMPTY;
	++cq->cons_index;
	/* The CQE body after its owner byte. */
	if (lfence)
		from_device_lfence();
	else
		from_device_barrier();

	qpn = be32toh(cqe64->sop_drop_qpn) & 0xffffff;
	wc->wc_flags = 0;
	wc->qp_num = qpn;
	opcode = mlx5dv_get_cqe_opcode(cqe64);
	wqe_ctr = be16toh(cqe64->wqe_counter);
	if (!*cur || (*cur)->qpn != qpn) {
		*cur = find_qp(cq->qps, qpn);
		if (unlikely(!*cur))
			return CQ_POLL_ERR;
	}
	qp = *cur;
	switch (opcode) {
	case MLX5_CQE_REQ:
		idx = wqe_ctr & (qp->wqe_cnt - 1);
		switch (be32toh(cqe64->sop_drop_qpn) >> 24) {
		case MLX5_OPCODE_RDMA_WRITE_IMM:
			wc->wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_RDMA_WRITE:
			wc->opcode = IBV_WC_RDMA_WRITE;
			break;
		case MLX5_OPCODE_SEND_IMM:
			wc->wc_flags |= IBV_WC_WITH_IMM;
			/* fall through */
		case MLX5_OPCODE_SEND:
			wc->opcode = IBV_WC_SEND;
			break;
		case MLX5_OPCODE_RDMA_READ:
			wc->opcode = IBV_WC_RDMA_READ;
			wc->byte_len = be32toh(cqe64->byte_cnt);
			break;
		case MLX5_OPCODE_ATOMIC_CS:
			wc->opcode = IBV_WC_COMP_SWAP;
			wc->byte_len = 8;
			break;
		case MLX5_OPCODE_ATOMIC_FA:
			wc->opcode = IBV_WC_FETCH_ADD;
			wc->byte_len = 8;
			break;
		case MLX5_OPCODE_NOP:
			wc->opcode = qp->wr_data[idx];
			break;
		}
		wc->status = IBV_WC_SUCCESS;
		if (unlikely(cqe64->op_own & (MLX5_INLINE_SCATTER_32 | MLX5_INLINE_SCATTER_64)))
			wc->status = IBV_WC_GENERAL_ERR;
		wc->wr_id = qp->wrid[idx];
		qp->tail = qp->wqe_head[idx] + 1;
		break;
	case MLX5_CQE_RESP_WR_IMM:
	case MLX5_CQE_RESP_SEND:
	case MLX5_CQE_RESP_SEND_IMM:
		wc->byte_len = be32toh(cqe64->byte_cnt);
		if (opcode == MLX5_CQE_RESP_WR_IMM) {
			wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
			wc->wc_flags = IBV_WC_WITH_IMM;
			wc->imm_data = cqe64->imm_inval_pkey;
		} else {
			wc->opcode = IBV_WC_RECV;
			if (opcode == MLX5_CQE_RESP_SEND_IMM) {
				wc->wc_flags = IBV_WC_WITH_IMM;
				wc->imm_data = cqe64->imm_inval_pkey;
			}
		}
		/* Where the message came from, as libmlx5's handle_responder reports it. */
		wc->slid = be16toh(cqe64->slid);
		wc->sl = (be32toh(cqe64->flags_rqpn) >> 24) & 0xf;
		wc->src_qp = be32toh(cqe64->flags_rqpn) & 0xffffff;
		wc->dlid_path_bits = cqe64->ml_path & 0x7f;
		if ((be32toh(cqe64->flags_rqpn) >> 28) & 3)
			wc->wc_flags |= IBV_WC_GRH;
		wc->pkey_index = be32toh(cqe64->imm_inval_pkey) & 0xffff;
		wc->status = IBV_WC_SUCCESS;
		idx = qp->rq_tail & (qp->rq_wqe_cnt - 1);
		if (scatter) {
			if (cqe64->op_own & MLX5_INLINE_SCATTER_32)
				wc->status = copy_to_recv_wqe(qp, idx, (const uint8_t *)cqe64,
							      wc->byte_len);
			else if (cqe64->op_own & MLX5_INLINE_SCATTER_64)
				wc->status = copy_to_recv_wqe(qp, idx, (const uint8_t *)cqe64 - 64,
							      wc->byte_len);
		}
		wc->wr_id = qp->rq_wrid[idx];
		qp->rq_tail++;
		break;
	case MLX5_CQE_REQ_ERR:
	case MLX5_CQE_RESP_ERR:
		return handle_error_cqe(cqe64, qp, opcode, wqe_ctr, wc);
	default:
		return CQ_POLL_ERR;
	}
	if (ts)
		*ts = be64toh(cqe64->timestamp);
	return CQ_OK;
}

static ALWAYS_INLINE int poll_cq(struct zvb_cq *cq, int ne, struct ibv_wc *wc, int lfence,
				 uint64_t *ts, int scatter)
{
	struct zvb_sq *cur = NULL;
	int npolled, err = CQ_OK;

	for (npolled = 0; npolled < ne; ++npolled) {
		err = poll_one(cq, &cur, wc + npolled, lfence, ts ? ts + npolled : NULL, scatter);
		if (err != CQ_OK)
			break;
	}
	cq->dbrec[ZVB_CQ_SET_CI] = htobe32(cq->cons_index & 0xffffff);
	return err == CQ_POLL_ERR ? err : npolled;
}

int NOINLINE zvb_poll_cq(struct zvb_cq *cq, int ne, struct ibv_wc *wc)
{
	return poll_cq(cq, ne, wc, 0, NULL, 0);
}

int NOINLINE zvb_poll_cq_lfence(struct zvb_cq *cq, int ne, struct ibv_wc *wc)
{
	return poll_cq(cq, ne, wc, 1, NULL, 0);
}

int NOINLINE zvb_poll_cq_ts(struct zvb_cq *cq, int ne, struct ibv_wc *wc, uint64_t *ts)
{
	return poll_cq(cq, ne, wc, 0, ts, 0);
}

int NOINLINE zvb_poll_cq_scatter(struct zvb_cq *cq, int ne, struct ibv_wc *wc)
{
	return poll_cq(cq, ne, wc, 0, NULL, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Striding receive queue, packets in place                                                    */
/* ------------------------------------------------------------------------------------------ */

/* `struct mpwrq_cqe_bc` of the kernel's mlx5/device.h: byte_cnt of a striding queue's CQE. */
#define ZVB_MPRQ_FILLER 0x80000000u
#define ZVB_MPRQ_STRIDES_SHIFT 16
#define ZVB_MPRQ_STRIDES_MASK 0x7fffu
#define ZVB_MPRQ_LEN_MASK 0xffffu
/* `mlx5dv_get_cqe_format` of a compressed session's title (libmlx5's MLX5_COMPRESSED). */
#define ZVB_CQE_COMPRESSED 3

/* Posts again every WQE from the oldest on whose strides are all back (DPDK's
 * `mlx5_rx_burst_mprq` moves to the next WQE and rings the RQ doorbell the same way). */
static NOINLINE void mprq_repost(struct zvb_mprq *rq)
{
	uint32_t num = 1u << rq->log_num;
	uint32_t tail = rq->tail, head = rq->head;

	while (rq->released[tail & rq->wqe_mask] >= num) {
		rq->released[tail & rq->wqe_mask] = 0;
		++tail;
		++head;
	}
	rq->tail = tail;
	rq->head = head;
	to_device_barrier();
	rq->dbrec[0] = htobe32(head & 0xffff);
}

static ALWAYS_INLINE void mprq_release(struct zvb_mprq *rq, uint32_t wqe, uint32_t strides)
{
	uint32_t done = rq->released[wqe] += strides;

	if (done >= 1u << rq->log_num && wqe == (rq->tail & rq->wqe_mask))
		mprq_repost(rq);
}

int NOINLINE zvb_rx_stride(struct zvb_cq *cq, struct zvb_mprq *rq, int max, uint64_t *sum)
{
	uint64_t acc = 0;
	int n = 0, consumed = 0;

	while (n < max) {
		struct mlx5_cqe64 *cqe64 = next_sw_cqe(cq);
		uint32_t byte_cnt, wqe, stride, strides, len;
		uint64_t first;
		uint8_t *p;

		if (!cqe64)
			break;
		from_device_barrier();
		if (unlikely(mlx5dv_get_cqe_opcode(cqe64) != MLX5_CQE_RESP_SEND ||
			     mlx5dv_get_cqe_format(cqe64) == ZVB_CQE_COMPRESSED))
			break;
		++cq->cons_index;
		consumed = 1;
		byte_cnt = be32toh(cqe64->byte_cnt);
		wqe = be16toh(cqe64->wqe_id) & rq->wqe_mask;
		stride = be16toh(cqe64->wqe_counter);
		strides = (byte_cnt >> ZVB_MPRQ_STRIDES_SHIFT) & ZVB_MPRQ_STRIDES_MASK;
		if (byte_cnt & ZVB_MPRQ_FILLER) {
			mprq_release(rq, wqe, strides);
			continue;
		}
		len = byte_cnt & ZVB_MPRQ_LEN_MASK;
		if (unlikely(strides == 0 || stride + strides > 1u << rq->log_num ||
			     len > strides << rq->log_stride)) {
			++rq->malformed;
			mprq_release(rq, wqe, strides);
			continue;
		}
		p = rq->buf + ((((size_t)wqe << rq->log_num) + stride) << rq->log_stride);
		/* The touch: the packet in place, read where it lies. */
		first = 0;
		if (len >= 8)
			memcpy(&first, p, 8);
		acc += first + len;
		++n;
		mprq_release(rq, wqe, strides);
	}
	if (consumed)
		cq->dbrec[ZVB_CQ_SET_CI] = htobe32(cq->cons_index & 0xffffff);
	*sum += acc;
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Fixtures (not timed)                                                                        */
/* ------------------------------------------------------------------------------------------ */

struct ibv_send_wr *zvb_wrs_new(uint32_t n)
{
	struct ibv_send_wr *wrs = calloc(n, sizeof(struct ibv_send_wr) + sizeof(struct ibv_sge));
	struct ibv_sge *sges = (struct ibv_sge *)(wrs + n);
	uint32_t i;

	if (!wrs)
		return NULL;
	for (i = 0; i < n; i++) {
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		wrs[i].sg_list = &sges[i];
		wrs[i].num_sge = 1;
	}
	return wrs;
}

void zvb_wrs_set(struct ibv_send_wr *wrs, uint32_t i, const struct zvb_wr_desc *d)
{
	struct ibv_send_wr *wr = &wrs[i];

	wr->wr_id = d->wr_id;
	wr->opcode = (enum ibv_wr_opcode)d->opcode;
	wr->send_flags = d->send_flags;
	wr->imm_data = d->imm;
	wr->sg_list->addr = d->addr;
	wr->sg_list->length = d->len;
	wr->sg_list->lkey = d->lkey;
	if (d->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || d->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr->wr.atomic.remote_addr = d->raddr;
		wr->wr.atomic.rkey = d->rkey;
		wr->wr.atomic.compare_add = d->compare_add;
		wr->wr.atomic.swap = d->swap;
	} else {
		wr->wr.rdma.remote_addr = d->raddr;
		wr->wr.rdma.rkey = d->rkey;
	}
}

void zvb_wrs_free(struct ibv_send_wr *wrs)
{
	free(wrs);
}

size_t zvb_sizeof(int which)
{
	switch (which) {
	case 0: return sizeof(struct zvb_sq);
	case 1: return sizeof(struct zvb_cq);
	case 2: return sizeof(struct ibv_wc);
	case 3: return sizeof(struct zvb_wr_desc);
	case 4: return sizeof(struct zvb_mprq);
	default: return 0;
	}
}
