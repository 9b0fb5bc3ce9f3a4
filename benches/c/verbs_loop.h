/*
 * The C baseline for zverbs' libibverbs fallback: a post+poll loop on raw ibv_post_send /
 * ibv_poll_cq over two RC QPs of one device connected to each other (see verbs_loop.c).
 */
#ifndef ZVB_VERBS_LOOP_H
#define ZVB_VERBS_LOOP_H

#include <stddef.h>
#include <stdint.h>

struct zvb_vloop;

/*
 * Opens device `dev` (NULL: the first), port `port`, GID index `gid_index` (-1: no GRH, for
 * InfiniBand), and connects two RC QPs to each other; RDMA WRITEs of `size` bytes (1 to 4096).
 * 0, or -1 with a message in `err`.
 */
int zvb_vloop_open(const char *dev, int port, int gid_index, uint32_t size,
		   struct zvb_vloop **out, char *err, size_t errlen);

/* `n` iterations: post one signaled RDMA WRITE, poll until its completion. 0, or -1. */
int zvb_vloop_run(struct zvb_vloop *l, uint64_t n);

/* Destroys everything `zvb_vloop_open` created (NULL: nothing). */
void zvb_vloop_close(struct zvb_vloop *l);

#endif
