/*
 * The C baseline for zverbs' libibverbs fallback: the post+poll loop written on raw
 * `ibv_post_send` / `ibv_poll_cq`, as a C program on libibverbs would (perftest's latency
 * tests post and poll this way).
 *
 * Set-up: two RC QPs of one device connected to each other, one CQ each, a 4 KiB registered
 * buffer each. One iteration: post one signaled RDMA WRITE of `size` bytes from A's buffer to
 * B's, then poll A's CQ until its completion arrives.
 *
 * libibverbs is loaded at run time (dlopen of libibverbs.so.1), as zverbs' control path loads
 * it, so that the crate builds and its other benchmarks run on machines without rdma-core. The
 * loop itself calls `ibv_post_send` and `ibv_poll_cq`, the inline functions of verbs.h, which
 * call the provider through `ctx->ops`.
 */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "verbs_loop.h"

#define BUF_SIZE 4096

/* The exported functions the set-up needs, looked up by name. */
struct verbs_api {
	void *lib;
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
				    int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
};

struct zvb_vloop {
	struct verbs_api api;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr[2];
	void *buf[2];
	uint32_t size;
	uint64_t done;
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int load(struct verbs_api *a, char *err, size_t errlen)
{
	a->lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!a->lib)
		return fail(err, errlen, "cannot load libibverbs.so.1 (Debian package libibverbs1): %s",
			    dlerror());
#define SYM(field, name)                                                                   \
	do {                                                                               \
		*(void **)(&a->field) = dlsym(a->lib, name);                               \
		if (!a->field)                                                             \
			return fail(err, errlen, "libibverbs has no %s", name);            \
	} while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(create_qp, "ibv_create_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
	SYM(modify_qp, "ibv_modify_qp");
#undef SYM
	return 0;
}

/* INIT, RTR (to `remote`), RTS: an RC QP connected to a QP of the same port. */
static int connect_qp(struct zvb_vloop *l, struct ibv_qp *qp, uint32_t remote, uint8_t port,
		      const struct ibv_port_attr *pa, int gid_index, const union ibv_gid *gid,
		      char *err, size_t errlen)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (l->api.modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return fail(err, errlen, "modify QP to INIT: %s", strerror(errno));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa->active_mtu;
	a.dest_qp_num = remote;
	a.rq_psn = 0x1234;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = pa->lid;
	a.ah_attr.port_num = port;
	if (gid_index >= 0) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (l->api.modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				     IBV_QP_MIN_RNR_TIMER))
		return fail(err, errlen, "modify QP to RTR: %s", strerror(errno));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x1234;
	a.max_rd_atomic = 1;
	if (l->api.modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return fail(err, errlen, "modify QP to RTS: %s", strerror(errno));
	return 0;
}

int zvb_vloop_open(const char *dev, int port, int gid_index, uint32_t size,
		   struct zvb_vloop **out, char *err, size_t errlen)
{
	struct zvb_vloop *l = calloc(1, sizeof(*l));
	struct ibv_device **list;
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int i, n = 0;

	*out = NULL;
	if (!l)
		return fail(err, errlen, "out of memory");
	if (size == 0 || size > BUF_SIZE) {
		free(l);
		return fail(err, errlen, "size %u: 1 to %d bytes", size, BUF_SIZE);
	}
	l->size = size;
	if (load(&l->api, err, errlen))
		goto out;
	list = l->api.get_device_list(&n);
	if (!list || n == 0) {
		fail(err, errlen, "no RDMA device");
		if (list)
			l->api.free_device_list(list);
		goto out;
	}
	for (i = 0; i < n; i++)
		if (!dev || !strcmp(l->api.get_device_name(list[i]), dev))
			break;
	if (i == n) {
		fail(err, errlen, "no RDMA device named %s", dev);
		l->api.free_device_list(list);
		goto out;
	}
	l->ctx = l->api.open_device(list[i]);
	l->api.free_device_list(list);
	if (!l->ctx) {
		fail(err, errlen, "open device: %s", strerror(errno));
		goto out;
	}
	memset(&pa, 0, sizeof(pa));
	if (l->api.query_port(l->ctx, (uint8_t)port, &pa)) {
		fail(err, errlen, "query port %d: %s", port, strerror(errno));
		goto out;
	}
	memset(&gid, 0, sizeof(gid));
	if (gid_index >= 0 && l->api.query_gid(l->ctx, (uint8_t)port, gid_index, &gid)) {
		fail(err, errlen, "query GID %d: %s", gid_index, strerror(errno));
		goto out;
	}
	l->pd = l->api.alloc_pd(l->ctx);
	if (!l->pd) {
		fail(err, errlen, "alloc PD: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < 2; i++) {
		struct ibv_qp_init_attr qa;

		l->buf[i] = aligned_alloc(64, BUF_SIZE);
		if (!l->buf[i]) {
			fail(err, errlen, "out of memory");
			goto out;
		}
		memset(l->buf[i], 0, BUF_SIZE);
		l->mr[i] = l->api.reg_mr(l->pd, l->buf[i], BUF_SIZE,
					 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						 IBV_ACCESS_REMOTE_READ);
		if (!l->mr[i]) {
			fail(err, errlen, "register memory: %s", strerror(errno));
			goto out;
		}
		l->cq[i] = l->api.create_cq(l->ctx, 64, NULL, NULL, 0);
		if (!l->cq[i]) {
			fail(err, errlen, "create CQ: %s", strerror(errno));
			goto out;
		}
		memset(&qa, 0, sizeof(qa));
		qa.send_cq = l->cq[i];
		qa.recv_cq = l->cq[i];
		qa.qp_type = IBV_QPT_RC;
		qa.cap.max_send_wr = 16;
		qa.cap.max_recv_wr = 16;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		l->qp[i] = l->api.create_qp(l->pd, &qa);
		if (!l->qp[i]) {
			fail(err, errlen, "create QP: %s", strerror(errno));
			goto out;
		}
	}
	for (i = 0; i < 2; i++)
		if (connect_qp(l, l->qp[i], l->qp[1 - i]->qp_num, (uint8_t)port, &pa, gid_index,
			       &gid, err, errlen))
			goto out;
	*out = l;
	return 0;
out:
	zvb_vloop_close(l);
	return -1;
}

int zvb_vloop_run(struct zvb_vloop *l, uint64_t n)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)l->buf[0],
		.length = l->size,
		.lkey = l->mr[0]->lkey,
	};
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	uint64_t i;

	memset(&wr, 0, sizeof(wr));
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)l->buf[1];
	wr.wr.rdma.rkey = l->mr[1]->rkey;
	for (i = 0; i < n; i++) {
		int got;

		wr.wr_id = l->done + i;
		if (ibv_post_send(l->qp[0], &wr, &bad))
			return -1;
		do
			got = ibv_poll_cq(l->cq[0], 1, &wc);
		while (got == 0);
		if (got < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != wr.wr_id)
			return -1;
	}
	l->done += n;
	return 0;
}

void zvb_vloop_close(struct zvb_vloop *l)
{
	int i;

	if (!l)
		return;
	for (i = 0; i < 2; i++) {
		if (l->qp[i])
			l->api.destroy_qp(l->qp[i]);
		if (l->cq[i])
			l->api.destroy_cq(l->cq[i]);
		if (l->mr[i])
			l->api.dereg_mr(l->mr[i]);
		free(l->buf[i]);
	}
	if (l->pd)
		l->api.dealloc_pd(l->pd);
	if (l->ctx)
		l->api.close_device(l->ctx);
	if (l->api.lib)
		dlclose(l->api.lib);
	free(l);
}
