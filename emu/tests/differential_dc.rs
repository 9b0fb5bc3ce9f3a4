//! Differential check of the DC segment against rdma-core's own mlx5 provider, on the emulated
//! ConnectX.
//!
//! Two DC initiators of the same kind are created through libmlx5 (`mlx5dv_create_qp`, same
//! capabilities, each with its own CQ), and three DC targets on one SRQ, each with its own
//! access key, and four address handles to this port (two with a GRH of random GID, flow
//! label, hop limit and traffic class). For every randomized request — WRITE, WRITE_IMM, SEND,
//! SEND_IMM, READ, CS, FA; inline or 1..=max_send_sge entries; signaled or not; fenced or
//! solicited now and then; to any target through any handle; alone or in a batch of up to
//! three — the same request goes to one initiator through libmlx5's work-request builders
//! (`ibv_wr_start`, the opcode call, `mlx5dv_wr_set_dc_addr`, `ibv_wr_set_sge_list` or
//! `ibv_wr_set_inline_data_list`, `ibv_wr_complete`) and to the other through the direct path
//! (`zverbs_mlx5dv::SendQueue<_, Dci>`, a `DcDest` of the same handle's address vector, number and
//! key), and the WQE bytes (control, datagram, remote address, atomic, data or inline
//! segments) are compared, at every position where a WQE meets the ring end. The software
//! device executes both; the signaled completions libmlx5's `ibv_poll_cq` decodes are compared
//! with our poller's, and the targets' receives are counted.
//!
//! Masks (as in `differential.rs`): the QPN in `qpn_ds`; the padding after inline data; the
//! `compare` field of a fetch-and-add; `byte_len` of SEND and WRITE completions; and, for the
//! builder API only, the control segment's immediate of an operation that carries none
//! (libmlx5's builder leaves the ring's old bytes there).
//!
//! Seed and size: `ZVERBS_EMU_DIFF_SEED`, `ZVERBS_EMU_DIFF_CASES` (default 2000). Run by `cargo
//! xtask test --only connectx`.

mod common;
mod differ;

use differ::{
    Compared, Draw, OPS, RECV, Req, Start, assert_mode, assert_same_completions, direct_state,
    flags, in_mode, mask_unwritten, poll_both, random_ahs, sq_caps, sq_pi, start,
};
use std::time::{Duration, Instant};
use zverbs_core::{DcDest, RemoteBuf, Sge};
use zverbs_emu::verbs::Qp;
use zverbs_ffi::types::{
    IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND_WITH_IMM, ibv_data_buf, ibv_qp_cap, ibv_recv_wr,
    ibv_sge, ibv_wc,
};
use zverbs_mlx5dv::SendQueue;

const RECV_SLOT: u64 = 4096;
const MAX_SGE_LEN: u64 = 256;
const TARGETS: usize = 3;
const KEY: u64 = 0x0dc0_0000_0000_0000;

/// What the device ignores and libmlx5 does not write, in a DC WQE (control 16, datagram 48,
/// then the segments of the operation).
fn mask(w: &mut [u8], r: &Req) {
    // The control segment's immediate of an operation without one: libmlx5's builder writes
    // it only in the calls that carry one (WRITE_IMM, SEND_IMM) and leaves the ring's old
    // bytes otherwise; the direct path writes 0; the device reads it for those two only.
    if !matches!(r.op, IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_SEND_WITH_IMM) {
        w[12..16].fill(0);
    }
    mask_unwritten(w, r.op, 64);
}

#[test]
fn dc_wqes_match_libmlx5_blueflame() {
    in_mode("dc_wqes_match_libmlx5_blueflame", "BlueFlame", run);
}

#[test]
fn dc_wqes_match_libmlx5_doorbell_only() {
    in_mode("dc_wqes_match_libmlx5_doorbell_only", "doorbell-only", run);
}

#[allow(clippy::too_many_lines)]
fn run(mode: &str) {
    let Start {
        mut rng,
        cases,
        ctx,
        base,
        mr,
    } = start(0x00dc_00dc, 2000, true);
    // A small ring (WQEs of 2 to 4 basic blocks), so that every size meets the ring end at
    // every position it can.
    let ask = ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 0,
        max_send_sge: 8,
        max_recv_sge: 0,
        max_inline_data: 128,
    };
    let (cq_lib, cq_ours) = (ctx.create_cq(255).unwrap(), ctx.create_cq(255).unwrap());
    let q_lib = ctx.create_dc(cq_lib, ask, None, None).unwrap();
    let q_ours = ctx.create_dc(cq_ours, ask, None, None).unwrap();
    assert_eq!(q_lib.cap, q_ours.cap, "the same kind of QP");
    let q_lib = ctx.ready_dc(q_lib, false).unwrap();
    let q_ours = ctx.ready_dc(q_ours, false).unwrap();
    let (l_lib, _) = ctx.dv(q_lib, cq_lib).unwrap();
    let (l_ours, c_ours) = ctx.dv(q_ours, cq_ours).unwrap();
    assert_eq!(l_lib.sq.wqe_cnt, l_ours.sq.wqe_cnt);
    assert_mode(mode, &l_lib);
    let caps = q_lib.cap;

    // The targets, on one SRQ and one CQ; receives posted ahead for every SEND and WRITE
    // with immediate of both initiators.
    let srq = ctx.create_srq(1024, 1).unwrap();
    let dct_cq = ctx.create_cq(2047).unwrap();
    let targets: Vec<(Qp, u64)> = (0..TARGETS)
        .map(|i| {
            let key = KEY + i as u64 * 0x1111;
            let t = ctx.create_dc(dct_cq, ibv_qp_cap::default(), Some(key), Some(srq));
            (ctx.ready_dc(t.unwrap(), true).unwrap(), key)
        })
        .collect();
    let mut recv_id = 0u64;
    let mut post_recvs = |n: usize| {
        for _ in 0..n {
            let mut s = ibv_sge {
                addr: base + RECV + (recv_id % 64) * RECV_SLOT,
                length: RECV_SLOT as u32,
                lkey: mr.lkey,
            };
            let mut w = ibv_recv_wr {
                wr_id: recv_id,
                next: core::ptr::null_mut(),
                sg_list: &mut s,
                num_sge: 1,
            };
            // SAFETY: a receive into the registered arena.
            assert_eq!(unsafe { ctx.post_srq_recv(srq, &mut w) }, 0);
            recv_id += 1;
        }
    };
    post_recvs(512);
    let mut posted_recvs = 512usize;

    // Address handles to this port, every other one with a GRH.
    let (ahs, _) = random_ahs(&ctx, &mut rng, 4);
    println!(
        "{mode}: DCIs {:#x} (libmlx5) and {:#x} (direct path), SQ {} blocks, bf.size {}, \
         max_send_sge {}, max_inline_data {}; DCTs {:x?}",
        q_lib.qpn,
        q_ours.qpn,
        l_lib.sq.wqe_cnt,
        l_lib.bf.size,
        caps.max_send_sge,
        caps.max_inline_data,
        targets.iter().map(|t| t.0.qpn).collect::<Vec<_>>()
    );

    // The direct path's queue and poller.
    let (sq_state, _, mut cq) = direct_state(&l_ours, &c_ours, q_ours.qpn, false);
    let dc_caps = sq_caps(&caps, c_ours.cqe_cnt, zverbs_core::Transport::Rc);
    // SAFETY: libmlx5 allocated the ring for this DCI, which lives as long as the process;
    // nothing else posts to it.
    let mut sq = unsafe { SendQueue::new_dc(&l_ours, dc_caps, sq_state, None) }.unwrap();
    let wr = ctx.dci_wr(q_lib).unwrap();
    let (qpx, dv) = (wr.qpx.as_ptr(), wr.dv.as_ptr());

    let cnt = l_lib.sq.wqe_cnt;
    let mut cmp = Compared::default();
    let (mut compared_wc, mut received) = (0u64, 0usize);
    let (mut ops, mut inline_n, mut grh_n) = ([0u64; 7], 0u64, 0u64);
    let draw = Draw {
        max_sge_len: MAX_SGE_LEN,
        max_inline: caps.max_inline_data.min(128),
        dc: Some((TARGETS, ahs.len())),
    };
    let mut wc_dct = vec![ibv_wc::default(); 64];
    let mut next_id = 1u64;
    while cmp.done < cases {
        let n = 1 + rng.below(3) as usize;
        let mut batch: Vec<Req> = (0..n)
            .map(|_| {
                next_id += 1;
                Req::random(&mut rng, base, next_id, &caps, draw)
            })
            .collect();
        // A signaled request ends every batch, so both queues retire it.
        if let Some(r) = batch.last_mut() {
            r.signaled = true;
        }
        let consumers = batch.iter().filter(|r| r.consumes_recv()).count();
        if posted_recvs < 2 * consumers + 64 {
            post_recvs(512);
            posted_recvs += 512;
        }
        posted_recvs -= 2 * consumers;

        // libmlx5: one builder session for the batch.
        let pi = sq_pi(&l_lib);
        // SAFETY: a live DCI created with the builder API; every pointer named lives across
        // the session (the AHs, the arena, the data-buffer lists below).
        unsafe {
            ((*qpx).wr_start.unwrap())(qpx);
            for r in &batch {
                (*qpx).wr_id = r.wr_id;
                (*qpx).wr_flags = flags(r.signaled, false, r.fence, r.solicited).bits();
                let (t, key) = targets[r.target];
                match r.op {
                    0 => ((*qpx).wr_rdma_write.unwrap())(qpx, mr.rkey, r.raddr),
                    1 => ((*qpx).wr_rdma_write_imm.unwrap())(qpx, mr.rkey, r.raddr, r.imm.to_be()),
                    2 => ((*qpx).wr_send.unwrap())(qpx),
                    3 => ((*qpx).wr_send_imm.unwrap())(qpx, r.imm.to_be()),
                    4 => ((*qpx).wr_rdma_read.unwrap())(qpx, mr.rkey, r.raddr),
                    5 => ((*qpx).wr_atomic_cmp_swp.unwrap())(
                        qpx, mr.rkey, r.raddr, r.compare, r.swap_add,
                    ),
                    _ => ((*qpx).wr_atomic_fetch_add.unwrap())(qpx, mr.rkey, r.raddr, r.swap_add),
                }
                ((*dv).wr_set_dc_addr.unwrap())(dv, ahs[r.ah].raw.as_ptr(), t.qpn, key);
                if r.inline {
                    let bufs: Vec<ibv_data_buf> = r
                        .sgl
                        .iter()
                        .map(|&(a, l)| ibv_data_buf {
                            addr: a as *mut _,
                            length: l as usize,
                        })
                        .collect();
                    ((*qpx).wr_set_inline_data_list.unwrap())(qpx, bufs.len(), bufs.as_ptr());
                } else {
                    let sges: Vec<ibv_sge> = r
                        .sgl
                        .iter()
                        .map(|&(addr, length)| ibv_sge {
                            addr,
                            length,
                            lkey: mr.lkey,
                        })
                        .collect();
                    ((*qpx).wr_set_sge_list.unwrap())(qpx, sges.len(), sges.as_ptr());
                }
            }
            assert_eq!(((*qpx).wr_complete.unwrap())(qpx), 0, "ibv_wr_complete");
        }

        // The direct path: the same requests, rung once.
        assert_eq!(sq.producer() & 0xffff, pi & 0xffff, "both rings in step");
        for r in &batch {
            let (t, key) = targets[r.target];
            let dest = DcDest::new(ahs[r.ah].av, t.qpn, key);
            let sgl: Vec<Sge> = r
                .sgl
                .iter()
                .map(|&(a, l)| Sge::new(a, l, mr.lkey))
                .collect();
            let w = r
                .direct_wr(&sgl, RemoteBuf::new(r.raddr, mr.rkey))
                .with_flags(r.flags());
            // SAFETY: the entries lie in the registered arena, which outlives the request.
            unsafe { sq.stage_to(&dest, &w) }.unwrap_or_else(|e| panic!("post {r:?}: {e:?}"));
        }
        sq.ring();
        assert_eq!(sq_pi(&l_ours), sq_pi(&l_lib), "same blocks published");

        let mut at = pi;
        for r in &batch {
            let blocks = cmp.wqe(
                (&l_lib, q_lib.qpn),
                (&l_ours, q_ours.qpn),
                at,
                "DC WQE",
                r,
                |w| mask(w, r),
            );
            at = at.wrapping_add(blocks);
            ops[r.op as usize] += 1;
            inline_n += u64::from(r.inline);
            grh_n += u64::from(r.ah % 2 == 1);
        }

        let expect = batch.iter().filter(|r| r.signaled).count();
        let (got_lib, got_ours) = poll_both(&ctx, cq_lib, &mut cq, expect, &batch);
        assert!(got_lib.iter().all(|l| l.status == 0), "{got_lib:?}");
        compared_wc += assert_same_completions(&got_lib, &got_ours, (q_lib.qpn, q_ours.qpn));
        // The targets' receives: one per consumer on each side.
        let t = Instant::now();
        let mut got = 0;
        while got < 2 * consumers && t.elapsed() < Duration::from_secs(20) {
            let n = ctx.poll_cq(dct_cq, &mut wc_dct);
            assert!(n >= 0);
            for w in &wc_dct[..n as usize] {
                assert_eq!(w.status, 0, "a target's receive: {w:?}");
            }
            got += n as usize;
        }
        assert_eq!(got, 2 * consumers, "the targets' receives for {batch:?}");
        received += got;
    }
    cmp.assert_every_wrap_position(cnt);
    println!(
        "{mode}: differential DC: {} randomized cases ({}; {inline_n} inline; {grh_n} \
         through an AH with a GRH; to {TARGETS} targets; WQEs of {:?} blocks; {} wrapping the \
         ring end, at all {} wrap positions): WQE bytes equal; {compared_wc} completions decoded \
         alike; {received} receives at the targets",
        cmp.done,
        OPS.iter()
            .zip(ops)
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", "),
        cmp.sizes,
        cmp.wrapped,
        cmp.wrap_positions.len()
    );
}
